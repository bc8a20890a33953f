"""The public API's shape: what `nbagent` exports, the sync/async naming rule, deprecated names,
and the stored formats of nbagent 0.1 still reading.
"""

from __future__ import annotations

import asyncio
import inspect
import shutil
import warnings
from pathlib import Path

import pytest

import nbagent
from nbagent import Agent, Decisions, tool
from nbagent.models import ScriptedModel, TestModel, tool_call
from nbagent.store import MemoryStore, SQLiteStore
from nbagent.store.meta import ThreadMeta

FIXTURES = Path(__file__).parent / "fixtures"


def test_all_is_complete_and_sorted() -> None:
    """Every public name of the package is in `__all__` (and `dir()`), and nothing else is."""
    public = {
        name for name, value in vars(nbagent).items()
        if not name.startswith("_") and not inspect.ismodule(value)
        and name not in ("annotations", "Any", "load_ipython_extension")  # the last is IPython's hook
    }
    # served by __getattr__
    lazy = {"usage_frame", "tool_calls_frame", "runs_frame", "output_frame", "context_frame", "RunHandle",
            "compare"}
    assert set(nbagent.__all__) == (public | lazy | {"__version__"})
    assert nbagent.__all__ == sorted(nbagent.__all__)
    assert set(nbagent.__all__) <= set(dir(nbagent))
    for name in nbagent.__all__:
        assert getattr(nbagent, name) is not None


def test_event_classes_end_in_event_and_the_unreleased_names_are_gone() -> None:
    event_names = [n for n in nbagent.__all__ if n.endswith("Event") and n != "Event"]
    assert len(event_names) == 15  # CompactionEvent joined with the context window (docs/context.md),
    # TextHeldEvent and GuardTrippedEvent with the guards (docs/guards.md)
    for old in ("TextDelta", "RunEnded", "batch", "abatch"):
        with pytest.raises(AttributeError):
            getattr(nbagent, old)
    with pytest.raises(ImportError):
        from nbagent.events import RunEnded  # noqa: F401


def _params(fn: object) -> list[tuple[str, object, object, object]]:
    return [(p.name, p.kind, p.default, p.annotation)
            for p in inspect.signature(fn).parameters.values()]  # type: ignore[arg-type]


def _twin_owners() -> list[object]:
    """Every public class and module that has blocking twins."""
    import nbagent.store
    from nbagent.mcp import MCPTools

    return [Agent, nbagent.Threads, MCPTools, nbagent.store]


TWINS = [(owner, name) for owner in _twin_owners() for name in dir(owner)
         if name.endswith("_sync") and not name.startswith("_")]


@pytest.mark.parametrize(("owner", "name"), TWINS, ids=[f"{getattr(o, '__name__', o)}.{n}" for o, n in TWINS])
def test_every_sync_twin_takes_what_its_coroutine_takes(owner: object, name: str) -> None:
    """The naming rule: the awaitable form has the plain name, its blocking twin adds ``_sync`` and
    takes the same parameters (names, kinds, defaults, annotations) and returns the same type."""
    async_fn, sync_fn = getattr(owner, name.removesuffix("_sync")), getattr(owner, name)
    assert inspect.iscoroutinefunction(async_fn) and not inspect.iscoroutinefunction(sync_fn)
    assert _params(async_fn) == _params(sync_fn)
    assert inspect.signature(async_fn).return_annotation == inspect.signature(sync_fn).return_annotation


@pytest.mark.parametrize("owner", [Agent, nbagent.Threads], ids=lambda o: o.__name__)
def test_every_coroutine_method_has_a_sync_twin(owner: type) -> None:
    coroutines = [name for name, value in vars(owner).items()
                  if not name.startswith("_") and inspect.iscoroutinefunction(value)]
    assert coroutines
    assert [name for name in coroutines if not hasattr(owner, name + "_sync")] == []


def test_the_twins_of_agent_and_threads_are_made_once() -> None:
    """Agent's and Threads' twins are made by `nbagent._sync.twin` (never written by hand, so
    they cannot drift from their coroutine), and show its parameters in ``help``."""
    for owner in (Agent, nbagent.Threads):
        for name in dir(owner):
            if name.endswith("_sync"):
                twin = getattr(owner, name)
                assert twin.__wrapped__ is getattr(owner, name.removesuffix("_sync")), name
                assert twin.__name__ == name and twin.__doc__, name


