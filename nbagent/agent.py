"""`Agent`: a model, tools and settings; runs, streams and resumes conversations.

Imports the core (tools, models, _loop, result, store); never widgets or pandas (the `chat`
method imports the widget edge only when called).
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

from ._loop import Decision, RunState, drive, new_run_id, unanswered_calls
from ._sync import run_sync
from .events import Event, PendingCall, RunEnded
from .exceptions import (
    ArgumentsMismatchError,
    DuplicateToolError,
    InvalidArgumentsError,
    NotResumableError,
    PendingCallsError,
    ToolDefinitionError,
    UnknownCallError,
    UserError,
)
from .messages import (
    AssistantMessage,
    Message,
    Prompt,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
    user_message,
)
from .models import infer_model
from .models.base import Model
from .output import OUTPUT_TOOL, OutputSpec
from .result import RunResult
from .retry import Retry
from .store import Store, default_store
from .store.base import ThreadState, UsageColumns
from .tools import Tool
from .usage import ModelCallUsage, Usage

__all__ = ["Agent", "RunHandle"]

EventCallback = Callable[[Event], Any]


class Agent:
    """A model with tools. Configure once, run many conversations.

    ```python
    agent = Agent(model, tools=[get_weather, refund], system="Be brief.", max_steps=20)
    result = await agent.run("Refund order 42")          # or agent.run_sync(...)
    ```

    Args:
        model: a `Model`, or a string: ``"openai:gpt-4.1-mini"``, ``"local"``, ``"test"``.
        tools: `Tool`s or typed functions (wrapped with `tool`).
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
        store: where threads are kept (default: `nbagent.store.default_store()`).
        state_type: a pydantic model (or dataclass) to rebuild the user's state object from a
            stored thread after a restart.
        prices: your own prices, see `nbagent.pricing.price_row`.
        output_type: the type of a structured final answer (a pydantic model, a dataclass, or
            any type pydantic validates): the model gives it by calling a ``final_result`` tool
            and ``result.output`` is an instance of it (see docs/output.md). None: a text answer.
        output_retries: how many times a model that answers in text that does not fit
            `output_type` is asked again before the run fails (invalid ``final_result``
            arguments go back to it like any tool's, within ``max_steps``).
    """

    def __init__(
        self,
        model: Model | str,
        *,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        system: str | None = None,
        max_steps: int = 20,
        tools_in_order: bool = False,
        retry: Retry | None = None,
        token_budget: int | None = None,
        cost_budget: float | None = None,
        stop_when: Callable[[RunResult], bool] | None = None,
        settings: Mapping[str, Any] | None = None,
        store: Store | None = None,
        state_type: type | None = None,
        prices: Mapping[str, Any] | None = None,
        name: str | None = None,
        output_type: Any = None,
        output_retries: int = 2,
    ) -> None:
        self.model = infer_model(model)
        self.tools: dict[str, Tool] = {}
        for item in tools:
            t = item if isinstance(item, Tool) else Tool.from_function(item)
            if not isinstance(t, Tool):
                raise ToolDefinitionError(f"not a tool: {item!r}")
            if t.name in self.tools:
                raise DuplicateToolError(f"two tools are named {t.name!r}; tool names must be unique")
            self.tools[t.name] = t
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
        self._store = store
        self.state_type = state_type
        if prices:
            from .pricing import check_prices  # bad prices fail here, not in the first run

            self.prices = check_prices(prices)
        else:
            self.prices = None
        self.name = name
        self.tool_definitions = [t.definition() for t in self.tools.values()]
        self.request_settings = self.settings
        """The settings sent with each request: `settings`, plus ``tool_choice="required"`` when
        there is an `output_type` and no ``tool_choice`` was set (the answer must be a tool call)."""
        self.output: OutputSpec | None = None
        if output_type is not None:
            self.output = OutputSpec(output_type)
            if OUTPUT_TOOL in self.tools:
                raise DuplicateToolError(
                    f"a tool is named {OUTPUT_TOOL!r}, the name of the tool that carries the structured "
                    "answer (output_type); rename it"
                )
            self.tool_definitions.append(self.output.tool.definition())
            if "tool_choice" not in self.settings:
                self.request_settings = {**self.settings, "tool_choice": "required"}
        if not isinstance(output_retries, int) or output_retries < 0:
            raise UserError(f"output_retries must be a non-negative integer, got {output_retries!r}")
        self.output_retries = output_retries

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = default_store()
        return self._store

    def price(self, row: ModelCallUsage) -> None:
        """Fill the cost columns of a usage row (prices are looked up when the row is made)."""
        if row.provider in ("function", "test") and not self.prices:
            return
        from .pricing import price_row

        price_row(row, self.prices)

    def __repr__(self) -> str:
        return f"Agent({self.model!r}, tools={list(self.tools)})"

    # ------------------------------------------------------------------ preparing runs
    async def _load(self, thread: str) -> ThreadState | None:
        return await self.store.load(thread)

    def _restore_state(self, stored: Any) -> Any:
        if stored is None or self.state_type is None:
            return stored
        validate = getattr(self.state_type, "model_validate", None)
        if callable(validate):
            return validate(stored)
        if isinstance(stored, dict):
            return self.state_type(**stored)
        return stored

    def _run_state(self, thread: str, loaded: ThreadState | None, state: Any) -> RunState:
        run = RunState(new_run_id(), thread, list(loaded.messages) if loaded else [])
        if loaded is not None:
            meta = loaded.meta
            run.version = loaded.version
            run.thread_step = meta.get("thread_step") or (loaded.message_steps[-1] if loaded.message_steps else 0)
            run.ledger = dict(loaded.ledger)
            run.always_allowed = set(meta.get("always_allowed", ()))
            run.decisions = {k: Decision.from_dict(v) for k, v in meta.get("decisions", {}).items()}
            run.pending = [PendingCall.from_dict(p) for p in meta.get("pending", ())]
            run.state = state if state is not None else self._restore_state(meta.get("state"))
        else:
            run.state = state
        run.new_message_index = len(run.messages)
        return run

    async def _prepare_run(self, prompt: Prompt | None, thread: str | None, state: Any) -> RunState:
        message = None if prompt is None else user_message(prompt)  # bad input fails before any I/O
        # A fresh thread id cannot be in the store yet: skip the read (one store transaction a run).
        loaded = await self._load(thread) if thread else None
        thread = thread or "thread_" + uuid.uuid4().hex[:16]
        run = self._run_state(thread, loaded, state)
        open_calls = unanswered_calls(run.messages)
        if open_calls:
            ids = ", ".join(c.id for c in open_calls)
            raise PendingCallsError(
                f"thread {thread!r} has tool calls waiting ({ids}); decide them with "
                f"agent.resume(thread={thread!r}, approve=[...], deny={{...}}) before sending a new prompt"
            )
        run.pending = []
        run.decisions = {}
        if message is None:
            if not run.messages:
                raise UserError("run() needs a prompt for a new thread")
        else:
            run.messages.append(message)
            run.version = await self.store.append(
                thread, version=run.version, step=run.thread_step, messages=[message],
                meta=run.meta(),
            )
            run.meta_dirty = False
        return run

    async def _prepare_resume(
        self,
        result: RunResult | None,
        thread: str | None,
        approve: Iterable[str | PendingCall],
        deny: Mapping[str, str | None] | Iterable[str],
        edit: Mapping[str, dict[str, Any]],
        results: Mapping[str, Any],
        always_allow: Iterable[str],
        state: Any,
        decided_by: str | None = None,
    ) -> RunState:
        if result is not None and not isinstance(result, RunResult):
            raise UserError(f"resume() takes the RunResult to continue, got {type(result).__name__}")
        thread = thread or (result.thread if result is not None else None)
        if thread is None:
            raise UserError("resume() needs the paused RunResult or thread=...")
        loaded = await self._load(thread)
        if loaded is None:
            raise NotResumableError(f"thread {thread!r} is not in the store ({self.store!r})")
        run = self._run_state(thread, loaded, state if state is not None else (result.state if result else None))
        open_calls = unanswered_calls(run.messages)
        last = run.messages[-1] if run.messages else None
        if not open_calls and (last is None or last.kind == "assistant"):
            raise NotResumableError(
                f"the run on thread {thread!r} is completed; continue the conversation with "
                f"agent.run(prompt, thread={thread!r})"
            )
        pending = {p.id: p for p in run.pending}
        seen = {p.id: p for p in result.pending} if result is not None else {}

        def check(item: str | PendingCall) -> PendingCall:
            call_id = item.id if isinstance(item, PendingCall) else item
            current = pending.get(call_id)
            if current is None:
                waiting = ", ".join(f"{p.id} ({p.name})" for p in pending.values()) or "none"
                raise UnknownCallError(f"no call {call_id!r} is waiting on thread {thread!r}; waiting: {waiting}")
            shown = item if isinstance(item, PendingCall) else seen.get(call_id, current)
            if shown.args_hash != current.args_hash:
                raise ArgumentsMismatchError(
                    f"the decision for call {call_id!r} was made for arguments {shown.args!r}, but the "
                    f"waiting call has {current.args!r}; decide again on what is waiting now"
                )
            return current

        decided: set[str] = set()
        now = time.time()

        def once(call_id: str) -> None:
            if call_id in decided:
                raise UserError(f"call {call_id!r} got more than one decision")
            decided.add(call_id)

        for item in approve:
            p = check(item)
            once(p.id)
            if p.reason == "client":
                raise UserError(
                    f"call {p.id!r} ({p.name}) is a client tool: give its result with results={{id: value}}")
            run.decisions[p.id] = Decision("approve", p.args_hash, time=now, by=decided_by)
        deny_items = deny.items() if isinstance(deny, Mapping) else ((d, None) for d in deny)
        for call_id, reason in deny_items:
            p = check(call_id)
            once(p.id)
            run.decisions[p.id] = Decision("deny", p.args_hash, reason=reason, time=now, by=decided_by)
        for call_id, new_args in edit.items():
            p = check(call_id)
            once(p.id)
            tool = self.tools.get(p.name)
            if tool is None:
                raise UnknownCallError(f"call {call_id!r} is for tool {p.name!r}, which this agent does not have")
            if not isinstance(new_args, dict):
                raise InvalidArgumentsError(f"edit for call {call_id!r} must be a dict of arguments")
            tool.validate(new_args)
            run.decisions[p.id] = Decision("approve", p.args_hash, args=dict(new_args), time=now, by=decided_by)
        for call_id, value in results.items():
            p = check(call_id)
            once(p.id)
            if p.reason != "client":
                raise UserError(f"call {p.id!r} ({p.name}) runs on the server; approve or deny it instead")
            run.decisions[p.id] = Decision("result", p.args_hash, value=value, time=now, by=decided_by)
        for name in always_allow:
            if name not in self.tools:
                raise UserError(f"always_allow names unknown tool {name!r}")
            run.always_allowed.add(name)
        run.meta_dirty = True
        return run

    # ------------------------------------------------------------------ public async API
    def stream(
        self, prompt: Prompt | None = None, *, thread: str | None = None, state: Any = None
    ) -> AsyncIterator[Event]:
        """Run and yield typed events as they happen (text deltas, tool calls, ...); the last
        event is ``run-completed`` / ``run-paused`` / ... carrying the `RunResult`."""
        return self._events(lambda: self._prepare_run(prompt, thread, state))

    def _events(self, prepare: Callable[[], Any], box: _RunBox | None = None) -> AsyncIterator[Event]:
        async def events() -> AsyncIterator[Event]:
            run = await prepare()
            if box is not None:
                box.run = run
            inner = drive(self, run, stream=True)
            try:
                async for event in inner:
                    yield event
            finally:
                # Closing this stream early must close the run now (answering open calls), not
                # when the loop gets round to finalizing the abandoned inner generator.
                await inner.aclose()

        return events()

    async def run(self, prompt: Prompt | None = None, *, thread: str | None = None, state: Any = None) -> RunResult:
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
        run = await self._prepare_run(prompt, thread, state)
        return await _consume(drive(self, run, stream=False), run)

    async def resume(
        self,
        result: RunResult | None = None,
        *,
        thread: str | None = None,
        approve: Iterable[str | PendingCall] = (),
        deny: Mapping[str, str | None] | Iterable[str] = (),
        edit: Mapping[str, dict[str, Any]] | None = None,
        results: Mapping[str, Any] | None = None,
        always_allow: Iterable[str] = (),
        state: Any = None,
        decided_by: str | None = None,
    ) -> RunResult:
        """Continue a paused, stopped, failed or cancelled run.

        Args:
            result: the `RunResult` to continue (or give `thread`).
            thread: the thread to continue, e.g. after a kernel restart.
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
        run = await self._prepare_resume(result, thread, approve, deny, edit or {}, results or {},
                                         always_allow, state, decided_by)
        return await _consume(drive(self, run, stream=False), run)

    def resume_stream(
        self,
        result: RunResult | None = None,
        *,
        thread: str | None = None,
        approve: Iterable[str | PendingCall] = (),
        deny: Mapping[str, str | None] | Iterable[str] = (),
        edit: Mapping[str, dict[str, Any]] | None = None,
        results: Mapping[str, Any] | None = None,
        always_allow: Iterable[str] = (),
        state: Any = None,
        decided_by: str | None = None,
    ) -> AsyncIterator[Event]:
        """`resume`, yielding events like `stream`."""
        return self._events(lambda: self._prepare_resume(
            result, thread, approve, deny, edit or {}, results or {}, always_allow, state, decided_by))

    def start(
        self,
        prompt: Prompt | None = None,
        *,
        thread: str | None = None,
        state: Any = None,
        on_event: EventCallback | None = None,
        resume: Mapping[str, Any] | None = None,
    ) -> RunHandle:
        """Start a run as a background task on the running loop and return at once.

        This is how a notebook cell runs an agent without blocking the kernel: the cell ends,
        the task streams `on_event(event)` callbacks, and `RunHandle.cancel()` stops it.
        With ``resume={...}`` (the keyword arguments of `resume`) it continues a thread instead.
        """
        box = _RunBox()
        if resume is not None:
            options = dict(resume)
            if not isinstance(options.get("edit", {}), Mapping) or not isinstance(options.get("results", {}), Mapping):
                raise UserError("resume={'edit': {...}, 'results': {...}} must be dicts")
            # popped here, not inside the lambda: the check below must see only unknown options
            r_result = options.pop("result", None)
            approve, deny = options.pop("approve", ()), options.pop("deny", ())
            edit, results = options.pop("edit", None) or {}, options.pop("results", None) or {}
            always_allow = options.pop("always_allow", ())
            decided_by = options.pop("decided_by", None)
            if options:
                raise UserError(f"unknown resume options: {sorted(options)}")
            events = self._events(lambda: self._prepare_resume(
                r_result, thread, approve, deny, edit, results, always_allow, state, decided_by), box)
        else:
            events = self._events(lambda: self._prepare_run(prompt, thread, state), box)
        return RunHandle(events, on_event, box)

    # ------------------------------------------------------------------ sync twins
    def run_sync(self, prompt: Prompt | None = None, *, thread: str | None = None, state: Any = None) -> RunResult:
        """`run` from sync code: works in scripts and in notebook cells (no nest_asyncio).
        A call needing approval makes it return ``paused``; KeyboardInterrupt cancels the run."""
        return run_sync(lambda: self.run(prompt, thread=thread, state=state))

    def resume_sync(
        self,
        result: RunResult | None = None,
        *,
        thread: str | None = None,
        approve: Iterable[str | PendingCall] = (),
        deny: Mapping[str, str | None] | Iterable[str] = (),
        edit: Mapping[str, dict[str, Any]] | None = None,
        results: Mapping[str, Any] | None = None,
        always_allow: Iterable[str] = (),
        state: Any = None,
        decided_by: str | None = None,
    ) -> RunResult:
        """`resume` from sync code."""
        return run_sync(lambda: self.resume(result, thread=thread, approve=approve, deny=deny, edit=edit,
                                            results=results, always_allow=always_allow, state=state,
                                            decided_by=decided_by))

    # ------------------------------------------------------------------ threads
    async def threads(self) -> list[Any]:
        """The stored threads (`ThreadInfo`), most recent first."""
        return await self.store.threads()

    async def history(self, thread: str) -> list[Any]:
        """The checkpoints of a thread (`Checkpoint`: step, time, last message, usage so far)."""
        return await self.store.checkpoints(thread)

    async def pending(self, thread: str) -> list[PendingCall]:
        """The calls of a stored thread that wait for a decision or a client result, e.g. after
        a kernel restart: ``await agent.resume(thread=t, approve=await agent.pending(t))``."""
        loaded = await self._load(thread)
        if loaded is None:
            return []
        open_ids = {c.id for c in unanswered_calls(loaded.messages)}
        return [p for p in map(PendingCall.from_dict, loaded.meta.get("pending", ())) if p.id in open_ids]

    def pending_sync(self, thread: str) -> list[PendingCall]:
        """`pending` from sync code."""
        return run_sync(lambda: self.pending(thread))

    async def thread_usage(self, thread: str) -> Usage:
        """All model calls stored for a thread, summed (read column-wise, without the messages)."""
        columns = await self.store.usage_columns(thread)
        if isinstance(columns, UsageColumns):
            return Usage.of(columns.to_rows())
        loaded = await self._load(thread)  # a store overriding usage_columns with plain lists
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
        for c in await agent.history("support-42"):         # step, last message, tokens so far
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

        Args:
            thread: the thread to copy (it is not changed).
            at_step: the last step to copy (see `history`); None copies the whole thread.
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
        loaded = await self._load(thread)
        if loaded is None:
            raise UserError(f"thread {thread!r} is not in the store ({self.store!r})")
        if at_step is not None and (not isinstance(at_step, int) or at_step < 0):
            raise UserError(f"at_step must be a step number >= 0, got {at_step!r}")
        steps = loaded.message_steps
        count = len(steps) if at_step is None else bisect.bisect_right(steps, at_step)
        messages = loaded.messages[:count]
        while unanswered_calls(messages):
            count = max(i for i, m in enumerate(messages) if m.kind == "assistant")
            messages = messages[:count]
        last = None
        if edit is not None:
            if not messages:
                raise UserError(f"nothing to edit: thread {thread!r} has no message at step {at_step}")
            last = _edited(messages[-1], edit)
        new_thread = new_thread or f"{thread}-fork-{uuid.uuid4().hex[:8]}"
        meta = {
            "status": "forked",
            "run_id": None,
            "thread_step": steps[count - 1] if count else 0,
            "pending": [],
            "decisions": {},
            "always_allowed": list(loaded.meta.get("always_allowed", [])),
            "state": None,
            "stop_reason": None,
            "error": None,
            "output": None,
            "truncated": False,
            "forked_from": {"thread": thread, "at_step": at_step, "messages": count},
        }
        await self.store.copy(thread, new_thread, messages=count, last=last, meta=meta)
        return new_thread

    def fork_sync(
        self,
        thread: str,
        *,
        at_step: int | None = None,
        new_thread: str | None = None,
        edit: str | Mapping[str, Any] | Message | None = None,
    ) -> str:
        """`fork` from sync code."""
        return run_sync(lambda: self.fork(thread, at_step=at_step, new_thread=new_thread, edit=edit))

    def threads_sync(self) -> list[Any]:
        """`threads` from sync code."""
        return run_sync(self.threads)

    def history_sync(self, thread: str) -> list[Any]:
        """`history` from sync code."""
        return run_sync(lambda: self.history(thread))

    def thread_usage_sync(self, thread: str) -> Usage:
        """`thread_usage` from sync code."""
        return run_sync(lambda: self.thread_usage(thread))

    # ------------------------------------------------------------------ edges
    def chat(self, thread: str | None = None, **kwargs: Any) -> Any:
        """Show the chat view in the notebook cell (see `nbagent.widgets.ChatView`)."""
        from .widgets import ChatView

        return ChatView(self, thread=thread, **kwargs)

    def map(self, inputs: Any, **kwargs: Any) -> Any:
        """Run many independent conversations concurrently; returns a DataFrame
        (see `nbagent.dataframe.batch`)."""
        from .dataframe import batch

        return batch(self, inputs, **kwargs)


def _edited(message: Message, edit: str | Mapping[str, Any] | Message) -> Message:
    """The fork point's message after `Agent.fork`'s `edit`."""
    if isinstance(edit, (SystemMessage, UserMessage, AssistantMessage, ToolResultMessage)):
        new: Message = edit
    else:
        if isinstance(edit, str):
            changes: dict[str, Any] = {"text" if message.kind == "assistant" else "content": edit}
        elif isinstance(edit, Mapping):
            changes = dict(edit)
        else:
            raise UserError(f"edit must be a str, a dict of fields or a message, got {type(edit).__name__}")
        names = {f.name for f in dataclasses.fields(message)} - {"kind"}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise UserError(f"edit names fields {unknown} that a {message.kind} message does not have; "
                            f"its fields: {sorted(names)}")
        new = dataclasses.replace(message, **changes)  # type: ignore[arg-type]
    if message.kind == "tool-result" and (
        new.kind != "tool-result" or new.call_id != message.call_id  # type: ignore[union-attr]
    ):
        raise UserError(
            f"the fork point is the result of call {message.call_id!r}; the edit must stay a result "  # type: ignore[union-attr]
            "of that call (same call_id), or the call would be left without a result"
        )
    if new.kind == "assistant" and new.tool_calls:  # type: ignore[union-attr]
        raise UserError(
            "an edited answer at the fork point may not have tool calls: they would have no results"
        )
    return new


async def _consume(events: AsyncIterator[Event], run: RunState) -> RunResult:
    # Iterate to the end (RunEnded is the last event) so the generator finishes here, rather
    # than later in an asyncgen-finalizer task (a task and a self-pipe write per run).
    ended = None
    async for event in events:
        if isinstance(event, RunEnded):
            ended = event.result
    if ended is not None:
        return ended
    assert run.result is not None
    return run.result


class _RunBox:
    """Lets a `RunHandle` see the run state its event generator created."""

    __slots__ = ("run",)

    def __init__(self) -> None:
        self.run: RunState | None = None


class RunHandle:
    """A run going on in a background task (see `Agent.start`).

    ``await handle`` gives the `RunResult`; `cancel()` stops the run, leaves the conversation
    valid, and the result has ``status="cancelled"``. `on_event` gets every event, including a
    final ``run-cancelled`` one.
    """

    def __init__(self, events: AsyncIterator[Event], on_event: EventCallback | None = None,
                 box: _RunBox | None = None) -> None:
        self._events = events
        self._on_event = on_event
        self._box = box or _RunBox()
        self._cancel_requested = False
        self.result: RunResult | None = None
        self.error: BaseException | None = None
        self.task: asyncio.Task[RunResult | None] = asyncio.ensure_future(self._main())

    def _emit(self, event: Event) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(event)
        except Exception:  # a view's bug must not kill the run
            import traceback

            traceback.print_exc()

    async def _main(self) -> RunResult | None:
        try:
            async for event in self._events:
                self._emit(event)
                if isinstance(event, RunEnded):
                    self.result = event.result
        except asyncio.CancelledError:
            if not self._cancel_requested:
                raise
            uncancel = getattr(asyncio.current_task(), "uncancel", None)
            if uncancel is not None:
                uncancel()
            run = self._box.run
            if run is not None and run.result is not None:
                self.result = run.result
                self._emit(RunEnded("run-cancelled", run.result))
        except Exception as exc:  # e.g. PendingCallsError before the run started
            self.error = exc
            raise
        return self.result

    @property
    def done(self) -> bool:
        return self.task.done()

    def cancel(self) -> None:
        """Stop the run; safe to call from any thread (e.g. a button handler)."""
        self._cancel_requested = True
        loop = self.task.get_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self.task.cancel()
        else:
            loop.call_soon_threadsafe(self.task.cancel)

    async def wait(self) -> RunResult | None:
        return await self.task

    def __await__(self) -> Any:
        return self.task.__await__()
