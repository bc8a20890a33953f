"""`FallbackModel`: a chain of models; when one fails in the named ways, the next answers.

Owns the fallback rules, and the usage rows of a chain's billed refusals (`Fallback.usage_row`).
Imports the `Model` protocol, the error tree, usage and `Retry`; no provider SDK (the chain's
members bring their own).
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field

from ..exceptions import ContentFilterError, ContextOverflowError, ModelError, ModelResponseError, UserError
from ..retry import Retry
from ..usage import ModelCallUsage
from .base import Model, ModelRequest, ModelResponse, StreamItem

__all__ = ["Fallback", "FallbackModel"]

TRIGGERS = ("retryable", "content_filter", "context_window")


@dataclass(slots=True, frozen=True)
class Fallback:
    """One move down the chain: which model failed, how, and which one was tried next."""

    failed: str
    error: str
    next: str
    refused: ModelResponse | None = field(default=None, repr=False, compare=False)
    """The failed model's answer when it arrived but was refused (a content filter): it was
    billed, so the run loop keeps a usage row for it (`usage_row`)."""
    provider: str | None = field(default=None, repr=False, compare=False)
    """The failed model's provider."""
    latency_s: float = field(default=0.0, repr=False, compare=False)
    """How long the failed model's call took (its retries included)."""

    def usage_row(self, run_id: str, thread: str | None, step: int, started: float) -> ModelCallUsage | None:
        """The usage row of the refused answer (unpriced: the loop prices it); None when the
        model failed without a billed answer."""
        if self.refused is None:
            return None
        counts, message = self.refused.usage, self.refused.message
        return ModelCallUsage(
            run_id, thread, step, started, self.provider or "unknown", self.refused.model or self.failed,
            counts.input_tokens, counts.cache_read_tokens, counts.cache_write_tokens, counts.output_tokens,
            counts.reasoning_tokens, self.latency_s, message.finish_reason, len(message.tool_calls),
            usage_reported=counts.reported,
        )


