"""`python_tool` in a real Jupyter kernel (ipykernel, driven with jupyter_client as a front end
drives it): the run is a background task started by a cell that has returned, as in the chat view.

What a user notices: the model's code runs on the kernel's main thread like a cell; the
Interrupt button stops it (code that loops, code that awaits) and the run goes on; the timeout
stops a blocking ``time.sleep``; while code awaits, other cells run at once; a thread of the
user's printing meanwhile prints to the notebook, not into the tool's result; under ``run_sync``
in a cell the code runs in that cell and the timeout stops it. The model is `FunctionModel`.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("ipykernel")
from jupyter_client import KernelManager

SETUP = '''
import asyncio, threading, time
from nbagent import Agent
from nbagent.models import FunctionModel, tool_call
from nbagent.notebook import python_tool

def asks(code):
    def answer(messages, info):
        if messages[-1].kind == "user":
            return tool_call("python", code=code)
        return messages[-1].content
    return FunctionModel(answer)

def start(code, timeout=None):
    """What the chat view does: the run is a task on the kernel's loop; the cell returns at once."""
    global task
    agent = Agent(asks(code), tools=[python_tool(requires_approval=False, timeout=timeout)], store=None)
    task = asyncio.ensure_future(agent.run("go"))
'''


class Front:
    """A kernel and the few things a notebook front end does with it."""

    def __init__(self) -> None:
        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel()
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)
        self.stray: list[str] = []  # printed under an earlier cell (a thread it started, after it ended)

    def run(self, code: str, timeout: float = 60) -> tuple[str, float]:
        """Execute a cell; its printed text and value, and how long until the kernel answered."""
        start = time.perf_counter()
        msg_id = self.client.execute(code)
        out: list[str] = []
        while True:
            msg = self.client.get_iopub_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") != msg_id:
                if msg["msg_type"] == "stream":
                    self.stray.append(msg["content"]["text"])
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind == "execute_result":
                out.append(content["data"]["text/plain"])
            elif kind == "error":
                raise AssertionError("\n".join(content["traceback"]))
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(out), time.perf_counter() - start

    def value(self, expression: str) -> Any:
        text, _ = self.run(expression)
        return eval(text) if text else None  # the kernel's repr of a literal

    def wait_for(self, expression: str, timeout: float = 30) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.value(expression)
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"never true: {expression}")

    def drain(self) -> str:
        """What the kernel printed outside the cells run since the last drain."""
        while True:
            try:
                msg = self.client.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                break
            if msg["msg_type"] == "stream":
                self.stray.append(msg["content"]["text"])
        text, self.stray = "".join(self.stray), []
        return text

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def front() -> Iterator[Front]:
    kernel = Front()
    try:
        kernel.run(SETUP)
        yield kernel
    finally:
        kernel.close()


def result(front: Front) -> tuple[str, str]:
    """The finished run's tool result: (status, content)."""
    front.wait_for("task.done()")
    return front.value("[(m.status, m.content) for m in task.result().messages if m.kind == 'tool-result'][0]")


def test_the_code_runs_on_the_kernels_main_thread_like_a_cell(front: Front) -> None:
    front.run("start('import threading\\nthreading.current_thread().name')")
    assert result(front) == ("done", "MainThread")


def test_the_interrupt_button_stops_looping_code_and_the_run_goes_on(front: Front) -> None:
    front.run("start('n = 0\\nwhile True:\\n    n += 1')")  # the cell returns; the loop runs on
    time.sleep(1)
    front.manager.interrupt_kernel()  # what the Interrupt button sends
    status, content = result(front)
    assert status == "failed" and content.startswith("Traceback") and content.endswith("KeyboardInterrupt")
    assert front.value("n > 1000")
    assert front.value("task.result().status") == "completed"  # the model read it and answered
    front.manager.interrupt_kernel()  # idle again: the kernel's own handling of SIGINT is back
    time.sleep(0.3)
    assert front.value("'still answering'") == "still answering"


def test_the_interrupt_button_cancels_code_that_awaits(front: Front) -> None:
    front.run("start('await asyncio.sleep(30)')")
    time.sleep(0.5)
    front.manager.interrupt_kernel()
    status, content = result(front)
    assert (status, content) == ("failed", "KeyboardInterrupt: the user interrupted the code while it awaited")


def test_the_timeout_stops_a_blocking_sleep_on_time(front: Front) -> None:
    front.run("start('import time\\ntime.sleep(30)', timeout=1)")
    start = time.monotonic()
    status, content = result(front)
    assert (status, content) == ("failed", "timed out after 1 s: the code was stopped")
    assert time.monotonic() - start < 5


def test_other_cells_run_while_the_code_awaits(front: Front) -> None:
    front.run("start('await asyncio.sleep(4)\\n\"woke\"')")
    time.sleep(0.3)
    text, took = front.run("print('a cell meanwhile')")
    assert text == "a cell meanwhile\n" and took < 2.0  # not 4 s: the loop is free while the code awaits
    assert result(front) == ("done", "woke")


def test_code_that_does_not_await_keeps_the_kernel_busy_as_a_cell_does(front: Front) -> None:
    front.run("start('import time\\ntime.sleep(2)\\n\"slept\"')")
    time.sleep(0.3)
    _, took = front.run("1")
    assert took > 1.0  # the cell waited for the code, as it waits for a cell before it
    assert result(front) == ("done", "slept")


def test_a_users_thread_printing_meanwhile_prints_to_the_notebook(front: Front) -> None:
    front.drain()
    front.run("""
def chatter():
    for i in range(4):
        print('user thread', i)
        time.sleep(0.1)
threading.Thread(target=lambda: (time.sleep(0.1), chatter())).start()
start('import time\\nfor i in range(4):\\n    print("tool", i)\\n    time.sleep(0.1)')
""")
    assert result(front) == ("done", "tool 0\ntool 1\ntool 2\ntool 3")
    time.sleep(0.3)
    assert front.drain().count("user thread") == 4


def test_run_sync_in_a_cell_runs_the_code_in_that_cell_and_the_timeout_stops_it(front: Front) -> None:
    text, took = front.run("""
agent = Agent(asks('import threading, time\\nprint(threading.current_thread().name)\\nwhile True:\\n    pass'),
              tools=[python_tool(requires_approval=False, timeout=1)], store=None)
print(agent.run_sync("go").output)
""")
    assert text == "[stdout]\nMainThread\n[error]\ntimed out after 1 s: the code was stopped\n"
    assert took < 5


# ---------------------------------------------------------------------- a kernel of its own (kernel=)
def one_call_per_prompt(messages: list[Any], info: Any) -> Any:
    from nbagent.models import tool_call

    if messages[-1].kind == "user":
        return tool_call("python", code=messages[-1].content)
    return messages[-1].content


@pytest.fixture(scope="module")
def isolated() -> Any:
    """An agent whose python tool runs its code in a kernel of its own."""
    from nbagent import Agent
    from nbagent.models import FunctionModel
    from nbagent.notebook import python_tool
    from nbagent.store import MemoryStore

    agent = Agent(FunctionModel(one_call_per_prompt), store=MemoryStore(),
                  tools=[python_tool(kernel="python3", timeout=3, requires_approval=False)])
    return agent  # its kernel ends when the agent is collected, or at exit


async def ask(agent: Any, code: str, thread: str = "k") -> Any:
    result = await agent.run(code, thread=thread)
    return [m for m in result.messages if m.kind == "tool-result"][-1]


async def test_a_kernel_of_its_own_keeps_its_variables_and_not_ours(isolated: Any) -> None:
    import os

    assert (await ask(isolated, "import os\nsecret = 41\nprint('pid', os.getpid())")).content.startswith("pid ")
    message = await ask(isolated, "secret + 1")
    assert (message.status, message.content) == ("done", "42")
    pid = int((await ask(isolated, "os.getpid()")).content)
    assert pid != os.getpid()  # another process
    assert "secret" not in globals()


async def test_a_kernel_of_its_own_answers_as_a_cell_does(isolated: Any) -> None:
    pytest.importorskip("pandas")
    message = await ask(isolated, "import sys\nprint('out')\nprint('err', file=sys.stderr)\n1/0")
    assert message.is_error and message.content.startswith("[stdout]\nout\n[stderr]\nerr\n[error]\n")
    assert "ZeroDivisionError" in message.content and "\x1b[" not in message.content  # no terminal colours
    table = await ask(isolated, "import pandas as pd\npd.DataFrame({'city': ['Paris', 'Lyon'], 'sales': [10, 20]})")
    assert "Paris" in table.content and table.display is not None and "<table" in table.display["text/html"]
    pytest.importorskip("matplotlib")
    figure = await ask(isolated, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]); print('plotted')")
    assert figure.content == "plotted" and [i.media_type for i in figure.images] == ["image/png"]


async def test_a_kernel_of_its_own_is_interrupted_at_the_timeout(isolated: Any) -> None:
    start = time.monotonic()
    message = await ask(isolated, "import time\nkept = 1\ntime.sleep(30)")
    assert message.content == "timed out after 3 s: the code was stopped"
    assert time.monotonic() - start < 8
    assert (await ask(isolated, "kept")).content == "1"  # the same kernel: its variables are still there


async def test_a_kernel_of_its_own_is_restarted_when_the_code_catches_the_stop(isolated: Any) -> None:
    from nbagent.notebook._python_tool import RESTARTED_NOTE

    code = "import time\nwhile True:\n    try:\n        time.sleep(0.05)\n    except BaseException:\n        pass"
    message = await ask(isolated, code, thread="stubborn")
    assert message.content == ("timed out after 3 s: the code did not stop when interrupted, so its kernel was "
                               "restarted: the variables of earlier calls are gone")
    after = await ask(isolated, "'fresh'", thread="stubborn")
    assert after.content == f"[note]\n{RESTARTED_NOTE}\n[value]\n'fresh'"


async def test_a_kernel_of_its_own_ends_with_its_tool() -> None:
    import gc
    import os

    from nbagent import Agent
    from nbagent.models import FunctionModel
    from nbagent.notebook import python_tool

    agent = Agent(FunctionModel(one_call_per_prompt), tools=[python_tool(kernel="python3", requires_approval=False)],
                  store=None)
    pid = int((await ask(agent, "import os\nos.getpid()")).content)
    os.kill(pid, 0)  # it runs
    del agent
    gc.collect()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"the kernel {pid} outlived its tool")


def test_kernel_names_a_kernel_that_exists() -> None:
    from nbagent.exceptions import UserError
    from nbagent.notebook import python_tool

    with pytest.raises(UserError, match="no Jupyter kernel named 'no-such-kernel'"):
        python_tool(kernel="no-such-kernel")
    with pytest.raises(UserError, match="namespace= and kernel="):
        python_tool(kernel="python3", namespace={})


async def test_stopping_the_run_interrupts_a_kernel_of_its_own(isolated: Any) -> None:
    import asyncio
    import contextlib

    task = asyncio.create_task(isolated.run("import time\ntime.sleep(30)", thread="stopped"))
    await asyncio.sleep(1.5)
    task.cancel()  # what the view's Stop does
    with contextlib.suppress(asyncio.CancelledError):
        await task
    start = time.monotonic()
    assert (await ask(isolated, "'next'", thread="next")).content == "'next'"
    assert time.monotonic() - start < 2.5  # not the 3 s timeout: the sleep was interrupted at once
