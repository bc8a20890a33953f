"""`Retry`: how failed model calls are retried (never tools), and the one loop that does it.

Owns `Retry` and its loop (`Retry.stream`, and `Retry.call` on it): the run loop, the summary
and native compaction calls, `FallbackModel`'s chain and the judges of `nbagent.evals` all retry
through it. Imports the error tree only (asyncio when a retry first waits).
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from .exceptions import ModelError

__all__ = ["Retry"]

T = TypeVar("T")
N = TypeVar("N")


async def _one(attempt: Callable[[], Awaitable[T]]) -> AsyncIterator[T]:
    yield await attempt()


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

    async def stream(
        self,
        attempt: Callable[[], AsyncIterator[T]],
        *,
        retried: Callable[[int, BaseException, float], N | None] | None = None,
        retry_started: bool = True,
    ) -> AsyncIterator[T | N]:
        """The items of ``attempt()``, which is called again while it fails in a way `should_retry`
        retries, after `delay`; the last failure is raised.

        Args:
            attempt: makes one attempt's iterator (a model's ``request_stream``); called once per
                attempt, so it is also where an attempt's clock starts.
            retried: told ``(attempt, error, delay)`` before each wait; what it returns (unless
                None) is yielded between the attempts: the run loop's ``model-retry`` event, which
                tells a view to clear the failed attempt's partial text.
            retry_started: False: an attempt that fails after it yielded an item is not retried
                (`FallbackModel`: never two half answers).
        """
        number = 0
        while True:
            number += 1
            started = False
            try:
                async for item in attempt():
                    started = True
                    yield item
                return
            except Exception as exc:
                if not self.should_retry(exc, number) or (started and not retry_started):
                    raise
                wait = self.delay(exc, number)
                if retried is not None:
                    notice = retried(number, exc, wait)
                    if notice is not None:
                        yield notice
            import asyncio  # only when a call is retried: importing nbagent loads no asyncio

            await asyncio.sleep(wait)

    async def call(self, attempt: Callable[[], Awaitable[T]], *,
                   retried: Callable[[int, BaseException, float], Any] | None = None) -> T:
        """``await attempt()``, made again as `stream` retries it; `retried` as there (what it
        returns is dropped)."""
        result: Any = None
        # The last item is the answer: each notice `retried` returns is followed by another attempt.
        async for item in self.stream(lambda: _one(attempt), retried=retried):
            result = item
        return cast(T, result)
