"""`nbagent.notebook.python_tool`: the model's code, run in the kernel after approval.

What a user notices: a call waits for approval with its code; approve runs it, deny does not,
an edit runs the edited code; prints, the last value (a DataFrame as a table, a figure as an
image) and exceptions come back to the model; an endless loop is stopped by the timeout; the
code sees the user's variables (or a namespace of its own); the user's own output is not
captured; and a call never runs twice, even across a kernel restart (a killed process).
The model is always `FunctionModel`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nbagent import Agent
from nbagent.display.html import args_html
from nbagent.exceptions import UserError
from nbagent.models import FunctionModel, tool_call
from nbagent.notebook import python_tool
from nbagent.store import MemoryStore, SQLiteStore

ROOT = Path(__file__).resolve().parents[1]


def runs(*codes: str) -> FunctionModel:
    """A model that asks for each code in turn, then answers with the last result it read."""

    def answer(messages: list[Any], info: Any) -> Any:
        asked = sum(m.kind == "assistant" for m in messages)
        if asked < len(codes):
            return tool_call("python", id=f"py{asked}", code=codes[asked])
        return f"model saw: {messages[-1].content}"

    return FunctionModel(answer)


def results(result: Any) -> list[Any]:
    return [m for m in result.messages if m.kind == "tool-result"]


async def run_code(code: str, **options: Any) -> Any:
    """One approved-by-policy call of `code`; its result message."""
    options.setdefault("namespace", {})
    agent = Agent(runs(code), tools=[python_tool(requires_approval=False, **options)])
    result = await agent.run("go")
    assert result.status == "completed"
    [message] = results(result)
    return message


# ---------------------------------------------------------------------- approval
async def test_a_call_waits_for_approval_by_default_showing_its_code() -> None:
    ns: dict[str, Any] = {}
    agent = Agent(runs("ran = True\n'yes'"), tools=[python_tool(namespace=ns)], store=MemoryStore())
    result = await agent.run("go", thread="t")
    assert result.status == "paused"
    [pending] = result.pending
    assert (pending.name, pending.args, pending.reason) == ("python", {"code": "ran = True\n'yes'"}, "approval")
    assert "ran" not in ns  # nothing ran yet

    done = await agent.resume(result, approve=[pending])
    assert done.status == "completed" and ns["ran"] is True
    assert done.output == "model saw: yes"


async def test_deny_does_not_run_the_code() -> None:
    ns: dict[str, Any] = {}
    agent = Agent(runs("ran = True"), tools=[python_tool(namespace=ns)], store=MemoryStore())
    result = await agent.run("go", thread="t")
    done = await agent.resume(result, deny={"py0": "not on my machine"})
    assert "ran" not in ns
    assert done.output.startswith("model saw: denied by the user: not on my machine\npython was not run.")


async def test_an_edited_call_runs_the_edited_code() -> None:
    ns: dict[str, Any] = {}
    agent = Agent(runs("import shutil; shutil.rmtree('/')"), tools=[python_tool(namespace=ns)], store=MemoryStore())
    result = await agent.run("go", thread="t")
    done = await agent.resume(result, edit={"py0": {"code": "edited = 1\nprint('safe')"}})
    assert ns["edited"] == 1
    [message] = results(done)
    assert message.content == "safe" and message.edited_args == {"code": "edited = 1\nprint('safe')"}


def test_the_approval_row_shows_the_code_as_an_escaped_code_block() -> None:
    code = "x = '<script>alert(1)</script>'\nprint(x)"
    html = args_html({"code": code}, full=True)
    assert 'class="nbagent-code"' in html
    assert "<script>" not in html and "&lt;script&gt;" in html.replace("&lt;/", "&lt;")
    assert "\\n" not in html  # real lines, not a JSON string
    assert 'style="color' in html  # highlighted (pygments ships with IPython)


async def test_the_view_shows_the_code_and_edit_runs_the_edited_code() -> None:
    pytest.importorskip("ipywidgets")
    import json

    from tests.widgets.test_widgets import ask, click, waiting_rows

    ns: dict[str, Any] = {}
    agent = Agent(runs("import os\nos.listdir('/')"), tools=[python_tool(namespace=ns)], store=MemoryStore())
    view = agent.chat(thread="t-view")
    assert (await ask(view, "look around")).status == "paused"
    [row] = waiting_rows(view)
    assert 'class="nbagent-code"' in row.html.value and "listdir" in row.html.value
    await click(row.buttons["Edit"])
    assert json.loads(row.edit_area.value) == {"code": "import os\nos.listdir('/')"}
    row.edit_area.value = json.dumps({"code": "answer = 6 * 7\nanswer"})
    await click(row.buttons["Approve edited"])
    result = await view.wait()
    assert result.status == "completed" and result.output == "model saw: 42" and ns["answer"] == 42
    assert "edited" in row.html.value and "answer = 6 * 7" in row.html.value


def test_python_tool_refuses_bad_options() -> None:
    with pytest.raises(UserError, match="timeout"):
        python_tool(timeout=0)
    with pytest.raises(UserError, match="namespace"):
        python_tool(namespace=[])  # type: ignore[arg-type]


# ---------------------------------------------------------------------- what comes back
async def test_prints_and_the_last_value_come_back() -> None:
    message = await run_code("import sys\nx = 6 * 7\nprint('hello')\nprint('careful', file=sys.stderr)\nx")
    assert message.status == "done" and not message.is_error
    assert message.content == "[stdout]\nhello\n[stderr]\ncareful\n[value]\n42"
    assert (await run_code("'only a value'")).content == "only a value"
    assert (await run_code("y = 1")).content == "(no output)"
    assert (await run_code("for i in range(3): print(i)")).content == "0\n1\n2"
    assert (await run_code("import sys\nsys.stdout.writelines(['a\\n', 'b\\n'])")).content == "a\nb"


async def test_a_dataframe_value_is_a_table() -> None:
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"city": ["Paris", "Lyon"], "sales": [10, 20]})
    message = await run_code("print('two rows')\ndf", namespace={"df": df})
    assert message.content.startswith("[stdout]\ntwo rows\n[value]\n")
    assert df.to_string() in message.content and "[2 rows x 2 columns]" in message.content
    assert message.display is not None and "<table" in message.display["text/html"]  # the view's table


async def test_a_figure_is_an_image() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    code = "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 3, 2])\nfig"
    message = await run_code(code)
    assert [i.media_type for i in message.images] == ["image/png"]
    assert message.content.startswith("[image: image/png")
    # pyplot figures a call opens are sent too (as a notebook shows them), and closed afterwards
    message = await run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2]); print('plotted')")
    assert len(message.images) == 1 and message.content == "plotted"
    import matplotlib.pyplot as plt

    assert plt.get_fignums() == []


async def test_an_exception_is_a_tool_error_with_a_short_traceback() -> None:
    agent = Agent(runs("print('before')\ndef f():\n    return 1 / 0\nf()"),
                  tools=[python_tool(namespace={}, requires_approval=False)])
    result = await agent.run("go")
    assert result.status == "completed"  # the run goes on: the model reads the error
    [message] = results(result)
    assert message.is_error and message.status == "failed"
    assert message.content.startswith("[stdout]\nbefore\n[error]\nTraceback (most recent call last):")
    assert 'line 4, in <module>' in message.content and "return 1 / 0" in message.content
    assert message.content.endswith("ZeroDivisionError: division by zero")
    assert "nbagent" not in message.content  # no frames of nbagent's own
    syntax = await run_code("def f(:")
    assert syntax.is_error and "SyntaxError" in syntax.content


async def test_an_endless_loop_is_stopped_by_the_timeout() -> None:
    ns: dict[str, Any] = {}
    start = time.perf_counter()
    message = await run_code("print('looping')\nn = 0\nwhile True:\n    n += 1", timeout=1, namespace=ns)
    elapsed = time.perf_counter() - start
    assert message.is_error
    assert message.content == "[stdout]\nlooping\n[error]\ntimed out after 1 s: the code was stopped"
    assert elapsed < 2.0, elapsed  # within a second of the timeout
    counted = ns["n"]
    await asyncio.sleep(0.2)
    assert ns["n"] == counted  # really stopped


async def test_a_blocking_sleep_is_stopped_by_the_timeout_too() -> None:
    ns: dict[str, Any] = {}
    start = time.perf_counter()
    message = await run_code("import time\ntime.sleep(30)\nlate = True", timeout=0.5, namespace=ns)
    assert message.content == "timed out after 0.5 s: the code was stopped"
    assert time.perf_counter() - start < 1.5  # the signal ends the sleep: no waiting for it to return
    assert "late" not in ns


async def test_code_that_catches_the_stop_and_ends_later_is_answered_when_it_ends() -> None:
    code = ("import time\nend = time.monotonic() + 1.5\nwhile time.monotonic() < end:\n    try:\n"
            "        time.sleep(0.05)\n    except BaseException:\n        print('caught it')\nprint('ended')")
    message = await run_code(code, timeout=0.5)
    assert message.is_error and message.content.startswith("[stdout]\ncaught it\n")
    assert "ended\n[error]\ntimed out after 0.5 s: the code caught the stop signal and ran on for " in message.content
    assert message.content.endswith(" s more, until it ended")


async def test_awaiting_code_that_catches_the_stop_is_said_to_still_run_in_the_kernel() -> None:
    ns: dict[str, Any] = {"done": False, "ticks": 0}
    code = ("import asyncio\nwhile not done:\n    try:\n        await asyncio.sleep(0.05)\n"
            "        ticks += 1\n    except BaseException:\n        pass")
    start = time.perf_counter()
    message = await run_code(code, timeout=0.5, namespace=ns)
    assert time.perf_counter() - start < 2.0  # answered on time: the loop was free
    assert message.content == ("timed out after 0.5 s: the code did not stop (it caught the stop signal): it still "
                               "runs in the kernel, and a restart ends it")
    ticks = ns["ticks"]
    await asyncio.sleep(0.3)
    assert ns["ticks"] > ticks  # true: it still runs
    ns["done"] = True  # (what a restart would do)
    await asyncio.sleep(0.2)


async def test_the_interrupt_signal_stops_the_code_and_the_run_goes_on() -> None:
    import signal

    ns: dict[str, Any] = {}
    before = signal.getsignal(signal.SIGINT)
    main = threading.main_thread().ident
    assert main is not None
    timer = threading.Timer(0.5, signal.pthread_kill, (main, signal.SIGINT))  # the Interrupt button
    timer.start()
    message = await run_code("n = 0\nwhile True:\n    n += 1", timeout=None, namespace=ns)
    timer.join()
    assert message.is_error and message.content.startswith("Traceback (most recent call last):")
    assert 'File "<python call' in message.content and message.content.endswith("KeyboardInterrupt")
    assert ns["n"] > 0
    assert signal.getsignal(signal.SIGINT) == before  # put back as it was


async def test_code_run_off_the_main_thread_cannot_be_interrupted_and_the_answer_says_so() -> None:
    outcome: list[Any] = []
    worker = threading.Thread(target=lambda: outcome.append(asyncio.run(
        run_code("import time\ntime.sleep(1)\nprint('woke')", timeout=0.3))))
    worker.start()
    worker.join(10)
    [message] = outcome
    assert message.content.startswith("[stdout]\nwoke\n[error]\ntimed out after 0.3 s: the code could not be "
                                      "interrupted (it ran off the kernel's main thread")


# ---------------------------------------------------------------------- namespaces and output
async def test_a_namespace_of_its_own_is_isolated_and_persists_between_calls() -> None:
    import __main__

    first: dict[str, Any] = {}
    second: dict[str, Any] = {}
    one = Agent(runs("secret = 41", "secret + 1"), tools=[python_tool(namespace=first, requires_approval=False)])
    assert (await one.run("go")).output == "model saw: 42"
    other = await run_code("secret", namespace=second)
    assert other.is_error and "NameError" in other.content
    assert first["secret"] == 41 and "secret" not in second and "secret" not in vars(__main__)


async def test_without_a_namespace_the_code_uses_the_ipython_users_globals() -> None:
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        shell.run_cell("revenue = [3, 4, 5]")
        agent = Agent(runs("total = sum(revenue)\ntotal"), tools=[python_tool(requires_approval=False)])
        assert (await agent.run("go")).output == "model saw: 12"
        assert shell.user_ns["total"] == 12  # the user sees what the code made
    finally:
        InteractiveShell.clear_instance()


async def test_the_users_own_output_is_not_captured_while_code_runs(capsys: pytest.CaptureFixture[str]) -> None:
    before = sys.stdout

    def user_thread() -> None:  # the user's thread, printing while the tool's code runs
        for i in range(6):
            print("user", i)
            time.sleep(0.04)

    code = "import time\nfor i in range(6):\n    print('tool', i)\n    time.sleep(0.05)"
    threading.Thread(target=user_thread).start()
    message = await run_code(code)
    assert message.content == "\n".join(f"tool {i}" for i in range(6))
    await asyncio.sleep(0.1)
    assert capsys.readouterr().out == "".join(f"user {i}\n" for i in range(6))
    assert sys.stdout is before  # the streams are back as they were


async def test_while_code_awaits_the_users_cells_print_to_the_notebook(capsys: pytest.CaptureFixture[str]) -> None:
    code = "import asyncio\nfor i in range(4):\n    print('tool', i)\n    await asyncio.sleep(0.05)\n'done'"
    agent = Agent(runs(code), tools=[python_tool(namespace={}, requires_approval=False)])
    task = asyncio.create_task(agent.run("go"))
    for i in range(4):
        await asyncio.sleep(0.04)
        print("user", i)  # the user's cell, printing while the tool's code awaits
    [message] = results(await task)
    assert message.content == "[stdout]\n" + "\n".join(f"tool {i}" for i in range(4)) + "\n[value]\ndone"
    assert capsys.readouterr().out == "".join(f"user {i}\n" for i in range(4))


# ---------------------------------------------------------------------- exactly once
async def test_a_call_that_ran_is_never_run_again_by_a_new_agent_on_a_new_store_object(tmp_path: Path) -> None:
    path = tmp_path / "threads.db"
    ns: dict[str, Any] = {"count": 0}
    code = "count += 1\ncount"
    agent = Agent(runs(code), tools=[python_tool(namespace=ns)], store=SQLiteStore(path))
    paused = await agent.run("go", thread="t")
    done = await agent.resume(paused, approve=paused.pending)
    assert done.output == "model saw: 1" and ns["count"] == 1
    await agent.store.close()

    # "After a restart": a new store object on the same file, a new agent, a fresh namespace.
    fresh: dict[str, Any] = {"count": 0}
    later = Agent(runs(code), tools=[python_tool(namespace=fresh)], store=SQLiteStore(path))
    again = await later.run("and now?", thread="t")
    assert again.status == "completed" and fresh["count"] == 0  # the stored call was not re-run
    assert [m.content for m in results(again)] == ["1"]
    await later.store.close()


def one_call_per_prompt(messages: list[Any], info: Any) -> Any:
    if messages[-1].kind == "user":
        return tool_call("python", code=messages[-1].content)
    return f"model saw: {messages[-1].content}"


async def test_after_a_restart_the_next_call_says_the_variables_are_gone(tmp_path: Path) -> None:
    from nbagent.notebook import _python_tool

    path = tmp_path / "threads.db"
    agent = Agent(FunctionModel(one_call_per_prompt), tools=[python_tool(namespace={}, requires_approval=False)],
                  store=SQLiteStore(path))
    assert (await agent.run("x = 41\nx + 1", thread="t")).output == "model saw: 42"
    second = await agent.run("x", thread="t")  # the same kernel: no note
    assert second.output == "model saw: 41"
    await agent.store.close()

    # "After a restart": a new agent on the same store, and a namespace without the old variables.
    later = Agent(FunctionModel(one_call_per_prompt), tools=[python_tool(namespace={}, requires_approval=False)],
                  store=SQLiteStore(path))
    result = await later.run("x", thread="t")
    message = results(result)[-1]
    assert message.content.startswith(f"[note]\n{_python_tool.RESTARTED_NOTE}\n[error]\nTraceback")
    assert "NameError: name 'x' is not defined" in message.content
    again = await later.run("x = 1\nx", thread="t")  # said once: the last call ran in this kernel
    assert results(again)[-1].content == "1"
    await later.store.close()


async def test_the_note_follows_the_namespace_not_the_tool_object() -> None:
    from nbagent.notebook import _python_tool

    store, ns = MemoryStore(), {}
    first = Agent(FunctionModel(one_call_per_prompt), tools=[python_tool(namespace=ns, requires_approval=False)],
                  store=store)
    await first.run("x = 41", thread="t")
    # The cell that made the agent, run again: a new tool, the same kernel variables. No note.
    second = Agent(FunctionModel(one_call_per_prompt), tools=[python_tool(namespace=ns, requires_approval=False)],
                   store=store)
    assert (await second.run("x + 1", thread="t")).output == "model saw: 42"
    assert _python_tool.MARK in ns and "x" in ns
    ns.clear()  # %reset: the variables are gone, and the note says so
    result = await second.run("1 + 1", thread="t")
    assert results(result)[-1].content == f"[note]\n{_python_tool.RESTARTED_NOTE}\n[value]\n2"


CHILD = """
import sys, asyncio
sys.path.insert(0, {root!r})
from nbagent import Agent
from nbagent.models import FunctionModel, tool_call
from nbagent.notebook import python_tool
from nbagent.store import SQLiteStore

