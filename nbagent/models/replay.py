"""Record a model's calls with the thread, and replay them: no key, no network, no cost.

```python
from nbagent.models import record, replay, export_recording
agent = Agent(record(real_model), store="runs.db")            # every call kept with its thread
agent = Agent(replay("runs.db", thread="t1"))                  # answers from the recording
agent = Agent(replay("recording.jsonl", then=real_model))      # replay while requests match, then go live
export_recording(store, "recording.jsonl")                     # JSON Lines, no keys
```

Owns `RecordingModel`, `ReplayModel`, `record`, `replay`, `export_recording`. The run loop hands
every model each answer with its store as a `RecordingSink` and the thread (`Model.keep_recording`),
and a recording model keeps its call there; a replayed answer is marked (`ModelResponse.replayed`)
so its usage row costs 0. Recordings are read from a `RecordingSource` (a store) or a ``.jsonl``
file. Imports messages, exceptions, pricing, `base` and `_recording`; the store package only to
open a store a user names by its path or URL (``replay("runs.db")``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from ..exceptions import ReplayMismatchError, UserError
from ..messages import ToolCall, ToolResultMessage, message_from_dict
from ..pricing import context_window_of
from ._recording import (
    Recording,
    RecordingSink,
    RecordingSource,
    answered_key,
    common_prefix,
    first_difference,
    message_content,
    request_content,
    request_key,
    tool_results,
)
from .base import Model, ModelRequest, ModelResponse, ReasoningText, StreamItem, WrappedModel

__all__ = ["RecordingModel", "ReplayModel", "export_recording", "record", "replay"]


class RecordingModel(WrappedModel):
    """`record(model)`: answers with `inner`, and keeps each call (normalised request, streamed
    deltas with their times, answer, token counts) until the run loop stores it with the thread
    (`keep_recording`). An answer that failed is not recorded."""

    def __init__(self, inner: Model) -> None:
        super().__init__(inner)
        self._pending: dict[int, Recording] = {}

    def _made(self, request: ModelRequest, response: ModelResponse, started: float,
              deltas: list[list[Any]]) -> None:
        content = request_content(request)
        counts = response.usage
        self._pending[id(response)] = Recording(
            request_key(content), content, response.message.to_dict(),
            {"input_tokens": counts.input_tokens, "cache_read_tokens": counts.cache_read_tokens,
             "cache_write_tokens": counts.cache_write_tokens, "output_tokens": counts.output_tokens,
             "reasoning_tokens": counts.reasoning_tokens, "reported": counts.reported},
            deltas, self.inner.provider, response.model or self.inner.model_name, self.inner.priced,
            step=request.step, time=time.time(), latency_s=time.perf_counter() - started,
            context_window=self.inner.context_window,
        )

    async def request(self, request: ModelRequest) -> ModelResponse:
        started = time.perf_counter()
        response = await self.inner.request(request)
        self._made(request, response, started, [])
        return response

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        started = time.perf_counter()
        deltas: list[list[Any]] = []
        async for item in self.inner.request_stream(request):
            if isinstance(item, ModelResponse):
                self._made(request, item, started, deltas)
            elif isinstance(item, str):
                kind = "reasoning" if isinstance(item, ReasoningText) else "text"
                deltas.append([round(time.perf_counter() - started, 6), kind, str(item)])
            yield item

    async def keep_recording(self, sink: RecordingSink, thread: str, response: ModelResponse) -> None:
        """Keep the recording of `response` in `sink` with `thread` (the run loop calls this after
        each answer); nothing for an answer this model did not make."""
        made = self._pending.pop(id(response), None)
        if made is None:
            return
        made.thread = thread
        await sink.add_recording(thread, made.to_dict())

    def __repr__(self) -> str:
        return f"record({self.inner!r})"


def record(model: Model) -> RecordingModel:
    """`model`, with each of its calls stored with the thread in the agent's store (see
    `nbagent.models.replay`): ``Agent(record(real_model), store="runs.db")``."""
    if not isinstance(model, Model):
        raise UserError(f"record() takes a Model, got {type(model).__name__}")
    return RecordingModel(model)


class ReplayModel(Model):
    """`replay(...)`: answers each request from the recorded call with the same content.

    Requests are matched by content (`request_content`: messages, tools, settings; not call ids,
    steps or timings), so the order of calls does not matter; a request recorded several times
    gets its recorded answers in turn. A request with no recording raises `ReplayMismatchError`
    naming its first difference from the closest recorded request, unless `then` is set: from
    that request on, `then` answers (live). Nothing is sent anywhere while replaying.

    With ``tools="recorded"`` the run loop asks `recorded_result` before it runs a tool call of
    a replayed answer, and the recorded result stands in for the call: the tool does not run.
    """

    def __init__(self, recordings: Iterable[Recording], *, then: Model | None = None,
                 timing: bool = False, source: str = "a recording",
                 tools: Literal["run", "recorded"] = "run") -> None:
        self.recordings = list(recordings)
        self.then = then
        self.timing = timing
        self.source = source
        self.tools = tools
        """``"run"``: the tools run (default); ``"recorded"``: their results come from the recording."""
        self._results: dict[str, dict[int, dict[str, Any]]] | None = None  # `tool_results`, made on first use
        self._waiting: dict[tuple[str, str], list[dict[str, Any] | None]] = {}
        self.live = False
        """True once a request did not match and `then` took over."""
        self.replayed = 0
        """How many requests were answered from the recording."""
        self._index: dict[str, list[Recording]] = {}
        for entry in self.recordings:
            self._index.setdefault(entry.key, []).append(entry)
        self._used: dict[str, int] = {}
        self._first = self.recordings[0] if self.recordings else None

    # The recorded model's provider, name and pricing while replaying; `then`'s once live.
    @property
    def provider(self) -> str:  # type: ignore[override]
        if self.then is not None and (self.live or self._first is None):
            return self.then.provider
        return self._first.provider if self._first else "replay"

    @property
    def model_name(self) -> str:  # type: ignore[override]
        if self.then is not None and (self.live or self._first is None):
            return self.then.model_name
        return self._first.model if self._first else "replay"

    @property
    def priced(self) -> bool:  # type: ignore[override]
        if self.then is not None and (self.live or self._first is None):
            return self.then.priced
        return self._first.priced if self._first else False

    def _default_context_window(self) -> int | None:
        """The recorded model's window while replaying (so results are cut and requests sized as
        they were when recorded); `then`'s once live or with no recording."""
        if self.then is not None and (self.live or self._first is None):
            return self.then.context_window
        if self._first is None:
            return None
        if self._first.context_window is not None:
            return self._first.context_window
        return context_window_of(self._first.model, self._first.provider)  # a recording made before the field

    def _find(self, request: ModelRequest) -> Recording | None:
        """The recording answering `request`; None when `then` goes live. Raises
        `ReplayMismatchError` when nothing matches and there is no `then`."""
        if self.live:
            return None
        content = request_content(request)
        key = request_key(content)
        found = self._index.get(key)
        if found:
            used = self._used.get(key, 0)
            self._used[key] = used + 1
            self.replayed += 1
            entry = found[min(used, len(found) - 1)]
            if self.tools == "recorded":
                self._expect_results(content, entry)
            return entry
        if self.then is not None:
            self.live = True
            return None
        raise ReplayMismatchError(self._mismatch(content), provider="replay")

    def _expect_results(self, content: dict[str, Any], entry: Recording) -> None:
        """Keep the recorded results of the calls of `entry`'s answer (to `content`), for
        `recorded_result`; a call whose result the recording does not hold gets None."""
        if not entry.message.get("tool_calls"):
            return
        if self._results is None:
            self._results = tool_results(self.recordings)
        answer = message_content(message_from_dict(entry.message))
        results = self._results.get(answered_key(content["messages"], answer), {})
        for place, (name, args) in enumerate(answer["tool_calls"]):
            self._waiting.setdefault((name, args), []).append(results.get(place))

    def recorded_result(self, call: ToolCall, edited: dict[str, Any] | None = None) -> ToolResultMessage | None:
        """With ``tools="recorded"``: the recorded result of `call` (an answer replayed from the
        recording asked for it), which the run loop uses instead of running the tool; `edited`:
        the arguments a person edited. None: the tool runs (``tools="run"``, or the call was
        asked live, by `then`). A call whose result the recording does not hold (the recorded run
        ended before it sent the result to the model) gets an error result, unless `then` is set:
        then it runs."""
        if self.tools != "recorded" or self.live:
            return None
        waiting = self._waiting.get((call.name, call.args_json))
        found = waiting.pop(0) if waiting else None
        if found is None:
            if self.then is not None:
                return None
            return ToolResultMessage(call.id, call.name, f"{self.source} holds no recorded result for this call "
                                     "(replay(tools='recorded') runs no tool)", True, "failed", 0.0, edited_args=edited)
        content = str(found["content"])
        if edited is not None:  # the recorded text is what the model read: the edit's note, then the result
            content = content.removeprefix(ToolResultMessage("", "", "", edited_args=edited).model_text())
        is_error = bool(found.get("is_error"))
        return ToolResultMessage(call.id, call.name, content, is_error, "failed" if is_error else "done", 0.0,
                                 edited_args=edited)

    def _mismatch(self, content: dict[str, Any]) -> str:
        if not self.recordings:
            return f"{self.source} holds no recorded model call to answer this request with"
        closest = max(self.recordings, key=lambda r: common_prefix(r.request, content))
        return (f"no recorded model call in {self.source} matches this request (step {closest.step} of "
                f"thread {closest.thread!r} is the closest): {first_difference(closest.request, content)}")

    async def request(self, request: ModelRequest) -> ModelResponse:
        found = self._find(request)
        if found is None:
            assert self.then is not None
            return await self.then.request(request)
        return found.response()

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        found = self._find(request)
        if found is None:
            assert self.then is not None
            async for item in self.then.request_stream(request):
                yield item
            return
        clock = time.perf_counter()
        times = [d[0] for d in found.deltas]
        for i, item in enumerate(found.stream_items()):
            if self.timing and i < len(times):
                import asyncio  # only when pacing: importing nbagent loads no asyncio

                await asyncio.sleep(max(0.0, times[i] - (time.perf_counter() - clock)))
            yield item

    async def keep_recording(self, sink: RecordingSink, thread: str, response: ModelResponse) -> None:
        """Pass a live answer on to `then` (it keeps it when it records: ``then=record(real_model)``)."""
        if self.then is not None and not response.replayed:
            await self.then.keep_recording(sink, thread, response)

    def __repr__(self) -> str:
        models = ", ".join(dict.fromkeys(r.model for r in self.recordings))  # which model's answers these are
        count = len(self.recordings)
        calls = f"{count} call{'' if count == 1 else 's'}" + (f" of {models}" if models else "")
        return f"replay({self.source}, {calls}{', then=' + repr(self.then) if self.then else ''})"