def test_the_agents_thread_methods_are_its_threads_methods() -> None:
    """Each thread operation is written once, on `Threads`; `Agent`'s method of that name calls
    it on ``agent.threads_api`` and shows its parameters."""
    names = {"threads": "list", "checkpoints": "checkpoints", "pending": "pending", "thread_usage": "usage",
             "fork": "fork", "delete_thread": "delete"}
    for on_agent, on_threads in names.items():
        method = getattr(Agent, on_agent)
        assert method.__wrapped__ is getattr(nbagent.Threads, on_threads), on_agent
        assert method.__name__ == on_agent and method.__doc__, on_agent
        assert _params(method) == _params(getattr(nbagent.Threads, on_threads))


def test_stream_forms_take_what_their_awaited_forms_take() -> None:
    assert _params(Agent.resume_stream) == _params(Agent.resume)
    assert _params(Agent.stream) == _params(Agent.run)


def test_each_concept_has_one_spelling() -> None:
    """0.1's spellings were never released; each concept has one name (no aliases, no warnings)."""
    import nbagent.dataframe
    from nbagent.store.base import Store

    for name in ("history", "history_sync", "price"):
        assert not hasattr(Agent, name)
    for name in ("usage_df", "tool_calls_df"):
        assert not hasattr(nbagent.RunResult, name)
    assert not hasattr(Store, "delete") and hasattr(Store, "delete_thread")
    for name in ("ausage_frame", "atool_calls_frame", "aruns_frame", "abatch"):
        with pytest.raises(AttributeError):
            getattr(nbagent.dataframe, name)
    agent = Agent(TestModel(), store=MemoryStore())
    with pytest.raises(nbagent.UserError, match=r"takes a nbagent\.Decisions"):
        agent.start("hi", resume={"approve": []})  # type: ignore[arg-type]


@pytest.mark.parametrize("store", ["memory", "file"])
def test_agent_takes_what_nbagent_store_takes(store: str, tmp_path: Path) -> None:
    """``Agent(store="memory")`` used to fail at run time with an AttributeError."""
    value = "memory" if store == "memory" else str(tmp_path / "threads.db")
    agent = Agent(TestModel(text="ok"), store=value)
    assert agent.run_sync("hi", thread="t").output == "ok"
    assert isinstance(agent.store, MemoryStore if store == "memory" else SQLiteStore)
    assert [t.thread for t in agent.threads_sync()] == ["t"]


def test_agent_refuses_a_store_it_cannot_use() -> None:
    with pytest.raises(nbagent.UserError, match="store must be a Store, a file path or 'memory'"):
        Agent(TestModel(), store=42)  # type: ignore[arg-type]


def test_decisions_value_is_the_resume_path() -> None:
    @tool(requires_approval=True)
    def pay(amount: float) -> str:
        """Pay."""
        return f"paid {amount}"

    model = ScriptedModel([[tool_call("pay", amount=5.0, id="a"), tool_call("pay", amount=9.0, id="b")], "done"])
    agent = Agent(model, tools=[pay], store=MemoryStore())
    paused = agent.run_sync("pay twice")
    first, second = paused.pending
    decisions = Decisions(by="ana").edit(first, {"amount": 4.0}).deny(second, "too much")
    result = agent.resume_sync(paused, decisions=decisions)
    assert result.status == "completed"
    results = {m.call_id: m for m in result.messages if m.kind == "tool-result"}
    assert (results["a"].decision, results["a"].decided_by) == ("edited", "ana")
    assert results["a"].content.endswith("paid 4.0")
    assert results["b"].decision == "denied" and results["b"].content.startswith("denied by the user: too much\n")


