"""The notebook-safe sync API: `run_sync` / `resume_sync` in a plain script, inside a running
event loop (a Jupyter cell), in a process where nest_asyncio was applied, mixed with ``await``,
and KeyboardInterrupt. (That every ``_sync`` twin takes what its coroutine takes: test_api_shape.py.)

Only the shipped fakes and `MemoryStore`.
"""

import asyncio
import os
import subprocess
import sys
import textwrap

import pytest

from nbagent import Agent, tool
from nbagent.models import FunctionModel, ScriptedModel, TestModel, tool_call
from nbagent.store import MemoryStore


@tool
def get_weather(city: str) -> str:
    """Weather."""
    return f"Sunny in {city}"


def run_script(code: str, timeout: float = 60) -> str:
    """Run `code` in a fresh interpreter; return its stdout (fail with its stderr)."""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_run_sync_in_a_plain_script() -> None:
    out = run_script("""
        from nbagent import Agent, tool
        from nbagent.models import TestModel
        from nbagent.store import MemoryStore

        @tool
        def get_weather(city: str) -> str:
            \"\"\"Weather.\"\"\"
            return f"Sunny in {city}"

        agent = Agent(TestModel(), tools=[get_weather], store=MemoryStore())
        result = agent.run_sync("Weather?")
        print(result.status, result.output)
        print(agent.run_sync("Again?", thread=result.thread).status)
    """)
    assert out.splitlines() == ['completed {"get_weather": "Sunny in a"}', "completed"]


async def test_run_sync_inside_a_running_event_loop() -> None:
    asyncio.get_running_loop()  # we are inside a loop, like a Jupyter cell
    agent = Agent(TestModel(), tools=[get_weather], store=MemoryStore())
    result = agent.run_sync("Weather?")  # must not raise "event loop is already running"
    assert result.status == "completed"
    assert result.output == '{"get_weather": "Sunny in a"}'


async def test_the_same_agent_from_run_sync_and_await() -> None:
    model = ScriptedModel(["one", tool_call("get_weather", city="Rome"), "two", "three"])
    agent = Agent(model, tools=[get_weather], store=MemoryStore())
    first = agent.run_sync("1", thread="t")
    second = await agent.run("2", thread="t")
    third = agent.run_sync("3", thread="t")
    assert [r.output for r in (first, second, third)] == ["one", "two", "three"]
    assert [m.kind for m in third.messages] == [
        "user", "assistant", "user", "assistant", "tool-result", "assistant", "user", "assistant"]
    assert [t.thread for t in agent.threads_sync()] == ["t"]
    assert len(agent.checkpoints_sync("t")) >= 8


def test_the_same_agent_from_run_sync_and_asyncio_run() -> None:
    agent = Agent(FunctionModel(lambda m, r: f"#{len(m)}"), store=MemoryStore())
    assert agent.run_sync("a", thread="t").output == "#1"
    assert asyncio.run(agent.run("b", thread="t")).output == "#3"
    assert agent.run_sync("c", thread="t").output == "#5"


def test_approval_in_sync_mode_pauses_and_resume_sync_continues() -> None:
    ran: list[str] = []

    @tool(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return "deleted"

    agent = Agent(ScriptedModel([tool_call("delete", path="/x", id="d"), "done"]), tools=[delete],
                  store=MemoryStore())
    result = agent.run_sync("clean")
    assert result.status == "paused" and [p.id for p in result.pending] == ["d"]
    assert ran == []
    done = agent.resume_sync(result, approve=["d"])
    assert done.status == "completed" and ran == ["/x"]


def test_run_sync_from_inside_a_tool_on_nbagents_loop_fails_clearly() -> None:
    inner = Agent(TestModel(), store=MemoryStore())

    @tool
    async def nested() -> str:
        """Calls run_sync on the loop that runs this tool."""
        return inner.run_sync("hi").status

    agent = Agent(ScriptedModel([tool_call("nested"), "done"]), tools=[nested], store=MemoryStore())
    result = agent.run_sync("go")  # finishes: no deadlock
    assert result.status == "completed"
    err = result.messages[2]
    assert err.is_error and err.content.startswith("SyncInAsyncError:")
    assert "await agent.run" in err.content


def test_run_sync_where_nest_asyncio_was_applied() -> None:
    pytest.importorskip("nest_asyncio")
    out = run_script("""
        import asyncio
        import nest_asyncio
        from nbagent import Agent, tool
        from nbagent.models import ScriptedModel, tool_call
        from nbagent.store import MemoryStore

        loop = asyncio.new_event_loop()  # the kernel's loop, patched as a user would
        asyncio.set_event_loop(loop)
        nest_asyncio.apply(loop)

        @tool
        async def get_weather(city: str) -> str:
            \"\"\"Weather.\"\"\"
            await asyncio.sleep(0.01)
            return f"Sunny in {city}"

        model = ScriptedModel([tool_call("get_weather", city="Rome"), "one", "two", "three"])
        agent = Agent(model, tools=[get_weather], store=MemoryStore())
        print(agent.run_sync("top level", thread="t").output)

        async def cell():
            print(agent.run_sync("in a cell", thread="t").output)
            print((await agent.run("awaited", thread="t")).output)

        loop.run_until_complete(cell())
    """)
    assert out.splitlines() == ["one", "two", "three"]


def test_keyboard_interrupt_cancels_a_sync_run_and_leaves_the_thread_valid() -> None:
    out = run_script("""
        import asyncio, signal, threading
        from nbagent import Agent, tool
        from nbagent.models import FunctionModel, tool_call
        from nbagent.store import MemoryStore

        started = threading.Event()

        @tool
        async def crawl(site: str) -> str:
            \"\"\"Slow.\"\"\"
            started.set()
            await asyncio.sleep(30)
            return "finished"

        def answer(messages, request):
            if messages[-1].kind == "user" and messages[-1].content == "crawl":
                return tool_call("crawl", site="a")
            return "all good"

        agent = Agent(FunctionModel(answer), tools=[crawl], store=MemoryStore())
        # A real SIGINT to the main thread, as a kernel interrupt or Ctrl-C sends. The handler is
        # installed explicitly: a process started in the background may inherit SIGINT ignored.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        main = threading.main_thread().ident
        threading.Thread(target=lambda: (started.wait(10), signal.pthread_kill(main, signal.SIGINT)),
                         daemon=True).start()
        try:
            agent.run_sync("crawl", thread="t")
        except KeyboardInterrupt:
            print("interrupted")
        stored = asyncio.run(agent.store.load("t"))
        last = stored.messages[-1]
        print(stored.meta.status, [m.kind for m in stored.messages], getattr(last, "status", None))
        print(agent.run_sync("again", thread="t").output)
    """)
    assert out.splitlines() == [
        "interrupted",
        "cancelled ['user', 'assistant', 'tool-result'] cancelled",
        "all good",
    ]
