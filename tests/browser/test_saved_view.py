"""A saved notebook, opened again in real JupyterLab: what a newcomer sees before running a cell.

- An example notebook opened from the checkout is untrusted, so JupyterLab sanitizes its HTML
  outputs and drops every inline declaration with a theme variable. The saved copy of a chat view
  still has its border, bubbles and status label (their plain fallbacks), in the light and in the
  dark theme, and opening the notebook does not mark it modified. So do a saved copy and a run's
  summary as this checkout builds them.
- A notebook saved while its view was live reopens with ipywidgets' "Error displaying widget: model
  not found" above the saved copy; after `clean_outputs` it reopens with the saved copy alone.

Screenshots: tests/browser/artifacts/saved-view-{light,dark}.png, saved-fresh-{light,dark}.png.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from nbagent.notebook import clean_outputs

from .harness import KNOWN_CONSOLE_NOISE
from .test_view_render import CONTRAST_JS

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120.0

# An nbagent output (`root`): is it sanitized, framed, its status label (`pill`) and the user's bubble
# tinted, and what colour are its muted text ("you") and its text.
_LOOK_JS = """
([root, pill]) => {
  const box = document.querySelector(root);
  if (!box) return null;
  const clear = (c) => c === 'transparent' || /rgba\\(.*,\\s*0\\)$/.test(c);
  const style = getComputedStyle(box);
  const label = Array.from(box.querySelectorAll('span')).find((s) => s.textContent.trim() === pill);
  const bubble = Array.from(box.querySelectorAll('div')).find((d) => d.textContent.trim().startsWith('you'));
  const you = bubble ? bubble.querySelector('span') : null;
  return {
    sanitized: !(box.getAttribute('style') || '').includes('var('),
    border: style.borderTopStyle === 'solid' && !clear(style.borderTopColor),
    pill: label ? !clear(getComputedStyle(label).backgroundColor) : null,
    bubble: bubble ? !clear(getComputedStyle(bubble).backgroundColor) : null,
    muted: you ? getComputedStyle(you).color : null,
    text: style.color,
  };
}
"""
COPY = (".nbagent-transcript", "waiting")
SUMMARY = (".nbagent-result", "needs approval")


def _dirty(page) -> bool:
    return page.eval("() => document.querySelector('.jp-mod-dirty') !== null")


def _check_untrusted_look(page, outputs, shot) -> list[str]:
    """In JupyterLab Light, then Dark: each of `outputs` (its root's selector, its status label) is
    sanitized and keeps its look by its plain styles: frame, tinted label and bubble, grey muted
    text, and the bubble's and the label's text read on their backgrounds (4.5:1 or more).
    ``shot("light" | "dark")`` takes the screenshot. Returns the outputs' text colours, light then dark."""
    texts = []
    try:
        for theme, light in (("JupyterLab Light", "true"), ("JupyterLab Dark", "false")):
            page.command("apputils:change-theme", {"theme": theme})
            page.wait_for(lambda light=light: page.eval("() => document.body.dataset.jpThemeLight") == light, theme)
            page.page.wait_for_timeout(500)
            for root, pill in outputs:
                look = page.eval(_LOOK_JS, [root, pill])
                assert look["sanitized"], "the notebook is trusted: this test must see the sanitized output"
                assert look["border"] and look["pill"] and look["bubble"], (theme, root, look)
                assert look["muted"] == "rgb(128, 128, 128)", (theme, root, look)  # the plain grey
                texts.append(look["text"])
                found = page.eval(CONTRAST_JS, f"{root} span, {root} div")
                checked = [f for f in found if f[0] == pill or f[0].endswith("Use the book_table tool for Paris.")]
                assert len(checked) == 2, (root, found)
                assert [f for f in checked if f[1] < 4.5] == [], (theme, root, checked)
            shot("light" if light == "true" else "dark")
    finally:
        page.command("apputils:change-theme", {"theme": "JupyterLab Light"})  # the server's settings are shared
        page.wait_for(lambda: page.eval("() => document.body.dataset.jpThemeLight") == "true", "the light theme")
    return texts


def test_an_untrusted_example_notebook_keeps_its_look_light_and_dark(jupyter_lab, browser_root, page_factory,
                                                                     browser_artifacts_dir):
    shutil.copy(ROOT / "notebooks" / "02_approve_tools.ipynb", browser_root / "saved_02.ipynb")
    page = page_factory(jupyter_lab, "saved_02.ipynb", timeout=TIMEOUT)
    page.wait_for(lambda: page.eval(_LOOK_JS, list(COPY)), "the saved copy")
    page.page.wait_for_timeout(1000)  # the kernel has started and reported its info by now
    assert not _dirty(page), "opening the notebook marked it modified"
    copy = page.page.locator(".nbagent-transcript").first

    def shot(theme: str) -> None:
        copy.scroll_into_view_if_needed()
        copy.screenshot(path=str(browser_artifacts_dir / f"saved-view-{theme}.png"))

    texts = _check_untrusted_look(page, [COPY], shot)
    # the text has no colour of its own: it inherits the theme's (dark on light, light on dark)
    assert texts[0] != texts[1], texts
    assert "Error displaying widget" not in page.output_text()
    assert not _dirty(page)
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []


def _fresh_outputs() -> list[dict]:
    """A paused run's saved copy and its summary, as this checkout builds them (the example
    notebooks keep the outputs of the version that made them)."""
    from nbagent import Agent, tool
    from nbagent.display.html import render_result_html
    from nbagent.models import ScriptedModel, tool_call
    from nbagent.store import MemoryStore
    from nbagent.widgets._transcript import transcript_bundle

    @tool(requires_approval=True)
    def book_table(city: str) -> str:
        """Book a table."""
        return f"booked in {city}"

    agent = Agent(ScriptedModel([tool_call("book_table", city="Paris")]), tools=[book_table], store=MemoryStore())
    result = agent.run_sync("Use the book_table tool for Paris.", thread="t-fresh")
    summary = {"text/html": render_result_html(result), "text/plain": repr(result)}
    return [{"output_type": "display_data", "metadata": {}, "data": data}
            for data in (transcript_bundle("t-fresh", result.messages), summary)]


def test_a_fresh_saved_copy_and_summary_keep_their_look_untrusted(jupyter_lab, browser_root, page_factory,
                                                                   browser_artifacts_dir):
    cell = {"cell_type": "code", "id": "c1", "metadata": {}, "execution_count": 1, "source": "view",
            "outputs": _fresh_outputs()}
    notebook = {"nbformat": 4, "nbformat_minor": 5, "cells": [cell],
                "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}}
    (browser_root / "fresh_saved.ipynb").write_text(json.dumps(notebook))  # not signed: opens untrusted
    page = page_factory(jupyter_lab, "fresh_saved.ipynb", timeout=TIMEOUT)
    page.wait_for(lambda: all(page.eval(_LOOK_JS, list(o)) for o in (COPY, SUMMARY)), "the two outputs")
    outputs = page.page.locator(".jp-OutputArea").first

    def shot(theme: str) -> None:
        outputs.screenshot(path=str(browser_artifacts_dir / f"saved-fresh-{theme}.png"))

    texts = _check_untrusted_look(page, [COPY, SUMMARY], shot)
    # the text has no colour of its own: it inherits the theme's (dark on light, light on dark)
    assert texts[0] != texts[2] and texts[1] != texts[3], texts
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []


VIEW_CELL = """\
from nbagent import Agent
from nbagent.models import TestModel
from nbagent.store import MemoryStore
agent = Agent(TestModel(text="Hello from the saved view."), store=MemoryStore())
view = agent.chat(thread="saved-t1")
view"""


def test_a_notebook_saved_with_a_live_view_reopens_clean_after_clean_outputs(jupyter_lab, browser_root,
                                                                             make_notebook, page_factory):
    name = make_notebook([VIEW_CELL, "result = await view.ask('hi'); print(result.status)"])
    page = page_factory(jupyter_lab, name, timeout=TIMEOUT)
    page.run_all()
    page.wait_text("completed", timeout=TIMEOUT)
    page.page.wait_for_timeout(500)  # the saved copy's update follows the run's end
    page.command("docmanager:save")
    page.wait_for(lambda: not _dirty(page), "the save")
    page.close()
    saved = json.loads((browser_root / name).read_text())
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in saved["cells"][0]["outputs"])

    again = page_factory(jupyter_lab, name, timeout=TIMEOUT)
    again.wait_text("Error displaying widget: model not found", timeout=TIMEOUT)  # what ipywidgets draws
    again.wait_text("Hello from the saved view.", timeout=TIMEOUT)                 # the saved copy under it
    again.close()

    assert clean_outputs(browser_root / name) == 1
    clean = page_factory(jupyter_lab, name, timeout=TIMEOUT)
    clean.wait_text("Hello from the saved view.", timeout=TIMEOUT)
    clean.page.wait_for_timeout(1500)  # a widget output would have drawn by now
    assert "Error displaying widget" not in clean.output_text()
    assert "saved copy" in clean.output_text(0)
