"""`Retry`: how failed model calls are retried (never tools), and the one loop that does it.

Owns `Retry` and `Attempt`: a call is retried as ``for attempt in retry.attempts(): with attempt:
...``, or through `Retry.call` for a plain awaitable. The run loop, the summary and native
compaction calls, `FallbackModel`'s chain and the judges of `nbagent.evals` all retry this way.
Imports the error tree only (asyncio when a retry first waits).
"""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

from .exceptions import ModelError

__all__ = ["Attempt", "Retry"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Retry:
    """Exponential backoff with jitter for model calls that fail with a retryable error
    (connection, timeout, interrupted stream, 429, 5xx).

    ``Retry(attempts=3)`` means three attempts in all (two retries); that is the default.
    A ``Retry-After`` the server sent is honoured, capped by `max_delay`.
    """

    attempts: int = 3
    initial_delay: float = 0.5
    """Seconds before the first retry."""
    multiplier: float = 2.0
    max_delay: float = 30.0
    jitter: float = 0.25
    """Each delay is multiplied by a random factor in [1 - jitter, 1 + jitter]."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("Retry(attempts=...) counts all attempts and must be at least 1")

    def should_retry(self, error: BaseException, attempt: int) -> bool:
        """Whether to try again after `attempt` (1-based) failed with `error`."""
        return attempt < self.attempts and isinstance(error, ModelError) and error.retryable

    def delay(self, error: BaseException, attempt: int) -> float:
        """Seconds to wait before attempt ``attempt + 1``."""
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:
            return max(0.0, min(float(retry_after), self.max_delay))
        base = self.initial_delay * self.multiplier ** (attempt - 1)
        if self.jitter:
            base *= random.uniform(1 - self.jitter, 1 + self.jitter)
        return min(base, self.max_delay)

    def tries(self) -> Iterator[Attempt]:
        """The attempts of one call, endless: the caller leaves the loop with the answer, or with
        the failure an `Attempt` lets out.

        ```python
        for attempt in retry.tries():
            with attempt:
                answer = await model.request(request)
                break
            ...                    # attempt.error failed and is retried: tell someone
            await attempt.wait()   # attempt.delay seconds
        ```

        The body runs inline (a streamed answer's deltas can be yielded from it as they come).
        """
        return map(functools.partial(Attempt, self), itertools.count(1))  # no frame of its own: once per model call

    async def call(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """``await attempt()``, made again as `tries` retries it; the last failure is raised."""
        for each in self.tries():
            with each:
                return await attempt()
            await each.wait()
        raise AssertionError("unreachable")  # pragma: no cover  (tries() never ends)


@dataclass(slots=True)
class Attempt:
    """One attempt of `Retry.tries`, used as ``with attempt:`` around the call.

    A failure `Retry` retries (`Retry.should_retry`) stays in the block: it is kept in `error`
    with the wait before the next attempt in `delay`, and the code after the block runs. Any
    other failure, and the last one, leaves the block as raised.
    """

    retry: Retry
    number: int
    """1-based."""
    retryable: bool = True
    """Set False in the block to let its failure out whatever it is (`FallbackModel`: once a
    delta was shown, never two half answers)."""
    error: BaseException | None = None
    delay: float = 0.0

    def __enter__(self) -> Attempt:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> bool:
        if error is None or not self.retryable or not self.retry.should_retry(error, self.number):
            return False
        self.error, self.delay = error, self.retry.delay(error, self.number)
        return True

    async def wait(self) -> None:
        """Sleep `delay` seconds (before the next attempt)."""
        import asyncio  # only when a call is retried: importing nbagent loads no asyncio

        await asyncio.sleep(self.delay)