class FallbackModel(Model):
    """Models tried in order: when one fails in a way named in `on` (after its own retries,
    `retry`), the next one is asked the same request.

    ```python
    model = FallbackModel([OpenAIModel("gpt-4.1-mini"), AnthropicModel("claude-sonnet-4-5")])
    ```

    Args:
        models: the chain, primary first (`Model`s).
        on: the failures that move to the next model: ``"retryable"`` (429, 5xx, connection,
            timeout: what `Retry` retries), ``"content_filter"`` (`ContentFilterError`, raised
            or on a billed answer), ``"context_window"`` (`ContextOverflowError`). Other errors
            (bad request, authentication) fail at once.
        retry: how each model's retryable errors are retried before the next model is tried
            (default ``Retry()``; ``Retry(attempts=1)``: fall back at once). The agent's own
            `Retry` then wraps the whole chain.

    The usage row's ``model`` names the model that answered; `provider` is that model's (the
    last answer's, read when the row is made). A refused answer (billed) keeps a usage row of its
    own: the chain moves on from it (`Fallback.refused`), or, from the last model (or a chain of
    one), it is the answer, and the step fails with its error as without a chain. Each move down the chain is a
    `nbagent.ModelFallbackEvent` (the view says "answered by second (primary: 503 ...)"), kept on
    the answer (`ModelResponse.fallbacks`); `fallbacks` holds the last answer's moves.
    Streaming: a failure before the first delta falls back unseen; after deltas were shown it
    fails the step (never two half answers).
    """

    def __init__(self, models: Sequence[Model], *, on: Iterable[str] = TRIGGERS,
                 retry: Retry | None = None) -> None:
        self.models = list(models)
        if not self.models or not all(isinstance(m, Model) for m in self.models):
            raise UserError("FallbackModel takes a list of one or more Models (primary first), "
                            "e.g. [OpenAIModel(...), AnthropicModel(...)]")
        self.on = frozenset(on)
        unknown = self.on - set(TRIGGERS)
        if unknown:
            raise UserError(f"FallbackModel(on=...) takes {TRIGGERS}, got {sorted(unknown)}")
        self.retry = retry or Retry()
        self.model_name = self.models[0].model_name
        self._answered = self.models[0]
        self.fallbacks: list[Fallback] = []

    @property
    def provider(self) -> str:  # type: ignore[override]
        """The provider of the model that answered last (the primary's before any answer)."""
        return self._answered.provider

    @property
    def priced(self) -> bool:  # type: ignore[override]
        return any(m.priced for m in self.models)

    def _default_context_window(self) -> int | None:
        return self.models[0].context_window

    def falls_back(self, error: BaseException) -> bool:
        """Whether `error` moves the chain to its next model."""
        if isinstance(error, ContextOverflowError):
            return "context_window" in self.on
        if isinstance(error, ContentFilterError):
            return "content_filter" in self.on
        return isinstance(error, ModelError) and error.retryable and "retryable" in self.on

    def _refusal(self, response: ModelResponse) -> ModelError | None:
        """The failure of a billed answer that moves the chain on: its error (a `ContentFilterError`
        a provider set), or a ``content_filter`` finish (OpenAI-compatible providers, Azure),
        which the run loop would otherwise fail the step with."""
        error = response.error
        if error is None and response.message.finish_reason == "content_filter":
            error = ContentFilterError("the provider's content filter stopped the answer "
                                       "(finish_reason content_filter)", text=response.message.text or "")
        return error if error is not None and self.falls_back(error) else None

    def _moved(self, i: int, exc: ModelError, moves: list[Fallback], refused: ModelResponse | None = None,
               clock: float | None = None, *, final: bool = False) -> None:
        """Record the move from model `i`, which failed with `exc` (`refused`: its billed answer),
        or raise `exc` when the chain ends there (`final`: deltas were shown)."""
        if final or self._last(i) or not self.falls_back(exc):
            raise exc
        model = self.models[i]
        latency = time.perf_counter() - clock if clock is not None else 0.0
        moves.append(Fallback(model.model_name, str(exc), self.models[i + 1].model_name, refused, model.provider,
                              latency))

    def _answer(self, model: Model, response: ModelResponse, moves: list[Fallback]) -> ModelResponse:
        self._answered = model
        response.model = response.model or model.model_name
        response.fallbacks = [*response.fallbacks, *moves]
        self.fallbacks = moves
        return response

    def _last(self, i: int) -> bool:
        return i + 1 >= len(self.models)

    async def request(self, request: ModelRequest) -> ModelResponse:
        """The first model's answer that does not fail in the ways named in `on`. A refused
        answer of the last model is returned as it is (billed: the run loop keeps its row and
        fails the step with its error)."""
        moves: list[Fallback] = []
        for i, model in enumerate(self.models):
            clock = time.perf_counter()
            try:
                answer = await self.retry.call(functools.partial(model.request, request))
            except ModelError as exc:
                self._moved(i, exc, moves)
                continue
            refused = self._refusal(answer)
            if refused is None or self._last(i):
                return self._answer(model, answer, moves)
            self._moved(i, refused, moves, answer, clock)
        raise AssertionError("unreachable")  # pragma: no cover

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        """Each model's stream in turn until one answers; a failure after a delta was yielded is
        raised, neither retried nor fallen back from (a refused answer after deltas, or of the
        last model, is yielded as it is: the run loop keeps its billed row)."""
        moves: list[Fallback] = []
        for i, model in enumerate(self.models):
            shown, answer = False, None
            clock = time.perf_counter()
            try:
                for attempt in self.retry.tries():
                    with attempt:
                        async for item in model.request_stream(request):
                            if isinstance(item, ModelResponse):
                                answer = item
                                break
                            shown = True
                            attempt.retryable = False  # never two half answers
                            yield item
                        if answer is None:
                            raise ModelResponseError("the model's stream ended without a complete answer",
                                                     provider=model.provider)
                        break
                    await attempt.wait()
            except ModelError as exc:
                self._moved(i, exc, moves, final=shown)
                continue
            assert answer is not None
            refused = self._refusal(answer)
            if refused is None or shown or self._last(i):
                yield self._answer(model, answer, moves)
                return
            self._moved(i, refused, moves, answer, clock)

    def __repr__(self) -> str:
        return f"FallbackModel([{', '.join(repr(m) for m in self.models)}])"
