"""The time limit of one whole model call, for every HTTP provider (`HTTPModel`; no SDK imported).

Owns `Deadline` (one timer per call, which the call marks around its awaits of the server),
`within` (one awaited request under a deadline, the SDK's failure mapped to nbagent's error) and
`read_within` (a started stream's items under a deadline, the stream closed however the reading
ends, the event loop given its turn at least every `YIELD_AFTER`). `HTTPModel` makes one
`Deadline` per request (``OpenAIModel(deadline=...)``, ``AnthropicModel(deadline=...)``) and
passes its error mapping in.

Every error leaves these functions from outside an ``except`` block, so neither ``__cause__`` nor
``__context__`` holds the SDK exception, whose request carries the API key's header.

May import: the standard library and nbagent's exceptions only.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

from ..exceptions import ModelError, ModelTimeoutError, UserError

__all__ = ["DEFAULT_DEADLINE", "Deadline", "checked_deadline", "read_within", "within"]

DEFAULT_DEADLINE = 600.0
"""Seconds: the time limit of a whole model call (``OpenAIModel.deadline``,
``AnthropicModel.deadline``): the request, the wait for the first byte and the whole stream. The
per-read timeout cannot end a stream the server keeps alive with SSE comments, pings or empty
deltas; this does. Ten minutes: it must leave a reasoning model its per-read timeout (300 s) of
thinking before the first byte and then a long answer (some 10,000 tokens at 40 tokens/s), and it
bounds a stuck call (times the run's `Retry` attempts) to what someone watching a notebook would
still wait for."""

YIELD_AFTER = 0.005
"""Seconds: the longest a stream's reading holds the event loop (`read_within`). A burst of
buffered events (a fast server, or a stalled connection catching up) is read without any await
that suspends, since every socket read finds data waiting; after this long the reading lets the
loop run, so a notebook's widgets, other cells' runs and the Stop button keep getting their turn."""

T = TypeVar("T")
MapError = Callable[..., "ModelError | None"]
"""A provider's ``map_error(exc, streaming=...)``: nbagent's error for an SDK / transport exception,
None when the exception is no model-call failure (it is then re-raised as is)."""


def checked_deadline(owner: str, deadline: float | None) -> float | None:
    """`deadline` if it is seconds > 0 or None, else a `UserError` naming ``owner(deadline=...)``."""
    if deadline is not None and not deadline > 0:
        raise UserError(f"{owner}(deadline=...) is seconds > 0, or None for no limit; got {deadline!r}")
    return deadline


class _Timed(Protocol):
    provider: str
    deadline: float | None


class Deadline:
    """The time limit of one model call (the model's ``deadline``; None: no limit).

    One timer per call, not ``asyncio.timeout``: a timeout around the whole call would also
    cancel the consumer's own awaits while it holds a delta (a streamed call is an async
    generator, run by the consumer's task), and one around each read would start a timer per
    delta. The call marks the stretches where it awaits the server (`enter` / `leave`). When the
    timer fires inside one, it cancels the task there, and `absorb` tells that cancellation from
    any other; when it fires while the consumer holds the stream (between deltas), nothing is
    cancelled and the next `enter` raises: the consumer's own awaits are never interrupted.

    Args:
        model: the model making the call (its ``deadline``, ``provider`` and class name are read).
        where: the server's name for the error message (called only when the deadline passes).
    """

    __slots__ = ("_cancelled", "_handle", "_model", "_task", "_where", "expired", "seconds")

    def __init__(self, model: _Timed, where: Callable[[Any], str]) -> None:
        self._model = model
        self._where = where
        self.seconds = seconds = model.deadline
        self.expired = False
        self._task: asyncio.Task[Any] | None = None  # the task awaiting the server, while it does
        self._cancelled = False
        loop = asyncio.get_running_loop()
        self._handle = None if seconds is None else loop.call_later(seconds, self._expire)

    def _expire(self) -> None:
        self.expired = True
        if self._task is not None:
            self._cancelled = True
            self._task.cancel()

    def enter(self) -> None:
        """Before awaiting the server. Raises the timeout error once the deadline passed."""
        if self.expired:
            raise self.error()
        self._task = asyncio.current_task()

    def leave(self) -> None:
        self._task = None

    def absorb(self) -> bool:
        """On a ``CancelledError`` while awaiting the server: True when the deadline caused it
        (the cancellation is then taken back), False when it is someone else's (re-raise it)."""
        if not self._cancelled:
            return False
        self._cancelled = False
        task = asyncio.current_task()
        uncancel = getattr(task, "uncancel", None)  # Python 3.11+
        return not (uncancel is not None and uncancel() > 0)  # > 0: cancelled by someone else too

    def error(self) -> ModelTimeoutError:
        model = self._model
        return ModelTimeoutError(
            f"no complete answer from {self._where(model)} within the call's deadline of "
            f"{self.seconds:g} s ({type(model).__name__}(deadline=...); the per-read timeout does "
            "not end a stream the server keeps alive)",
            provider=model.provider,
        )

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._task = None


async def within(deadline: Deadline, request: Callable[[], Awaitable[T]], map_error: MapError) -> T:
    """``await request()`` within `deadline`: the SDK's exception becomes ``map_error(exc)``
    (re-raised as is when that is None), the deadline passing a `ModelTimeoutError`."""
    error: ModelError | None = None
    deadline.enter()
    try:
        return await request()
    except asyncio.CancelledError:
        if not deadline.absorb():
            raise
        error = deadline.error()
    except Exception as exc:
        error = map_error(exc)
        if error is None:
            raise
    finally:
        deadline.leave()
    raise error  # outside the except block: no SDK cause (and no key) attached


async def read_within(
    deadline: Deadline, stream: Any, source: AsyncIterator[T], map_error: MapError,
) -> AsyncGenerator[T, None]:
    """The items of `source` (an SDK stream, or its response's bytes), then `stream` closed.

    A failure while reading becomes ``map_error(exc, streaming=True)``, raised outside the
    ``except`` block; so does the `deadline` passing (`ModelTimeoutError`). `stream` is closed
    however the reading ends: finished, failed, timed out, or the consumer closing this generator.
    The deadline can cancel only the awaits of the server, never the consumer's own (`leave`
    before each item is handed out, `enter` again after). The reading, and what the consumer does
    with each item, hold the event loop for at most about `YIELD_AFTER` at a time.
    """
    error: ModelError | None = None
    clock = time.perf_counter
    since = clock()
    try:
        try:
            deadline.enter()
            async for item in source:
                deadline.leave()
                yield item
                if clock() - since > YIELD_AFTER:
                    await asyncio.sleep(0)  # the loop's turn (a burst of buffered events never suspends)
                    since = clock()
                deadline.enter()  # raises the timeout error if the deadline passed meanwhile
        except asyncio.CancelledError:
            if not deadline.absorb():
                raise
            error = deadline.error()
        finally:
            deadline.leave()
    except Exception as exc:
        error = map_error(exc, streaming=True)
        if error is None:
            raise
    finally:
        with contextlib.suppress(Exception):  # a broken connection may fail to close too
            await stream.close()
    if error is not None:
        raise error