def _recording(data: Any, where: str) -> Recording:
    """`Recording.from_dict` of `data`, or a `UserError` naming `where` and what is wrong."""
    try:
        return Recording.from_dict(data)
    except KeyError as exc:
        raise UserError(f"{where}: not a recorded model call (it has no {exc} field)") from None
    except (ValueError, TypeError) as exc:
        raise UserError(f"{where}: not a recorded model call ({exc})") from None


def _read_jsonl(path: Path) -> list[Recording]:
    entries = []
    with _opened(path) as file:
        for number, raw in enumerate(file, 1):
            try:
                line = raw.decode("utf-8").removeprefix("\ufeff" if number == 1 else "")
            except UnicodeDecodeError as exc:
                raise UserError(f"{path}, line {number}: not UTF-8 text (the byte 0x{raw[exc.start]:02x} at "
                                f"offset {exc.start} of the line); export_recording writes UTF-8") from None
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except ValueError as exc:
                raise UserError(f"{path}, line {number}: not a recorded model call ({exc})") from None
            entries.append(_recording(data, f"{path}, line {number}"))
    return entries


def _opened(path: Path) -> Any:
    """`path` opened to read bytes, or a `UserError` saying why it cannot be."""
    try:
        return path.open("rb")
    except FileNotFoundError:
        raise UserError(_not_found(path)) from None
    except OSError as exc:
        raise UserError(f"{path}: cannot be read as a recording ({exc.strerror or exc})") from None


