"""`Retry`: how the run loop retries failed model calls (never tools)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from .exceptions import ModelError

__all__ = ["Retry"]


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
