"""`Agent`: a model, tools and settings; runs, streams and resumes conversations, and reads its
stored threads.

Owns `Agent` (the configuration, frozen into a `RunConfig` for each run) and its public methods.
Layer 4: the run itself lives below it, in `nbagent._run` (``prepare`` a run's starting state
from a `RunStart`, ``loop`` the run, ``handle`` for `RunHandle`); thread management is
`nbagent.threads.Threads` beside it (``agent.threads_api``): each thread method of `Agent` is a
`Threads` method, written once there and called on the agent's (`_from_threads`). Imports the
base, models, store, the run and `threads`; never widgets or pandas, except in the facade methods
`chat`, `map`, `evaluate` and `estimate`, which import the edge when called.

Naming: the awaitable form of an operation has the plain name, its blocking twin adds ``_sync``
(``run`` / ``run_sync``, ``resume`` / ``resume_sync``) and is made by `nbagent._sync.twin`, so
it always takes what the awaitable takes; a method with one form has the plain name.

Size: one class, the whole public surface of an agent, most of it docstrings; each method hands
its work to `nbagent._run` or `Threads` in a few lines.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from ._run.config import RunConfig
from ._run.prepare import RunStart
from ._sync import twin
from .approvals import CallRef, Decisions
from .context import Compaction
from .events import Event
from .exceptions import DuplicateToolError, ToolDefinitionError, UserError
from .messages import Prompt
from .models import infer_model
from .models.base import Model
from .output import OUTPUT_TOOL, OutputSpec
from .result import RunResult
from .retry import Retry
from .store import Store, open_store
from .threads import Threads
from .tools import Tool, ToolSource

if TYPE_CHECKING:
    from typing_extensions import TypedDict, Unpack

    from ._run.handle import EventCallback, RunBox, RunHandle
    from ._run.state import RunState
    from .guards import Guard

    class _Options(TypedDict, total=False):
        tools: Iterable[Tool | Callable[..., Any] | ToolSource]
        agents: Iterable[Agent[Any]]
        system: str | None
        max_steps: int
        tools_in_order: bool
        retry: Retry | None
        token_budget: int | None
        cost_budget: float | None
        stop_when: Callable[[RunResult[Any]], bool] | None
        settings: Mapping[str, Any] | None
        store: Store | str | None
        state_type: type | None
        prices: Mapping[str, Any] | None
        name: str | None
        output_retries: int
        compaction: Compaction | None
        max_result_fraction: float | None
        context_redact: Callable[[str, str], str] | None
        guards: Iterable[Guard]

__all__ = ["Agent"]

OutputT = TypeVar("OutputT")
T = TypeVar("T")
P = ParamSpec("P")
Deny = Mapping[str, "str | None"] | Iterable[CallRef]


def _from_threads(method: Callable[Concatenate[Threads, P], Coroutine[Any, Any, T]], name: str | None = None,
                  doc: str | None = None) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    """The `Threads` method `method` as an `Agent` method named `name` (default: the same) that
    calls it on the agent's `Agent.threads_api`. ``help`` and ``inspect.signature`` show
    `method`'s parameters; the docstring is `doc`, by default `method`'s."""
    @functools.wraps(method)
    async def on_agent(self: Agent[Any], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await method(self.threads_api, *args, **kwargs)

    on_agent.__name__ = name or method.__name__
    on_agent.__qualname__ = f"Agent.{on_agent.__name__}"
    on_agent.__module__ = __name__
    if doc is not None:
        on_agent.__doc__ = doc
    return on_agent


class Agent(Generic[OutputT]):
    """A model with tools. Configure once, run many conversations.

    ```python
    agent = Agent(model, tools=[get_weather, refund], system="Be brief.", max_steps=20)
    result = await agent.run("Refund order 42")          # or agent.run_sync(...)
    ```

    ``Agent[T]`` is generic in the type of its answer: `str` unless an `output_type` is given,
    so a type checker knows what ``result.output`` is.

    An agent's threads are the ones it has worked with in this process: run, resumed, forked
    (the new thread) or shown in a view (`Agent.chat` with a ``thread``). `threads` lists them,
    and the DataFrame functions given an agent read only them, so agents of other notebooks
    sharing the store (``./.nbagent/threads.db``) do not mix in. Every stored thread:
    ``await agent.store.threads()``, ``nbagent.usage_frame(agent.store)``. The thread methods
    (`threads`, `checkpoints`, `pending`, `thread_usage`, `fork`, `delete_thread`, `revoke`) are those of
    ``agent.threads_api``, a `Threads` over the agent's store and threads.

    Args:
        model: a `Model`, or a string: ``"openai:gpt-4.1-mini"``, ``"local"``, ``"test"``.
        tools: `Tool`s, typed functions (wrapped with `tool`), and tool sources whose tools are
            listed when a run first needs them (`nbagent.mcp.MCPTools`, any `ToolSource`; kept
            in ``agent.tool_sources``, the others in ``agent.tools`` by name).
        agents: sub-agents: each is given as its `as_tool` (``agents=[researcher]`` is
            ``tools=[researcher.as_tool()]``). See docs/subagents.md.
        system: the system prompt, sent with every request (not stored in the thread).
        max_steps: model calls per run before it stops (``status="stopped"``,
            ``stop_reason="max_steps"``).
        tools_in_order: run the tool calls of one answer one after the other instead of
            concurrently.
        retry: how failed model calls are retried (`Retry`; default three attempts in all).
        token_budget: stop a run (gracefully) before a model call once it used this many tokens.
        cost_budget: the same in USD (model calls with an unknown price count as 0).
        stop_when: ``(RunResult so far) -> bool``, checked before each model call.
        settings: model settings: temperature, max_tokens, seed, tool_choice, extra_body, ...
        store: where threads are kept: a `Store`, a file path (`SQLiteStore`), or ``"memory"``
            (`MemoryStore`), as ``NBAGENT_STORE`` takes them (default: `nbagent.store.default_store()`).
        state_type: a pydantic model (or dataclass) to rebuild the user's state object from a
            stored thread after a restart.
        prices: your own prices, see `nbagent.pricing.price_row`.
        output_type: the type of a structured final answer (a pydantic model, a dataclass, or
            any type pydantic validates): the model gives it by calling a ``final_result`` tool
            and ``result.output`` is an instance of it (see docs/output.md). None: a text answer.
        output_retries: how many times a model that answers in text that does not fit
            `output_type` is asked again before the run fails (invalid ``final_result``
            arguments go back to it like any tool's, within ``max_steps``).
        compaction: keep long conversations inside the model's context window (`Compaction`:
            old turns are replaced in the request by a summary, or old results cleared; the
            thread keeps every message). None: a request that no longer fits fails the run.
        max_result_fraction: the most of the model's window one tool result may fill (default
            0.1); a longer result is cut as head + tail and kept whole (``read_result`` pages
            through it). A tool's own ``max_result_tokens`` comes first. None: no cap from the
            window. See docs/context.md.
        context_redact: ``(name, text) -> text``, called with each notebook variable's summary
            before it is sent (``{df}`` in ``%%agent``, ``@df`` in the chat view) to edit what
            the model sees, e.g. to mask a column. See docs/notebook.md.
        guards: `nbagent.guards.Guard` rules checked on the prompt (before any model call), a
            tool call's arguments (before approval), a tool's result (before the model or the
            store see it) and an answer (before it is shown: a streamed answer's text is held
            until they pass). See docs/guards.md.
    """

    _config: RunConfig | None
    _seen: tuple[dict[str, Any], dict[str, Tool]] | None
    """The settings and tools `_config` was made from (to notice a change made in place)."""
    _own_threads: dict[str, None]
    """This agent's threads, in the order it first touched them (a dict as an ordered set)."""

    @overload
    def __init__(self: Agent[str], model: Model | str, *, output_type: None = None,
                 **options: Unpack[_Options]) -> None: ...

    @overload
    def __init__(self: Agent[OutputT], model: Model | str, *, output_type: type[OutputT],
                 **options: Unpack[_Options]) -> None: ...

    @overload
    def __init__(self: Agent[Any], model: Model | str, *, output_type: Any,
                 **options: Unpack[_Options]) -> None: ...

    def __init__(
        self,
        model: Model | str,
        *,
        tools: Iterable[Tool | Callable[..., Any] | ToolSource] = (),
        agents: Iterable[Agent[Any]] = (),
        system: str | None = None,
        max_steps: int = 20,
        tools_in_order: bool = False,
        retry: Retry | None = None,
        token_budget: int | None = None,
        cost_budget: float | None = None,
        stop_when: Callable[[RunResult[Any]], bool] | None = None,
        settings: Mapping[str, Any] | None = None,
        store: Store | str | None = None,
        state_type: type | None = None,
        prices: Mapping[str, Any] | None = None,
        name: str | None = None,
        output_type: Any = None,
        output_retries: int = 2,
        compaction: Compaction | None = None,
        max_result_fraction: float | None = 0.1,
        context_redact: Callable[[str, str], str] | None = None,
        guards: Iterable[Guard] = (),
    ) -> None:
        self.model = infer_model(model)
        # Python tools by name; the sources apart
        self.tools, self.tool_sources = _tools_by_name([*tools, *_agent_tools(agents)])
        if not isinstance(max_steps, int) or max_steps < 1:
            raise UserError(f"max_steps must be a positive integer, got {max_steps!r}")
        self.system = system
        self.max_steps = max_steps
        self.tools_in_order = tools_in_order
        self.retry = retry or Retry()
        self.token_budget = token_budget
        self.cost_budget = cost_budget
        self.stop_when = stop_when
        self.settings: dict[str, Any] = dict(settings or {})
        # A path or "memory" is checked now (a typo fails here); the default store is opened on
        # first use, relative to the working directory of that moment.
        self._store = open_store(store) if store is not None else None
        self.state_type = state_type
        self.prices = _checked_prices(prices)
        self.name = name
        self._own_threads = {}
        self.output: OutputSpec | None = None
        if output_type is not None:
            self.output = OutputSpec(output_type)
            if OUTPUT_TOOL in self.tools:
                raise DuplicateToolError(
                    f"a tool is named {OUTPUT_TOOL!r}, the name of the tool that carries the structured "
                    "answer (output_type); rename it"
                )
        if not isinstance(output_retries, int) or output_retries < 0:
            raise UserError(f"output_retries must be a non-negative integer, got {output_retries!r}")
        self.output_retries = output_retries
        self.compaction, self.max_result_fraction, self.context_redact = _context_options(
            compaction, max_result_fraction, context_redact, self.model)
        self.guards = _checked_guards(guards)
        self._seen = None

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = open_store(None)
        return self._store

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        object.__setattr__(self, "_config", None)  # setting an attribute makes a new RunConfig

    def __getstate__(self) -> dict[str, Any]:
        """What an `Agent` pickles as (``agent.map(..., executor="ray")`` sends it to workers): its
        definition; the model without its API key, the default store resolved here (so workers use
        this process's file). The `RunConfig` is made again where it arrives."""
        return {**self.__dict__, "_store": self.store, "_config": None, "_seen": None}

    @property
    def tool_definitions(self) -> list[dict[str, Any]]:
        """The tools as the model is told of them: the agent's own, then the structured answer's
        tool when there is an `output_type` (a tool source's tools join when a run lists them)."""
        definitions = [t.definition() for t in self.tools.values()]
        if self.output is not None:
            definitions.append(self.output.tool.definition())
        return definitions

    def config(self, store: Store | None = None) -> RunConfig:
        """The agent's settings as a run sees them, frozen (immutable copies: see `RunConfig`).

        A change to the agent applies to the runs started after it, never to one going on: it
        is made again after any attribute is set, and when `settings` or `tools` were changed in
        place (``agent.settings["temperature"] = 0``), which each call compares with what the
        config was made from.

        `store`: where the run keeps its thread (default: the agent's own `store`; a sub-agent's
        run uses its parent's, and never opens its own)."""
        chosen = store if store is not None else self.store
        config, seen = self._config, self._seen
        if config is not None and seen is not None and self.settings == seen[0] and self.tools == seen[1]:
            return config if config.store is chosen else dataclasses.replace(config, store=chosen)
        definitions = tuple(self.tool_definitions)
        settings = copy.deepcopy(self.settings)
        request_settings = dict(settings)
        if self.output is not None and "tool_choice" not in settings:
            request_settings["tool_choice"] = "required"  # the answer must be a tool call
        tools = dict(self.tools)
        sources = None
        if self.tool_sources:
            reserved = (OUTPUT_TOOL,) if self.output is not None else ()
            from ._run.sources import SourceSet

            sources = SourceSet(self.tool_sources, tools, definitions, reserved)
        config = RunConfig(
            model=self.model, tools=MappingProxyType(tools), tool_definitions=definitions,
            request_settings=MappingProxyType(request_settings), store=chosen, retry=self.retry,
            system=self.system, max_steps=self.max_steps, tools_in_order=self.tools_in_order,
            token_budget=self.token_budget, cost_budget=self.cost_budget, stop_when=self.stop_when,
            output=self.output, output_retries=self.output_retries, prices=self.prices,
            state_type=self.state_type, sources=sources, compaction=self.compaction,
            summarizer=_summarizer(self.compaction), max_result_fraction=self.max_result_fraction,
            name=self.name, guards=_guard_set(self.guards),
        )
        object.__setattr__(self, "_config", config)
        object.__setattr__(self, "_seen", (settings, tools))
        return config

    def __repr__(self) -> str:
        sources = f", sources={list(self.tool_sources)!r}" if self.tool_sources else ""
        return f"Agent({self.model!r}, tools={list(self.tools)}{sources})"

    def as_tool(self, name: str | None = None, description: str | None = None, *,
                max_depth: int = 5) -> Tool:
        """This agent as a tool of another: a sub-agent.

        ```python
        researcher = Agent(model, tools=[search, delete_file], name="researcher")
        boss = Agent(model, tools=[researcher.as_tool(description="Research one question")], name="boss")
        boss = Agent(model, agents=[researcher], name="boss")        # the same
        ```

        The tool takes one string, ``task``; its result is this agent's answer (a structured
        answer as JSON). Each call runs this agent on a thread of its own in the parent's store
        (``"<parent thread>/<call id>"``, whatever store this agent was built with), so
        exactly-once, the ledger and resume hold at every depth: after a pause or a crash the
        call continues that thread. A call inside the tree that needs a person pauses the top
        run, its `PendingCall` carrying ``path=("boss", "researcher")``; decide it through the
        top agent. Events, usage rows and budgets cover the whole tree. See docs/subagents.md.

        Args:
            name: the tool's name (default: this agent's `name`).
            description: what the parent's model is told the tool does.
            max_depth: how deep sub-agents may nest under the top agent (it may be this agent
                itself: an agent may list itself); a call past it gets an error result.

        Raises:
            UserError: neither this agent nor `name` gives the tool a name.
        """
        from ._run.subagent import agent_tool

        return agent_tool(self, name, description, max_depth)

    # ------------------------------------------------------------------ runs
    # Each entry point makes one `RunStart` from its arguments (a prompt, or a resume's
    # `Decisions`) and drives it one way: to the end (`run`, `resume`; their `_sync` twins block
    # on those), as events (`stream`, `resume_stream`), in a background task (`start`).
    async def run(self, prompt: Prompt | None = None, *, thread: str | None = None,
                  state: Any = None) -> RunResult[OutputT]:
        """Run until a final answer, a pause for a person, a stop, a failure or cancellation.

        Args:
            prompt: the user's message: a string, or a list of strings and images
                (``["What is in this plot?", fig]``; see `nbagent.Image`). None continues a
                thread whose last run stopped.
            thread: the conversation to continue (default: a new thread).
            state: the object tools taking ``ctx`` read and change.

        Raises:
            InvalidPromptError: the prompt is neither text nor images models accept.
        """
        return await self._finished(RunStart(prompt, thread, state))

    run_sync = twin(run, doc="`run` from sync code: works in scripts and in notebook cells (no nest_asyncio). "
                             "A call needing approval makes it return ``paused``; KeyboardInterrupt cancels the run.")

    def stream(
        self, prompt: Prompt | None = None, *, thread: str | None = None, state: Any = None
    ) -> AsyncIterator[Event]:
        """Run and yield typed events as they happen (text deltas, tool calls, ...); the last
        event is ``run-completed`` / ``run-paused`` / ... carrying the `RunResult`."""
        return self._events(RunStart(prompt, thread, state))

    async def resume(
        self,
        result: RunResult[Any] | None = None,
        *,
        thread: str | None = None,
        decisions: Decisions | None = None,
        approve: Iterable[CallRef] = (),
        deny: Deny = (),
        edit: Mapping[str, Mapping[str, Any]] | None = None,
        results: Mapping[str, Any] | None = None,
        always_allow: Iterable[str] = (),
        state: Any = None,
        decided_by: str | None = None,
    ) -> RunResult[OutputT]:
        """Continue a paused, stopped, failed or cancelled run.

        ```python
        result = await agent.resume(paused, decisions=Decisions().approve(call).deny(other, "no"))
        result = await agent.resume(paused, approve=[call], deny={other.id: "no"})   # the same
        ```

        Args:
            result: the `RunResult` to continue (or give `thread`).
            thread: the thread to continue, e.g. after a kernel restart.
            decisions: what a person decided (`Decisions`); the keywords below are a shorthand
                for it, and may be combined with it.
            approve: call ids (or `PendingCall`s) to run.
            deny: ``{call_id: reason}`` (or ids): the model gets an error result with the reason.
            edit: ``{call_id: new_args}``: approve with changed arguments (validated).
            results: ``{call_id: value}`` for client tools.
            always_allow: tool names approved for the rest of the thread (pending calls of
                those tools are approved too).
            decided_by: who decided, recorded with the time on each decided tool result (and
                in the tool-calls DataFrame).

        A decision is bound to the call id and the arguments that were shown: it never applies
        to other arguments (`ArgumentsMismatchError`). Calls left undecided stay pending.
        """
        chosen = _decisions(decisions, approve, deny, edit, results, always_allow, decided_by)
        return await self._finished(RunStart(thread=thread, state=state, resume=chosen, result=result))

    resume_sync = twin(resume)

    def resume_stream(
        self,
        result: RunResult[Any] | None = None,
        *,
        thread: str | None = None,
        decisions: Decisions | None = None,
        approve: Iterable[CallRef] = (),
        deny: Deny = (),
        edit: Mapping[str, Mapping[str, Any]] | None = None,
        results: Mapping[str, Any] | None = None,
        always_allow: Iterable[str] = (),
        state: Any = None,
        decided_by: str | None = None,
    ) -> AsyncIterator[Event]:
        """`resume`, yielding events like `stream`."""
        chosen = _decisions(decisions, approve, deny, edit, results, always_allow, decided_by)
        return self._events(RunStart(thread=thread, state=state, resume=chosen, result=result))

    def start(
        self,
        prompt: Prompt | None = None,
        *,
        thread: str | None = None,
        state: Any = None,
        on_event: EventCallback | None = None,
        resume: Decisions | None = None,
        result: RunResult[Any] | None = None,
    ) -> RunHandle:
        """Start a run as a background task on the running loop and return at once.

        This is how a notebook cell runs an agent without blocking the kernel: the cell ends,
        the task streams `on_event(event)` callbacks, and `RunHandle.cancel()` stops it.
        With ``resume=Decisions(...)`` it continues `thread` (or the paused `result`) instead,
        as `resume` does (``Decisions()`` continues a stopped run with no decisions).
        """
        from ._run.handle import RunBox, RunHandle

        if resume is not None and not isinstance(resume, Decisions):
            raise UserError(f"start(resume=...) takes a nbagent.Decisions (Decisions() continues a stopped "
                            f"run), got {type(resume).__name__}")
        box = RunBox()
        return RunHandle(self._events(RunStart(prompt, thread, state, resume, result), box), on_event, box)

    async def _finished(self, start: RunStart) -> RunResult[Any]:
        """The run `start` begins, run to its end without streaming."""
        from ._run.handle import consume
        from ._run.loop import drive

        config = await _with_sources(self.config())
        run = await self._prepared(start, config)
        return await consume(drive(config, run, stream=False), run)

    def _events(self, start: RunStart, box: RunBox | None = None) -> AsyncIterator[Event]:
        """The events of the run `start` begins (the agent's config as of this call; its tool
        sources' tools listed when the stream starts)."""
        from ._run.loop import drive

        config = self.config()

        async def events() -> AsyncIterator[Event]:
            ready = await _with_sources(config)
            run = await self._prepared(start, ready)
            if box is not None:
                box.run = run
            inner = drive(ready, run, stream=True)
            try:
                async for event in inner:
                    yield event
            finally:
                # Closing this stream early must close the run now (answering open calls), not
                # when the loop gets round to finalizing the abandoned inner generator.
                await inner.aclose()

        return events()

    async def _prepared(self, start: RunStart, config: RunConfig) -> RunState:
        """The run's starting state; its thread counts among the agent's threads (and so do
        the threads of the sub-agents it runs)."""
        run = await start.prepare(config)
        self._touch(run.thread)
        run.work.touch = self._touch
        return run

    # ------------------------------------------------------------------ stored threads
    @property
    def threads_api(self) -> Threads:
        """This agent's stored threads as a `Threads`: its store, scoped to its threads (see the
        class docstring). `threads`, `checkpoints`, `pending`, `thread_usage`, `fork`,
        `delete_thread` and `revoke` (and their ``_sync`` twins) are this object's methods."""
        return Threads(self.store, scope=self._own_threads)

    def _touch(self, thread: str) -> None:
        """Count `thread` among this agent's threads (see the class docstring)."""
        self._own_threads.setdefault(thread, None)

    def own_threads(self) -> list[str]:
        """The ids of this agent's threads (class docstring), in the order it first touched them.
        Whether each is still stored is not checked: `threads` lists the stored ones."""
        return list(self._own_threads)

    # Each thread operation is written once, on `Threads`; the agent's method calls it on
    # `threads_api` (same parameters, and its docstring unless the agent's differs).
    threads = _from_threads(Threads.list, "threads", doc="""
        This agent's stored threads (`ThreadInfo`: see the class docstring), most recently updated
        first. After a kernel restart a new agent has none yet: list every thread of the store
        with ``await agent.store.threads()``.""")
    threads_sync = twin(threads)
    checkpoints = _from_threads(Threads.checkpoints)
    checkpoints_sync = twin(checkpoints)
    pending = _from_threads(Threads.pending)
    pending_sync = twin(pending)
    thread_usage = _from_threads(Threads.usage, "thread_usage")
    thread_usage_sync = twin(thread_usage)
    fork = _from_threads(Threads.fork)
    fork_sync = twin(fork)
    delete_thread = _from_threads(Threads.delete, "delete_thread", doc="""
        Delete a stored thread with everything kept for it: messages, usage, checkpoints, pending
        calls and its recorded model calls (`nbagent.models.record`); True if it existed. It no
        longer counts among this agent's threads.""")
    delete_thread_sync = twin(delete_thread)
    revoke = _from_threads(Threads.revoke)
    revoke_sync = twin(revoke)

    # ------------------------------------------------------------------ edges
    def chat(self, thread: str | None = None, **kwargs: Any) -> Any:
        """Show the chat view in the notebook cell (see `nbagent.widgets.ChatView`)."""
        from .widgets import ChatView

        if thread is not None:
            self._touch(thread)
        return ChatView(self, thread=thread, **kwargs)

    def map(self, inputs: Any, **kwargs: Any) -> Any:
        """Run many independent conversations concurrently; returns a DataFrame (see
        `nbagent.dataframe.batch` for the options). With ``dry_run=True`` (a `Forecast`) or
        ``confirm_over=`` (the frame, or a `BatchConfirmation`), and their ``sample=``, the batch
        is forecast first: `nbagent.evals.map_with_forecast`. With ``batch_api=True`` the rows'
        model requests go through the provider's batch API at half price, one batch round per
        step (``wait=False``: submit and return; docs/batch_api.md)."""
        if {"dry_run", "confirm_over", "sample"} & kwargs.keys():
            from .evals import map_with_forecast

            return map_with_forecast(self, inputs, **kwargs)
        from .dataframe import batch

        return batch(self, inputs, **kwargs)

    def cancel_batches(self, *, thread_prefix: str | None = None) -> Any:
        """Cancel the provider batches that ``agent.map(..., batch_api=True)`` has in flight (the
        map with this agent and `thread_prefix`); returns a DataFrame of them (``batch_id``,
        ``status``, ``requests``). Answers that came before the cancel are kept and taken by the
        next map; the requests that did not run leave their rows ``cancelled``, and the map run
        again after that submits them anew. (The kernel's Interrupt only stops waiting: the
        batches run on.) See docs/batch_api.md."""
        from .dataframe import cancel_batches

        return cancel_batches(self, thread_prefix=thread_prefix)

    def evaluate(self, cases: Any, evaluators: Any = (), **kwargs: Any) -> Any:
        """Run each case through `map` and score the answers; returns an `nbagent.evals.EvalReport`
        (``.frame``: one row per case with a score column per evaluator; ``.summary()``).

        ```python
        report = agent.evaluate(cases, evaluators=[nbagent.evals.equals(), my_check])
        ```

        `cases`: a DataFrame with an ``input`` column (and ``expected``), a list of dicts, or a
        list of inputs. `evaluators`: ``nbagent.evals`` evaluators and plain functions
        ``(output, expected, row) -> bool | float | dict``. Other options go to `map`. See
        docs/evals.md.
        """
        from .evals import evaluate

        return evaluate(self, cases, evaluators, **kwargs)

    def estimate(self, inputs: Any, *, sample: int = 5, **kwargs: Any) -> Any:
        """Run `sample` of the rows and forecast the whole batch: an `nbagent.evals.Forecast` of
        its tokens, cost (low, mid, high) and wall time at the batch's concurrency. The sampled
        rows are the batch's own threads, so the real `map` afterwards skips them. The same as
        ``agent.map(inputs, dry_run=True)``. With ``batch_api=True`` the sample runs live and the
        forecast also gives the cost at the batch price and the rounds (``Forecast.batch_cost``,
        ``Forecast.rounds``; docs/batch_api.md). See docs/evals.md.
        """
        from .evals import estimate

        return estimate(self, inputs, sample=sample, **kwargs)