def _not_found(path: Path) -> str:
    return (f"{path}: file not found (replay reads a store file, a postgresql:// URL, or a .jsonl file "
            "that export_recording wrote)")


def _run_sync(make: Any) -> Any:
    from .._sync import run_sync

    return run_sync(make)


def _thread(row: Any) -> Any:
    return row.get("thread") if isinstance(row, dict) else None


Source = RecordingSource | str | os.PathLike[str]
"""Where recordings are read from: a store (a `RecordingSource`), a store's path or URL, or a
``.jsonl`` file of `export_recording`."""


def load_recordings(source: Source, threads: Sequence[str] | None = None) -> list[Recording]:
    """The recorded calls of `source` (a store, a store path or URL, or a ``.jsonl`` file), of
    `threads` only when given."""
    if isinstance(source, RecordingSource):
        rows = _run_sync(lambda: source.recordings(threads))
        return [_recording(r, f"{source!r}, the recorded call {i} (of thread {_thread(r)!r})")
                for i, r in enumerate(rows)]
    if not isinstance(source, (str, os.PathLike)):
        raise UserError(f"recordings are read from a store, a store's path or URL, or a .jsonl file; "
                        f"got {type(source).__name__}")
    text = os.fspath(source)
    if text.endswith((".jsonl", ".ndjson")):
        entries = _read_jsonl(Path(text).expanduser())
        return entries if threads is None else [e for e in entries if e.thread in set(threads)]
    if "://" not in text and text.strip().lower() != "memory" and not Path(text).expanduser().exists():
        raise UserError(_not_found(Path(text).expanduser()))  # (opening it would make an empty store there)
    from ..store import open_store

    store = open_store(text)
    try:
        return load_recordings(store, threads)
    finally:
        _run_sync(store.close)


