"""`Agent`: a model, tools and settings; runs, streams and resumes conversations, and reads its
stored threads.

Owns `Agent` (the configuration, frozen into a `RunConfig` for each run) and its public methods.
Layer 4: the run itself lives below it, in `nbagent._run` (``prepare`` a run's starting state,
``loop`` the run, ``fork``, ``handle`` for `RunHandle`). Imports the base, models, store and the
run; never widgets or pandas, except in the two facade methods `chat` and `map`, which import
the edge when called.

Naming: the awaitable form of an operation has the plain name, its blocking twin adds ``_sync``
(``run`` / ``run_sync``, ``resume`` / ``resume_sync``); a method with one form has the plain name.

Size: one class, the whole public surface of an agent (runs, resumes, stored threads), most of it
docstrings; each method hands its work to `nbagent._run` in a few lines.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from ._run.config import RunConfig
from ._run.fork import fork_thread
from ._run.prepare import prepare_resume, prepare_run
from .approvals import CallRef, Decisions, PendingCall
from .context import Compaction
from .events import Event
from .exceptions import DuplicateToolError, ToolDefinitionError, UserError
from .messages import Message, Prompt
from .models import infer_model
from .models.base import Model
from .output import OUTPUT_TOOL, OutputSpec
from .result import RunResult
from .retry import Retry
from .store import Store, open_store
from .store.base import Checkpoint, ThreadInfo, UsageColumns
from .tools import Tool, ToolSource
from .usage import Usage

if TYPE_CHECKING:
    from typing_extensions import TypedDict, Unpack

    from ._run.handle import EventCallback, RunBox, RunHandle
    from ._run.state import RunState

    class _Options(TypedDict, total=False):
        tools: Iterable[Tool | Callable[..., Any] | ToolSource]
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

__all__ = ["Agent"]

OutputT = TypeVar("OutputT")
Deny = Mapping[str, "str | None"] | Iterable[CallRef]


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
    ``await agent.store.threads()``, ``nbagent.usage_frame(agent.store)``.

    Args:
        model: a `Model`, or a string: ``"openai:gpt-4.1-mini"``, ``"local"``, ``"test"``.
        tools: `Tool`s, typed functions (wrapped with `tool`), and tool sources whose tools are
            listed when a run first needs them (`nbagent.mcp.MCPTools`, any `ToolSource`; kept
            in ``agent.tool_sources``, the others in ``agent.tools`` by name).
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
    ) -> None:
        self.model = infer_model(model)
        self.tools, self.tool_sources = _tools_by_name(tools)  # Python tools by name; the sources apart
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

    def config(self) -> RunConfig:
        """The agent's settings as a run sees them, frozen (immutable copies: see `RunConfig`).

        A change to the agent applies to the runs started after it, never to one going on: it
        is made again after any attribute is set, and when `settings` or `tools` were changed in
        place (``agent.settings["temperature"] = 0``), which each call compares with what the
        config was made from."""
        config, seen = self._config, self._seen
        if config is not None and seen is not None and self.settings == seen[0] and self.tools == seen[1]:
            return config
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
            request_settings=MappingProxyType(request_settings), store=self.store, retry=self.retry,
            system=self.system, max_steps=self.max_steps, tools_in_order=self.tools_in_order,
            token_budget=self.token_budget, cost_budget=self.cost_budget, stop_when=self.stop_when,
            output=self.output, output_retries=self.output_retries, prices=self.prices,
            state_type=self.state_type, sources=sources, compaction=self.compaction,
            summarizer=_summarizer(self.compaction), max_result_fraction=self.max_result_fraction,
            name=self.name,
        )
        object.__setattr__(self, "_config", config)
        object.__setattr__(self, "_seen", (settings, tools))
        return config

    def __repr__(self) -> str:
        sources = f", sources={list(self.tool_sources)!r}" if self.tool_sources else ""
        return f"Agent({self.model!r}, tools={list(self.tools)}{sources})"

    # ------------------------------------------------------------------ runs
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
        config = await _with_sources(self.config())
        run = await self._prepared(prepare_run(config, prompt, thread, state))
        return await _consume(config, run)

    def stream(
        self, prompt: Prompt | None = None, *, thread: str | None = None, state: Any = None
    ) -> AsyncIterator[Event]:
        """Run and yield typed events as they happen (text deltas, tool calls, ...); the last
        event is ``run-completed`` / ``run-paused`` / ... carrying the `RunResult`."""
        return _events(self, lambda config: prepare_run(config, prompt, thread, state))

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
        config = await _with_sources(self.config())
        run = await self._prepared(prepare_resume(config, result, thread, chosen, state))
        return await _consume(config, run)

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
        return _events(self, lambda config: prepare_resume(config, result, thread, chosen, state))

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

        box = RunBox()
        if resume is not None:
            if not isinstance(resume, Decisions):
                raise UserError(f"start(resume=...) takes a nbagent.Decisions (Decisions() continues a stopped "
                                f"run), got {type(resume).__name__}")
            chosen = _decisions(resume)
            events = _events(self, lambda config: prepare_resume(config, result, thread, chosen, state), box)
        else:
            events = _events(self, lambda config: prepare_run(config, prompt, thread, state), box)
        return RunHandle(events, on_event, box)

    def run_sync(self, prompt: Prompt | None = None, *, thread: str | None = None,
                 state: Any = None) -> RunResult[OutputT]:
        """`run` from sync code: works in scripts and in notebook cells (no nest_asyncio).
        A call needing approval makes it return ``paused``; KeyboardInterrupt cancels the run."""
        return _blocking(lambda: self.run(prompt, thread=thread, state=state))

    def resume_sync(
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
        """`resume` from sync code."""
        chosen = _decisions(decisions, approve, deny, edit, results, always_allow, decided_by)
        return _blocking(lambda: self.resume(result, thread=thread, decisions=chosen, state=state))

    # ------------------------------------------------------------------ stored threads
    def _touch(self, thread: str) -> None:
        """Count `thread` among this agent's threads (see the class docstring)."""
        self._own_threads.setdefault(thread, None)

    async def _prepared(self, preparing: Awaitable[RunState]) -> RunState:
        """The prepared run (of `Agent.run`, `stream`, `resume`, `start`), its thread counted."""
        run = await preparing
        self._touch(run.thread)
        return run

    def own_threads(self) -> list[str]:
        """The ids of this agent's threads (class docstring), in the order it first touched them.
        Whether each is still stored is not checked: `threads` lists the stored ones."""
        return list(self._own_threads)

    async def threads(self) -> list[ThreadInfo]:
        """This agent's stored threads (`ThreadInfo`: see the class docstring), most recently
        updated first. After a kernel restart a new agent has none yet: list every thread of the
        store with ``await agent.store.threads()``."""
        return [info for info in await self.store.threads() if info.thread in self._own_threads]

    async def checkpoints(self, thread: str) -> list[Checkpoint]:
        """The checkpoints of a thread (`Checkpoint`: step, time, last message, usage so far)."""
        return await self.store.checkpoints(thread)

    async def pending(self, thread: str) -> list[PendingCall]:
        """The calls of a stored thread that wait for a decision or a client result, e.g. after
        a kernel restart: ``await agent.resume(thread=t, approve=await agent.pending(t))``."""
        loaded = await self.store.load(thread)
        return loaded.open_pending() if loaded is not None else []

    async def thread_usage(self, thread: str) -> Usage:
        """All model calls stored for a thread, summed (read column-wise, without the messages)."""
        columns = await self.store.usage_columns(thread)
        if isinstance(columns, UsageColumns):
            return Usage.of(columns.to_rows())
        loaded = await self.store.load(thread)  # a store overriding usage_columns with plain lists
        return Usage.of(loaded.usage if loaded else [])

    async def fork(
        self,
        thread: str,
        *,
        at_step: int | None = None,
        new_thread: str | None = None,
        edit: str | Mapping[str, Any] | Message | None = None,
    ) -> str:
        """Copy a thread up to a step into a new thread, to try another path from there.

        ```python
        for c in await agent.checkpoints("support-42"):         # step, last message, tokens so far
            print(c.step, c.last_message)
        alt = await agent.fork("support-42", at_step=2, edit={"content": "order 42 was never shipped"})
        result = await agent.resume(thread=alt)             # the model sees the edited tool result
        ```

        Which messages are copied: every message written at a step ``<= at_step`` (all of them
        when `at_step` is None). The prompt that starts a thread has step 0; the model's answer of
        step *n* and the results of its tool calls have step *n*; a prompt sent after the final
        answer of step *n* also has step *n*, so it is copied too (and can be edited). A fork
        never leaves a tool call without its result: when the copy would end with an answer some
        of whose calls have no result (the source was paused or interrupted in that step), the
        copy ends before that answer (its partial results and its usage row stay behind too).
        The usage rows of the copied steps and the ledger entries of the copied tool calls come
        along, so no copied call runs again. The user's state object is not copied (the store
        keeps only its latest value, which may reflect later steps): pass ``state=`` when you
        continue the fork. Pending approvals are not copied.

        Go live from a step: with ``replay(recording, then=real_model)`` as the model, a fork
        edited at step *n* and resumed takes nothing from the model up to step *n* (the copied
        steps, or a replayed run that rebuilt the thread from the recording) and asks the real
        model from step *n + 1* on (the first request the recording does not hold; docs/replay.md).

        Args:
            thread: the thread to copy (it is not changed).
            at_step: the last step to copy (see `checkpoints`); None copies the whole thread.
            new_thread: the new thread's id (default: ``"<thread>-fork-<random>"``).
            edit: changes the last copied message, the one at the fork point: a ``str`` replaces
                its text (``content`` of a prompt or tool result, ``text`` of an answer); a dict
                sets fields, e.g. ``{"content": "...", "is_error": False}``; a message instance
                replaces it (a tool result must keep the ``call_id``, an answer may not add tool
                calls).

        Returns:
            The new thread's id. Continue it with ``agent.resume(thread=new)`` (when it ends with
            a prompt or a tool result) or ``agent.run(prompt, thread=new)``.

        Raises:
            UserError: the thread does not exist, `at_step` is negative, or `edit` does not fit.
            ConflictError: `new_thread` already exists.
        """
        new = await fork_thread(self.store, thread, at_step, new_thread, edit)
        self._touch(new)
        return new

    async def delete_thread(self, thread: str) -> bool:
        """Delete a stored thread with everything kept for it: messages, usage, checkpoints,
        pending calls and its recorded model calls (`nbagent.models.record`); True if it existed.
        It no longer counts among this agent's threads."""
        self._own_threads.pop(thread, None)
        return await self.store.delete_thread(thread)

    def threads_sync(self) -> list[ThreadInfo]:
        """`threads` from sync code."""
        return _blocking(self.threads)

    def checkpoints_sync(self, thread: str) -> list[Checkpoint]:
        """`checkpoints` from sync code."""
        return _blocking(lambda: self.checkpoints(thread))

    def pending_sync(self, thread: str) -> list[PendingCall]:
        """`pending` from sync code."""
        return _blocking(lambda: self.pending(thread))

    def thread_usage_sync(self, thread: str) -> Usage:
        """`thread_usage` from sync code."""
        return _blocking(lambda: self.thread_usage(thread))

    def delete_thread_sync(self, thread: str) -> bool:
        """`delete_thread` from sync code."""
        return _blocking(lambda: self.delete_thread(thread))

    def fork_sync(
        self,
        thread: str,
        *,
        at_step: int | None = None,
        new_thread: str | None = None,
        edit: str | Mapping[str, Any] | Message | None = None,
    ) -> str:
        """`fork` from sync code."""
        return _blocking(lambda: self.fork(thread, at_step=at_step, new_thread=new_thread, edit=edit))

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
        is forecast first: `nbagent.evals.map_with_forecast`."""
        if {"dry_run", "confirm_over", "sample"} & kwargs.keys():
            from .evals import map_with_forecast

            return map_with_forecast(self, inputs, **kwargs)
        from .dataframe import batch

        return batch(self, inputs, **kwargs)

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
        ``agent.map(inputs, dry_run=True)``. See docs/evals.md.
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
    if (compaction is not None and compaction.policy == "native" and not callable(getattr(model, "compact", None))
            and not getattr(model, "native_context", False)):
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


async def _with_sources(config: RunConfig) -> RunConfig:
    """The run's config: with the tool sources' tools, when the agent has sources."""
    return config if config.sources is None else await config.sources.current(config)


def _events(agent: Agent[Any], prepare: Callable[[RunConfig], Any], box: RunBox | None = None) -> AsyncIterator[Event]:
    """The events of a run `prepare` makes from the agent's config (its tool sources' tools
    listed when the stream starts); the run's thread counts among the agent's threads."""
    from ._run.loop import drive

    config = agent.config()

    async def events() -> AsyncIterator[Event]:
        ready = await _with_sources(config)
        run = await agent._prepared(prepare(ready))
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


async def _consume(config: RunConfig, run: RunState) -> RunResult[Any]:
    """Run to the end without streaming."""
    from ._run.handle import consume
    from ._run.loop import drive

    return await consume(drive(config, run, stream=False), run)


def _blocking(work: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """`work` from sync code (`nbagent._sync.run_sync`). The run's machinery (asyncio, threads)
    loads on the first run, so that ``import nbagent`` stays light."""
    from ._sync import run_sync

    return run_sync(work)