def _checked_prices(prices: Mapping[str, Any] | None) -> Any:
    """`Agent`'s own ``prices``, checked now (bad prices fail here, not in the first run)."""
    if not prices:
        return None
    from .pricing import check_prices

    return check_prices(prices)


def _context_options(compaction: Any, max_result_fraction: Any, context_redact: Any, model: Model,
                     ) -> tuple[Compaction | None, float | None, Callable[[str, str], str] | None]:
    """`Agent`'s ``compaction``, ``max_result_fraction`` and ``context_redact``, checked
    (``Compaction.native()`` needs a `model` whose provider manages the context)."""
    if compaction is not None and not isinstance(compaction, Compaction):
        raise UserError(f"compaction must be an nbagent.Compaction, got {compaction!r}")
    if (compaction is not None and compaction.policy == "native" and not model.native_compaction
            and not model.native_context):
        raise UserError(
            f"Compaction.native() needs a model whose provider manages the context (OpenAIResponsesModel: "
            f"/v1/responses/compact; AnthropicModel: tool-result clearing); {type(model).__name__} has none: "
            "use Compaction() instead"
        )
    if max_result_fraction is not None and (
        isinstance(max_result_fraction, bool) or not isinstance(max_result_fraction, (int, float))
        or not 0 < max_result_fraction <= 1
    ):
        raise UserError(f"max_result_fraction must be a fraction in (0, 1] or None, got {max_result_fraction!r}")
    if context_redact is not None and not callable(context_redact):
        raise UserError(f"context_redact must be a function (name, text) -> text, got {context_redact!r}")
    return compaction, max_result_fraction, context_redact