def replay(
    source: Source,
    thread: str | Sequence[str] | None = None,
    *,
    then: Model | None = None,
    timing: bool = False,
    tools: Literal["run", "recorded"] = "run",
) -> ReplayModel:
    """A model answering from recorded calls (`record`): no key, no network, no cost.

    Args:
        source: a store (or its path or URL) holding recordings, or a ``.jsonl`` file that
            `export_recording` wrote. Only read: a replayed run writes to its agent's own store.
        thread: the recorded thread (or threads) to answer from; None: every recording.
        then: the model that answers from the first request that matches no recording on
            (go live); None: such a request fails the run with `ReplayMismatchError`.
        timing: True to stream the recorded deltas at their recorded pace (default: at once).
        tools: ``"run"`` (default): the agent's tools run, as they are the user's code;
            ``"recorded"``: the result of each call a replayed answer asks for is taken from the
            recording and the tool does not run (for tools with side effects, or that need a
            network). The text the model read is replayed: images and the view's rich display are
            not kept. Calls asked for after going live (`then`) run.

    The usage rows of replayed calls are marked ``replayed`` and cost 0; ``recorded_cost`` keeps
    what the recorded call cost.
    """
    if tools not in ("run", "recorded"):
        raise UserError(f"tools must be 'run' or 'recorded', got {tools!r}")
    threads = [thread] if isinstance(thread, str) else (list(thread) if thread is not None else None)
    entries = load_recordings(source, threads)
    label = repr(os.fspath(source)) if isinstance(source, (str, os.PathLike)) else repr(source)
    if thread is not None and not entries:
        raise UserError(f"{label} holds no recorded model call of thread {thread!r}")
    return ReplayModel(entries, then=then, timing=timing, source=label, tools=tools)


def export_recording(source: Source, path: str | os.PathLike[str],
                     threads: Sequence[str] | None = None) -> int:
    """Write the recorded calls of `source` (of `threads`, None: all) to a JSON Lines file that
    `replay` reads; returns how many were written. The file holds requests and answers only:
    no keys, headers or URLs."""
    entries = load_recordings(source, threads)
    target = Path(path).expanduser()
    with target.open("w", encoding="utf-8") as file:
        for entry in entries:
            file.write(json.dumps(entry.to_dict(), ensure_ascii=False, default=str) + "\n")
    return len(entries)