def test_meta_of_a_store_written_by_nbagent_0_1_still_reads(tmp_path: Path) -> None:
    """The fixture was written by nbagent 0.1 (a paused thread, a completed one with an edit, a
    deny and always-allow, and a fork): its untyped meta records read as `ThreadMeta`."""
    path = tmp_path / "old.db"
    shutil.copy(FIXTURES / "store_meta_v0_1.db", path)
    store = SQLiteStore(path)

    async def check() -> None:
        paused = await store.load("t-paused")
        assert paused is not None and isinstance(paused.meta, ThreadMeta)
        assert paused.meta.status == "paused" and paused.meta.state == {"cart": ["coffee"]}
        assert [p.id for p in paused.open_pending()] == ["c2", "c3"]
        done = await store.load("t-done")
        assert done is not None and done.meta.status == "completed"
        assert done.meta.always_allowed == ["add"] and done.meta.output == "Paid less, not shipped."
        fork = await store.load("t-fork")
        assert fork is not None and fork.meta.status == "forked"
        assert fork.meta.forked_from == {"thread": "t-done", "at_step": 1, "messages": 4}
        await store.close()

    asyncio.run(check())
    pay_calls: list[float] = []

    @tool(requires_approval=True)
    def pay(amount: float) -> str:
        """Pay."""
        pay_calls.append(amount)
        return f"paid {amount}"

    @tool(requires_approval=True)
    def ship(to: str) -> str:
        """Ship."""
        return f"shipped to {to}"

    @tool
    def add(item: str) -> str:
        """Add an item."""
        return f"added {item}"

    agent = Agent(ScriptedModel(["Bought."]), tools=[add, pay, ship], store=SQLiteStore(path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = agent.resume_sync(thread="t-paused", approve=["c2"], deny={"c3": "not today"})
    assert result.status == "completed" and pay_calls == [5.0]


def test_every_example_notebook_picks_its_model_with_auto() -> None:
    """What README and docs/providers.md promise: the notebooks run on Claude with ANTHROPIC_API_KEY
    set (on OpenAI with OPENAI_API_KEY...), because each takes the model `auto()` picks."""
    import nbformat

    notebooks = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
    assert notebooks
    for path in notebooks:
        # Notebook 07's batch-API section runs on the loopback batch server whatever the keys (a
        # real batch takes up to a day): its cells name their model.
        code = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells
                         if c.cell_type == "code" and "batch_server.py" not in c.source)
        assert "model = auto()" in code or "model = auto(fallback=" in code, path.name
        assert not any(name in code for name in ("OpenAIModel(", "AnthropicModel(", "local(")), path.name


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"ANTHROPIC_API_KEY": "sk-ant-x", "OPENAI_API_KEY": "sk-x", "OLLAMA_MODEL": "llama3.1"},
         ("AnthropicModel", "anthropic", "claude-sonnet-4-5")),
        ({"ANTHROPIC_API_KEY": "sk-ant-x", "ANTHROPIC_MODEL": "claude-haiku-4-5"},
         ("AnthropicModel", "anthropic", "claude-haiku-4-5")),
        ({"OPENAI_API_KEY": "sk-x", "OLLAMA_MODEL": "llama3.1"}, ("OpenAIResponsesModel", "openai", "gpt-5.4")),
        ({"OPENAI_API_KEY": "sk-x", "OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"},
         ("OpenAIModel", "openai", "gpt-4.1-mini")),
        ({"OLLAMA_MODEL": "llama3.1", "OLLAMA_HOST": "127.0.0.1:11500"}, ("OpenAIModel", "ollama", "llama3.1")),
    ],
)
def test_auto_picks_the_model_the_environment_names_in_the_documented_order(
    env: dict[str, str], expected: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_MODEL", "OPENAI_API_KEY", "OPENAI_MODEL", "OLLAMA_MODEL",
                 "OLLAMA_HOST", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    from nbagent.models import auto

    model = auto()
    assert (type(model).__name__, model.provider, model.model_name) == expected
    if model.provider == "ollama":
        assert model.base_url == "http://127.0.0.1:11500/v1"  # type: ignore[attr-defined]
    assert "sk-" not in repr(model)


def test_auto_falls_back_to_a_stand_in_only_when_the_environment_names_no_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from nbagent.models import TestModel, auto

    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OLLAMA_MODEL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    stand_in = TestModel()
    assert auto(fallback=stand_in) is stand_in  # not the bundled model: nothing is started
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    assert type(auto(fallback=stand_in)).__name__ == "OpenAIResponsesModel"


def test_the_agent_class_has_its_docstring() -> None:
    """help(Agent) in a notebook shows what an agent is (its docstring was once shadowed by an
    attribute annotation placed above it)."""
    from nbagent import Agent

    assert Agent.__doc__ is not None and Agent.__doc__.startswith("A model with tools.")
