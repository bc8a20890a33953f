"""Class 1: a rejected call runs anyway (langchain #37093, #40491; auxilia #301; agent-framework
#6062; claude-agent-sdk #1105).

What nbagent guarantees: a call a person denied never runs, on any path that continues the
thread: a resume in code, a resume after a restart (a new process over the same store), a resume
after the model call that followed the denial failed, the view's Deny button, a replayed run, an
MCP server's tool and the ``python`` tool. Every real run of a tool is written down (`Ledger`, the
MCP server's log, the kernel namespace), so "never ran" is checked where the side effect lands.
A sub-agent's call denied in the top cell is class 7's (`test_nested_agents.py`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from nbagent import Agent, NotResumableError
from nbagent.mcp import MCPTools
from nbagent.models import FunctionModel, record, replay
from nbagent.notebook import python_tool
from nbagent.store import MemoryStore, SQLiteStore

from .kit import Ledger, deny_in_view, once, results, settle, tool_call

REFUND = tool_call("refund", order_id="42", amount=10.0)
KITCHEN = Path(__file__).resolve().parents[1] / "mcp_servers" / "kitchen.py"


async def _resume(ledger: Ledger, tmp_path: Path) -> list[Any]:
    agent = ledger.agent(once(REFUND), store=MemoryStore())
    paused = await agent.run("refund 42", thread="t")
    done = await agent.resume(paused, deny={paused.pending[0].id: "not this one"})
    with pytest.raises(NotResumableError):  # the same decision again changes nothing
        await agent.resume(paused, deny={paused.pending[0].id: "not this one"})
    return results(done)


async def _restart(ledger: Ledger, tmp_path: Path) -> list[Any]:
    db = tmp_path / "threads.db"
    paused = await ledger.agent(once(REFUND), store=SQLiteStore(db)).run("refund 42", thread="t")
    # A new process: a new agent over the same file, nothing of the first run in memory.
    again = ledger.agent(once(REFUND), store=SQLiteStore(db))
    [waiting] = await again.pending("t")
    assert waiting.id == paused.pending[0].id
    done = await again.resume(thread="t", deny={waiting.id: "not this one"})
    return results(done)


async def _after_a_failed_model_call(ledger: Ledger, tmp_path: Path) -> list[Any]:
    failures = [RuntimeError("the provider is down")]
    inner = once(REFUND)

    def answer(messages: list[Any], request: Any) -> Any:
        if messages[-1].kind == "tool-result" and failures:
            raise failures.pop()
        return inner.function(messages, request)

    agent = ledger.agent(FunctionModel(answer), store=MemoryStore())
    paused = await agent.run("refund 42", thread="t")
    failed = await agent.resume(paused, deny={paused.pending[0].id: "not this one"})
    assert failed.status == "failed"
    done = await agent.resume(thread="t")  # continue the failed thread: the model is asked again
    assert done.status == "completed"
    return results(done)


async def _view(ledger: Ledger, tmp_path: Path) -> list[Any]:
    view = ledger.agent(once(REFUND), store=MemoryStore()).chat(thread="t")
    view.ask("refund 42")
    await view.wait()
    done = await deny_in_view(view, "not this one")
    await settle()
    assert done is not None
    return results(done)


async def _replay(ledger: Ledger, tmp_path: Path) -> list[Any]:
    store = MemoryStore()
    recording = ledger.agent(record(once(REFUND)), store=store)
    paused = await recording.run("refund 42", thread="recorded")
    await recording.resume(paused, approve=[paused.pending[0]])
    assert ledger.runs == ["refund 42 10"]
    ledger.path.write_text("")
    # Replayed with the recorded results: the person denies this time; neither the tool nor its
    # recorded result may stand in for the denial.
    agent = ledger.agent(replay(store, thread="recorded", tools="recorded", then=once(REFUND)), store=MemoryStore())
    again = await agent.run("refund 42", thread="t")
    assert [p.name for p in again.pending] == ["refund"]
    done = await agent.resume(again, deny={again.pending[0].id: "not this one"})
    return results(done)


async def _mcp(ledger: Ledger, tmp_path: Path) -> list[Any]:
    log = tmp_path / "kitchen.log"
    log.touch()
    kitchen = MCPTools.stdio(sys.executable, [str(KITCHEN)], env={"KITCHEN_LOG": str(log)})
    try:
        agent = Agent(once(tool_call("write_note", text="from the model")), tools=[kitchen], store=MemoryStore())
        paused = await agent.run("write it", thread="t")
        assert [p.name for p in paused.pending] == ["write_note"]  # destructive by its annotations
        done = await agent.resume(paused, deny={paused.pending[0].id: "not this one"})
    finally:
        await kitchen.close()
    ledger.path.write_text(log.read_text())  # what the server wrote is what ran
    return results(done)


async def _python_tool(ledger: Ledger, tmp_path: Path) -> list[Any]:
    namespace: dict[str, Any] = {}
    code = f"with open({str(ledger.path)!r}, 'a') as f:\n    f.write('python ran\\n')\nran = True"
    agent = Agent(once(tool_call("python", code=code)), tools=[python_tool(namespace=namespace)],
                  store=MemoryStore())
    paused = await agent.run("run it", thread="t")
    done = await agent.resume(paused, deny={paused.pending[0].id: "not this one"})
    assert "ran" not in namespace
    return results(done)


PATHS = {
    "resume": _resume,
    "restart": _restart,
    "after-a-failed-model-call": _after_a_failed_model_call,
    "view": _view,
    "replay": _replay,
    "mcp": _mcp,
    "python-tool": _python_tool,
}


@pytest.mark.parametrize("path", list(PATHS))
async def test_langchain_37093_denied_call_never_runs_on_resume(path: str, tmp_path: Path) -> None:
    """A denied call never runs, whichever way the thread goes on after the denial.

    Catches: a denial that is carried out as an approval (checked by hand against a copy of
    ``nbagent/_run/plan.py`` whose deny branch was skipped: every path fails, the tool runs);
    a denial lost on the way (a new store object, a failed model call, the view's buttons, a
    replayed answer or a recorded result standing in for it); an MCP or ``python`` call that
    reaches the server or the kernel anyway.
    """
    ledger = Ledger(tmp_path / "runs.txt")
    found = await PATHS[path](ledger, tmp_path)
    assert ledger.runs == []
    [denied] = [r for r in found if r.status == "denied"]
    assert denied.decision == "denied" and denied.is_error
    assert denied.content.startswith("denied by the user: not this one\n")
    assert "was not run" in denied.content
