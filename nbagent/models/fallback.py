"""`FallbackModel`: a chain of models; when one fails in the named ways, the next answers.

Owns the fallback rules. Imports the `Model` protocol, the error tree and `Retry`; no provider
SDK (the chain's members bring their own).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass

from ..exceptions import ContentFilterError, ContextOverflowError, ModelError, ModelResponseError, UserError
from ..retry import Retry
from .base import Model, ModelRequest, ModelResponse, StreamItem

__all__ = ["Fallback", "FallbackModel"]

TRIGGERS = ("retryable", "content_filter", "context_window")


@dataclass(slots=True, frozen=True)
class Fallback:
    """One move down the chain: which model failed, how, and which one was tried next."""

    failed: str
    error: str
    next: str


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
    last answer's, read when the row is made). Each move down the chain is a
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

    def _moved(self, i: int, exc: BaseException, moves: list[Fallback]) -> None:
        if i + 1 >= len(self.models) or not self.falls_back(exc):
            raise exc
        moves.append(Fallback(self.models[i].model_name, str(exc), self.models[i + 1].model_name))

    def _answer(self, model: Model, response: ModelResponse, moves: list[Fallback]) -> ModelResponse:
        self._answered = model
        response.model = response.model or model.model_name
        response.fallbacks = [*response.fallbacks, *moves]
        self.fallbacks = moves
        return response

    async def request(self, request: ModelRequest) -> ModelResponse:
        """The first model's answer that does not fail in the ways named in `on`."""
        moves: list[Fallback] = []
        for i, model in enumerate(self.models):
            try:
                answer = await self.retry.call(functools.partial(model.request, request))
                refused = self._refusal(answer)
                if refused is not None:
                    raise refused
                return self._answer(model, answer, moves)
            except ModelError as exc:
                self._moved(i, exc, moves)
        raise AssertionError("unreachable")  # pragma: no cover

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        """Each model's stream in turn until one answers; a failure after a delta was yielded is
        raised, neither retried nor fallen back from."""
        moves: list[Fallback] = []
        for i, model in enumerate(self.models):
            shown = False
            try:
                for attempt in self.retry.tries():
                    with attempt:
                        async for item in model.request_stream(request):
                            if isinstance(item, ModelResponse):
                                refused = self._refusal(item)
                                if refused is not None:
                                    raise refused
                                yield self._answer(model, item, moves)
                                return
                            shown = True
                            attempt.retryable = False  # never two half answers
                            yield item
                        raise ModelResponseError("the model's stream ended without a complete answer",
                                                 provider=model.provider)
                    await attempt.wait()
            except ModelError as exc:
                if shown:
                    raise
                self._moved(i, exc, moves)

    def __repr__(self) -> str:
        return f"FallbackModel([{', '.join(repr(m) for m in self.models)}])"
