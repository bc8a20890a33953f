"""The chat view in a real browser: JupyterLab 4 and Notebook 7, headless Chromium (tests/browser/harness.py).

What only a browser shows: the streaming text really appears bit by bit, the buttons really reach
the kernel (possibly on a subshell thread), other cells run while a run waits, Stop cancels, and the
widget traffic of a long answer stays small. Screenshots of failures go to tests/browser/artifacts.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from .harness import KNOWN_CONSOLE_NOISE, WS_COUNTER_JS

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("NBAGENT_BROWSER_ARTIFACTS", Path(__file__).parent / "artifacts"))

SETUP = '''\
import asyncio
from nbagent import Agent, tool
from nbagent.models import FunctionModel, tool_call
from nbagent.models.base import ReasoningText
from nbagent.store.memory import MemoryStore

@tool(requires_approval=True)
def refund(order: int, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount} EUR on order {order}"

@tool
async def slow(seconds: float) -> str:
    """Wait a while."""
    await asyncio.sleep(seconds)
    return "slept"

async def stream(messages, request):
    last = messages[-1]
    if last.kind == "user" and last.content.startswith("two refunds"):
        yield [tool_call("refund", order=1, amount=5.0), tool_call("refund", order=2, amount=7.0)]
        return
    if last.kind == "user" and last.content.startswith("think"):
        for i in range(50):  # ~2 s of reasoning, with a payload that must stay text
            await asyncio.sleep(0.04)
            yield ReasoningText(f"step{i} " if i != 25 else '<img src=x onerror="window.__pwned=1"> ')
        for piece in ["So: ", "**THOUGHTEND**"]:
            yield piece
        return
    if last.kind == "user" and last.content.startswith("echo"):
        for piece in ("ECHO: " + last.content + " ECHOEND").split(" "):
            await asyncio.sleep(0.02)
            yield piece + " "
        return
    if last.kind == "user" and last.content.startswith("refund"):
        yield tool_call("refund", order=42, amount=9.5)
        return
    if last.kind == "user" and last.content.startswith("slow"):
        yield tool_call("slow", seconds=60)
        return
    if last.kind == "user" and last.content.startswith("long"):
        for i in range(4000):  # ~500 deltas per second, a fast real model
            await asyncio.sleep(0.002)
            yield f"t{i} "
        yield "LONGEND"
        return
    if last.kind == "tool-result":
        text = "The tool said: " + last.content + " ENDOFANSWER"
    else:
        text = " ".join(f"word{i}" for i in range(40)) + " **STREAMEND**"
    for piece in text.split(" "):
        await asyncio.sleep(0.04)
        yield piece + " "

agent = Agent(FunctionModel(stream_function=stream), tools=[refund, slow], store=MemoryStore())
view = agent.chat(thread="demo")
view
'''
PROBE = 'print("probe cell ran; run going on:", view.handle is not None)'


def _open(page_factory, server, make_notebook, cells=(SETUP, PROBE), **kw):
    nb = make_notebook(list(cells))
    page = page_factory(server, nb, **kw)
    page.run_cell(0)
    page.wait_idle()
    page.wait_for(lambda: page.output_buttons("Send").count() > 0, "the Send button")
    return page


def _waiting_row_text(page) -> str:
    return str(page.eval("() => Array.from(document.querySelectorAll('.nbagent-tool-row'))"
                         ".map(e => e.innerText).join('\\n')"))


def test_stream_approve_deny_and_other_cells_in_jupyterlab(jupyter_lab, make_notebook, page_factory):
    page = _open(page_factory, jupyter_lab, make_notebook)

    # text streams in: seen part-way (word10 but not the end), then complete and rendered as Markdown
    page.type_text("hello")
    page.wait_text("word3", timeout=30)
    partial = page.output_text(0)
    assert "STREAMEND" not in partial
    page.wait_text("STREAMEND", timeout=60)
    # The last delta shows as text first; the finished answer is then rendered as Markdown.
    page.wait_for(lambda: page.eval("() => !!document.querySelector('.nbagent-chat strong')"),
                  "**STREAMEND** rendered as Markdown")

    # a tool needing approval shows its arguments and the buttons
    page.type_text("refund order 42")
    page.wait_text("needs approval", timeout=30)
    rows = _waiting_row_text(page)
    assert '"order": 42' in rows and '"amount": 9.5' in rows
    for label in ("Approve", "Deny", "Edit", "Always allow refund"):
        # the row's text and its buttons are separate widgets: the buttons may render a moment later
        page.output_buttons(label).first.wait_for(state="visible", timeout=30_000)
    # kept as an artifact (the README's picture is a real run: tests/browser/test_screenshots.py)
    target = ARTIFACTS / "chat_view_pending.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    page.page.locator(".nbagent-chat").first.screenshot(path=str(target))

    # another cell executes while the run waits for approval
    page.run_cell(1)
    page.wait_text("probe cell ran", timeout=30, cell=1)

    # Approve runs the tool and the answer appears
    page.click("Approve")
    page.wait_text("The tool said: refunded 9.5 EUR on order 42", timeout=60)
    page.wait_text("ENDOFANSWER", timeout=60)

    # Deny with a reason reaches the model (the fake model echoes the tool result)
    page.type_text("refund again")
    page.wait_for(lambda: "needs approval" in _waiting_row_text(page), "a second approval", timeout=30)
    page.click("Deny")
    reason = page.page.locator(".nbagent-chat input[placeholder='reason for the model (optional)']")
    page.wait_for(lambda: any(reason.nth(i).is_visible() for i in range(reason.count())), "the reason box")
    visible = [reason.nth(i) for i in range(reason.count()) if reason.nth(i).is_visible()]
    visible[-1].fill("too expensive for a test")
    page.click("Confirm deny")
    page.wait_text("The tool said: denied by the user: too expensive for a test", timeout=60)
    assert "Traceback" not in page.output_text()
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []


def test_stop_cancels_a_slow_tool_while_other_cells_run(jupyter_lab, make_notebook, page_factory):
    page = _open(page_factory, jupyter_lab, make_notebook)
    page.type_text("slow tool please")
    page.wait_text("running", timeout=30)
    page.run_cell(1)  # the kernel stays responsive while the run goes on
    page.wait_text("probe cell ran; run going on: True", timeout=30, cell=1)
    page.click("Stop")
    page.wait_for(lambda: "cancelled" in _waiting_row_text(page), "the row marked cancelled", timeout=30)
    page.wait_text("cancelled", timeout=30)
    # the conversation stays valid: the next message gets an answer
    page.type_text("hello after stop")
    page.wait_text("STREAMEND", timeout=60)


def test_approve_in_notebook7(jupyter_notebook7, make_notebook, page_factory):
    page = _open(page_factory, jupyter_notebook7, make_notebook)
    page.type_text("refund order 42")
    page.wait_text("needs approval", timeout=30)
    assert '"order": 42' in _waiting_row_text(page)
    page.click("Approve")
    page.wait_text("The tool said: refunded 9.5 EUR on order 42", timeout=60)
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["notebook"]) == []


def test_long_answer_widget_traffic_under_half_a_megabyte(jupyter_lab, make_notebook, page_factory):
    page = _open(page_factory, jupyter_lab, make_notebook, init_script=WS_COUNTER_JS)
    page.eval("() => window.__nbagentWs.reset()")
    t0 = time.monotonic()
    page.type_text("long answer please")
    page.wait_text("LONGEND", timeout=120)
    elapsed = time.monotonic() - t0
    page.wait_idle()
    stats = page.ws_stats()
    received = stats["recv"]["bytes"]
    messages = stats["recv"]["messages"]
    report = (f"4,000-delta answer: kernel->browser {received:,} bytes in {messages} messages over "
              f"{elapsed:.1f} s ({messages / elapsed:.1f} messages/s); browser->kernel "
              f"{stats['sent']['bytes']:,} bytes")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "widget_traffic.txt").write_text(report + "\n")
    print(report)
    assert received <= 500_000, report
    assert messages / elapsed <= 40, report  # ~20 text updates/s plus kernel status messages
    text = page.output_text(0)
    assert re.search(r"t0 t1 t2 .*t3999 LONGEND", text.replace("\n", " ")), "the whole answer is shown"


def test_thinking_queued_message_and_deny_all_with_reason_in_jupyterlab(jupyter_lab, make_notebook, page_factory):
    page = _open(page_factory, jupyter_lab, make_notebook)

    # a reasoning model: the Thinking section streams, closed; a message sent meanwhile is queued
    page.type_text("think about it")
    page.wait_text("Thinking", timeout=30)
    page.type_text("echo queued one")  # Enter while the run goes on
    page.wait_text("you · queued", timeout=30)
    assert "echo queued one" in page.output_text(0)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.page.locator(".nbagent-chat").first.screenshot(path=str(ARTIFACTS / "chat_view_queued.png"))
    assert page.eval("() => document.querySelector('.nbagent-chat details.nbagent-thinking').open") is False
    assert "step1 " not in page.output_text(0)  # collapsed: the reasoning is not shown until opened
    # the queued message is sent as its own run once the first run ends, then answered
    page.wait_text("ECHO: echo queued one ECHOEND", timeout=60)
    text = page.output_text(0)
    assert text.index("THOUGHTEND") < text.index("ECHO: echo queued one")
    assert "you · queued" not in text
    # opened, the reasoning is all there, as text (the payload did not become an element)
    page.page.locator(".nbagent-chat details.nbagent-thinking summary").first.click()
    page.wait_text("step49", timeout=30)
    assert '<img src=x onerror="window.__pwned=1">' in page.output_text(0)
    assert page.eval("() => document.querySelectorAll('.nbagent-thinking img').length") == 0
    assert page.eval("() => window.__pwned === undefined")

    # Deny all asks for one reason, which reaches the model
    page.type_text("two refunds")
    page.wait_for(lambda: _waiting_row_text(page).count("needs approval") == 2, "two approvals", timeout=30)
    page.click("Deny all")
    reason = page.page.locator(".nbagent-chat input[placeholder='reason for the model, for every call (optional)']")
    reason.first.wait_for(state="visible", timeout=30_000)
    reason.first.fill("no refunds on Sundays")
    page.click("Confirm deny all")
    page.wait_text("The tool said: denied by the user: no refunds on Sundays", timeout=60)
    assert _waiting_row_text(page).count("denied by the user: no refunds on Sundays") == 2
    assert "Traceback" not in page.output_text()
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []


IMAGE_CELL = '''\
import io
from PIL import Image as PILImage
buf = io.BytesIO()
PILImage.new("RGB", (40, 30), (200, 30, 30)).save(buf, format="PNG")
view.ask(["echo picture", buf.getvalue()])
'''


def test_prompt_image_thumbnail_and_queue_in_notebook7(jupyter_notebook7, make_notebook, page_factory):
    page = _open(page_factory, jupyter_notebook7, make_notebook, cells=(SETUP, IMAGE_CELL))
    # a message typed during a run is queued here too
    page.type_text("think first")
    page.wait_text("Thinking", timeout=30)
    page.type_text("echo queued in notebook 7")
    page.wait_text("you · queued", timeout=30)
    page.wait_text("ECHO: echo queued in notebook 7 ECHOEND", timeout=60)
    # text with an image sent from code: the image shows as a real thumbnail in the conversation
    page.run_cell(1)
    page.wait_text("ECHO: echo picture ECHOEND", timeout=60)
    size = page.eval("() => { const i = document.querySelector('.nbagent-chat img');"
                     " return i ? [i.naturalWidth, i.naturalHeight, i.src.slice(0, 22)] : null; }")
    assert size == [40, 30, "data:image/png;base64,"], size
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.page.locator(".nbagent-chat").first.screenshot(path=str(ARTIFACTS / "chat_view_image.png"))
    assert "Traceback" not in page.output_text()
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["notebook"]) == []