def answer(messages, info):
    if messages[-1].kind == "user":
        return tool_call("python", id="py0", code={code!r})
    return "done: " + messages[-1].content

agent = Agent(FunctionModel(answer), tools=[python_tool(namespace={{}}, requires_approval=False, timeout=None)],
              store=SQLiteStore({db!r}))
asyncio.run(agent.run("go", thread="t"))
"""


async def test_a_call_running_when_the_kernel_died_is_never_re_run(tmp_path: Path) -> None:
    db, marker = str(tmp_path / "threads.db"), tmp_path / "ran.txt"
    code = (f"open({str(marker)!r}, 'a').write('ran\\n')\n"
            "import time\nwhile True:\n    time.sleep(0.05)")
    errors = tmp_path / "child.err"
    with errors.open("w") as err:
        child = subprocess.Popen([sys.executable, "-c", CHILD.format(root=str(ROOT), code=code, db=db)], stderr=err)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.05)
        time.sleep(0.1)  # the code runs on after its first line
        assert marker.exists() and child.poll() is None, errors.read_text()
    finally:
        os.kill(child.pid, signal.SIGKILL)  # the kernel dies while the code runs
        child.wait()

    agent = Agent(runs(code), tools=[python_tool(namespace={}, requires_approval=False)], store=SQLiteStore(db))
    result = await agent.resume(thread="t")
    assert result.status == "completed"
    [message] = results(result)
    assert message.status == "interrupted" and message.is_error
    assert "not known whether it completed" in message.content
    assert marker.read_text() == "ran\n"  # once, before the kill; never again
    await agent.store.close()