def _checked_guards(guards: Iterable[Guard]) -> tuple[Guard, ...]:
    """`Agent`'s ``guards``, as a tuple of `Guard` (anything else fails now, not in a run)."""
    if guards is None:
        return ()
    out = tuple(g for item in guards for g in (item if isinstance(item, (tuple, list)) else (item,)))  # pii() as is
    if out:
        from .guards import Guard

        wrong = [g for g in out if not isinstance(g, Guard)]
        if wrong:
            raise UserError(f"guards= takes nbagent.guards.Guard objects (Guard.input(check), pii(), ...); "
                            f"got {wrong[0]!r}")
    return out


def _guard_set(guards: tuple[Guard, ...]) -> Any:
    """The run's view of the guards (`GuardSet`), or None without any."""
    if not guards:
        return None
    from ._run.guardset import GuardSet

    return GuardSet(guards)


def _summarizer(compaction: Compaction | None) -> Model | None:
    """The model a `Compaction` names for its summaries (None: the agent's own)."""
    if compaction is None or compaction.summarizer is None:
        return None
    return infer_model(compaction.summarizer)


def _tools_by_name(tools: Iterable[Tool | Callable[..., Any] | ToolSource]) -> tuple[dict[str, Tool],
                                                                                    tuple[ToolSource, ...]]:
    out: dict[str, Tool] = {}
    sources: list[ToolSource] = []
    for item in tools:
        if not isinstance(item, Tool) and isinstance(item, ToolSource):
            if any(s is item for s in sources):
                raise DuplicateToolError(f"the tool source {item!r} is given twice")
            sources.append(item)
            continue
        t = item if isinstance(item, Tool) else Tool.from_function(item)
        if not isinstance(t, Tool):
            raise ToolDefinitionError(f"not a tool: {item!r}")
        if t.name in out:
            raise DuplicateToolError(f"two tools are named {t.name!r}; tool names must be unique")
        out[t.name] = t
    return out, tuple(sources)


def _agent_tools(agents: Iterable[Agent[Any]]) -> list[Tool]:
    """``Agent(agents=[...])``: each sub-agent as its `Agent.as_tool`."""
    if isinstance(agents, Agent):
        agents = [agents]
    out = []
    for item in agents:
        if not isinstance(item, Agent):
            raise UserError(f"agents= takes Agents (each becomes a tool: as_tool()), got {type(item).__name__}")
        out.append(item.as_tool())
    return out


async def _with_sources(config: RunConfig) -> RunConfig:
    """The run's config: with the tool sources' tools, when the agent has sources."""
    return config if config.sources is None else await config.sources.current(config)


def _decisions(
    decisions: Decisions | None,
    approve: Iterable[CallRef] = (),
    deny: Deny = (),
    edit: Mapping[str, Mapping[str, Any]] | None = None,
    results: Mapping[str, Any] | None = None,
    always_allow: Iterable[str] = (),
    decided_by: str | None = None,
) -> Decisions:
    """`resume`'s `decisions` and keyword shorthand as one `Decisions`."""
    if decisions is not None and not isinstance(decisions, Decisions):
        raise UserError(f"decisions= takes a nbagent.Decisions, got {type(decisions).__name__}")
    keywords = Decisions.of(approve=approve, deny=deny, edit=edit, results=results, always_allow=always_allow)
    chosen = keywords if decisions is None else decisions.extended(keywords)
    return chosen.decided_by(decided_by) if decided_by is not None else chosen
