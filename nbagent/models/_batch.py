"""Provider batch APIs, the model side: `BatchWire` and `BatchedModel`.

A provider that has a batch API (OpenAI's Batch API for Chat Completions and the Responses API,
Anthropic's Message Batches) gives its `HTTPModel` a `BatchWire` (``HTTPModel.batch_wire``): the
request line of one of the model's requests, made with the model's own ``request_params`` (so a
batch line is the request a live call would send), the batch calls (submit, retrieve, results,
cancel, find one after a crash, a probe that the server serves the API), and its result lines read
back into `ModelResponse`s with the model's own ``read_answer``. There is no second wire.

`BatchedModel` is the model a row of ``agent.map(..., batch_api=True)`` runs with (what
``Model.batched`` returns): its ``request`` hands the request to the map's rounds
(`BatchRounds`, at the edge: ``nbagent.dataframe._rounds``) and waits for the answer, however
long its batch takes. The run loop does not learn about batches: a model call simply takes that
long, and the answer carries ``batch=True`` (its usage row is priced at the batch price).

May import: nbagent's exceptions and model base, the models' `_http_errors` (`where`) and
`_keys` (scrubbing); `_http` imports this module (``HTTPModel.batched``), not the other way.
Never an SDK: each provider's wire lives with its SDK (``openai/_batch.py``, ``anthropic/_batch.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..exceptions import BatchExpiredError, ModelError, UserError
from .base import Model, ModelRequest, ModelResponse, WrappedModel

if TYPE_CHECKING:
    from ._http import HTTPModel

__all__ = ["JSON_OBJECT", "BatchResult", "BatchRounds", "BatchState", "BatchWire", "BatchedModel", "jsonl_lines",
           "timestamp"]

Outcome = Literal["succeeded", "errored", "expired", "canceled"]
JSON_OBJECT: Any = dict[str, Any]
"""What the SDKs' generic ``get`` / ``post`` parse an answer as, to hand it over as plain JSON."""


@dataclass(slots=True)
class BatchState:
    """A provider's batch as one retrieve reported it, in words both APIs share."""

    id: str
    status: str
    """The provider's own word (OpenAI: ``validating``, ``in_progress``, ``finalizing``,
    ``completed``, ``failed``, ``expired``, ``cancelling``, ``cancelled``; Anthropic:
    ``in_progress``, ``canceling``, ``ended``)."""
    ended: bool
    """No request of it will run any more: its results can be read."""
    counts: dict[str, int] = field(default_factory=dict)
    """Requests by outcome: ``processing``, ``succeeded``, ``errored`` (and Anthropic's
    ``expired``, ``canceled``)."""
    created_at: float | None = None
    expires_at: float | None = None
    failure: str | None = None
    """Why the whole batch failed (OpenAI's ``failed``: its input was refused), else None."""
    label: str | None = None
    """The label nbagent gave it (OpenAI keeps it in the batch's ``metadata``; None elsewhere)."""
    raw: dict[str, Any] = field(default_factory=dict)
    """The batch object as the provider sent it."""

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(slots=True)
class BatchResult:
    """One request's outcome in an ended batch."""

    custom_id: str
    outcome: Outcome
    response: ModelResponse | None = None
    """The answer (``succeeded``), marked ``batch=True``."""
    error: ModelError | None = None
    """Why it failed (``errored``: the provider's status and message), or, for ``expired`` and
    ``canceled``, a `BatchExpiredError` the driver raises in the row."""


class BatchWire:
    """A provider's batch API for one model's requests (see the module docstring).

    Subclasses (one per API) implement the methods that raise `NotImplementedError`; every batch
    call raises a `ModelError` (the provider's table sorts it, the key scrubbed) when it fails.
    """

    api: str = ""
    """Which API the batch lines go to: ``openai-chat``, ``openai-responses``, ``anthropic-messages``."""
    batches_path: str = ""
    """The API's batches, relative to the client's base URL (``/batches``, ``/v1/messages/batches``)."""
    shown_path: str = ""
    """The same, as messages name it (``/v1/batches``)."""
    max_requests: int = 50_000
    """Requests one batch may hold (a round with more is split)."""
    max_bytes: int = 190_000_000
    """Bytes one batch's input may have (below the provider's limit, for the framing)."""

    def __init__(self, model: HTTPModel) -> None:
        self.model = model

    @property
    def where(self) -> str:
        """The server, for messages (its URL without credentials)."""
        from ._http_errors import where

        return where(self.model)

    def line(self, custom_id: str, request: ModelRequest) -> bytes:
        """The batch's input line for `request` (JSON, UTF-8), made of the model's ``request_params``.

        Raises:
            UserError: the request carries what a batch line cannot (per-request HTTP headers).
        """
        raise NotImplementedError

    def read(self, data: Mapping[str, Any]) -> BatchResult:
        """One result line (its JSON object) read: the answer through the model's ``read_answer``,
        or the provider's error."""
        raise NotImplementedError

    def state(self, raw: dict[str, Any]) -> BatchState:
        """A batch object the API sent, read."""
        raise NotImplementedError

    async def probe(self) -> None:
        """Check that the server serves this batch API (one cheap listing).

        Raises:
            UserError: it does not (the server answered 404 or 405 to the API's path).
            ModelError: it could not be asked (a wrong key, no connection).
        """
        try:
            await self._json("get", self.batches_path, options={"params": {"limit": 1}})
        except ModelError as exc:
            raise self._refused(exc, f"GET {self.shown_path}") from None

    async def submit(self, lines: list[bytes], label: str) -> BatchState:
        """Create one batch of `lines` (each made by `line`), labelled `label` where the API keeps labels."""
        raise NotImplementedError

    async def retrieve(self, batch_id: str) -> BatchState:
        return self.state(await self._json("get", f"{self.batches_path}/{batch_id}"))

    async def results(self, state: BatchState) -> list[BatchResult]:
        """The outcome of each request of the ended batch `state` (blank lines, lines out of
        order and a line sent twice are all read: the first of each custom id counts). A request
        that ran in neither file of a cancelled batch is ``canceled``; `missing` names the rest."""
        raise NotImplementedError

    async def cancel(self, batch_id: str) -> BatchState:
        return self.state(await self._json("post", f"{self.batches_path}/{batch_id}/cancel"))

    async def find(self, label: str, since: float, count: int) -> BatchState | None:
        """The batch nbagent created with `label` at or after `since` (seconds since the epoch)
        holding `count` requests, when the provider lists it: how a map that crashed between
        creating a batch and storing its id finds it again. None when not found for sure."""
        raise NotImplementedError

    # ------------------------------------------------------------------ shared helpers
    async def _json(self, method: Literal["get", "post"], path: str, **options: Any) -> Any:
        """One call of the API through the model's SDK client (its generic ``get`` / ``post``),
        its JSON answer as it came; a failure raised as the model's error (`_fail`)."""
        client = await self.model.client()
        try:
            return await getattr(client, method)(path, cast_to=JSON_OBJECT, **options)
        except Exception as exc:
            raise self._fail(exc) from None

    def _fail(self, exc: BaseException) -> BaseException:
        """The error to raise for an exception of a batch call: the model's mapping of it, or itself."""
        mapped = self.model.map_error(exc)
        return exc if mapped is None else mapped

    def _refused(self, exc: BaseException, path: str) -> BaseException:
        """A probe's failure: a `UserError` when the server has no such path, else `_fail`'s error."""
        error = self._fail(exc)
        if isinstance(error, ModelError) and error.status_code in (404, 405):
            return UserError(
                f"batch_api=True: the server at {self.where} does not serve the batch API of "
                f"{type(self.model).__name__} ({path} answered {error.status_code}); nothing was submitted. "
                "Run the map without batch_api=True, or point the model at a server that has the API"
            )
        return error

    def answer(self, body: Any, request_id: str | None) -> ModelResponse | None:
        """A result line's answer object read by the model's ``read_answer`` (None: no answer)."""
        if not isinstance(body, dict):
            return None
        response = self.model.read_line_answer(body, request_id)
        if response is not None:
            response.batch = True
            response.request_id = request_id or response.request_id
        return response

    def not_run(self, custom_id: str, reason: Literal["expired", "canceled"], said: Any = None) -> BatchResult:
        """The outcome of a request its batch never ran: it expired, or the batch was cancelled."""
        words = f" ({said})" if said else ""
        what = "expired" if reason == "expired" else "was cancelled"
        error = BatchExpiredError(f"the batch {what} before request {custom_id} ran{words}; nothing was spent on "
                                  "it: run the map again to submit it anew", reason=reason,
                                  provider=self.model.provider)
        return BatchResult(custom_id, reason, error=error)

    def missing(self, custom_id: str, state: BatchState) -> BatchResult:
        """The outcome of a request of the ended batch `state` that no result line names: not run
        (a cancelled or expired batch), else an error naming the batch."""
        if "cancel" in state.status:
            return self.not_run(custom_id, "canceled")
        if state.status == "expired":
            return self.not_run(custom_id, "expired")
        if state.failure:
            return BatchResult(custom_id, "errored", error=self.line_error(
                400, {"error": {"message": state.failure}}, state.failure))
        return BatchResult(custom_id, "errored", error=self.line_error(
            502, None, f"batch {state.id} ended ({state.status}) without a result for request {custom_id}"))

    def line_error(self, status: int, body: Any, fallback: str) -> ModelError:
        """The error of one failed request: the provider's table sorts its status and body (the
        provider's message kept). Never retried by the run loop: the row fails (a later map
        submits it again)."""
        model = self.model
        error = model.errors.status_error(model, status, body, fallback, None)
        from ._keys import scrub_error

        error = scrub_error(model._api_key, error)
        error.retryable = False
        return error


def jsonl_lines(data: bytes | str) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSONL file, skipping blank lines (the ``anthropic`` SDK's decoder
    raises on one) and lines that are no JSON object."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    for raw in text.splitlines():
        if not raw.strip():
            continue
        try:
            item = json.loads(raw)
        except ValueError:
            continue
        if isinstance(item, dict):
            yield item


def timestamp(value: Any) -> float | None:
    """Seconds since the epoch from an API's time: a number (OpenAI) or RFC 3339 text (Anthropic)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


class BatchRounds(Protocol):
    """What a `BatchedModel` hands its requests to: the rounds of a map (``nbagent.dataframe._rounds``)."""

    def join(self, wire: BatchWire) -> None:
        """Learn the batch API the model's requests go to (called when the model is made)."""

    async def ask(self, wire: BatchWire, request: ModelRequest) -> ModelResponse:
        """The answer to `request` of the row asking, once its batch has ended (raises its error)."""


class BatchedModel(WrappedModel):
    """`inner` (an `HTTPModel`), its requests answered through its provider's batch API by
    `rounds`; everything else is `inner`'s (`WrappedModel`). Made by ``Model.batched``."""

    def __init__(self, inner: Model, wire: BatchWire, rounds: BatchRounds) -> None:
        super().__init__(inner)
        self.wire = wire
        self.rounds = rounds
        rounds.join(wire)

    async def request(self, request: ModelRequest) -> ModelResponse:
        return await self.rounds.ask(self.wire, request)

    async def compact(self, request: ModelRequest) -> ModelResponse:
        raise UserError("Compaction.native() compacts through a live call, which agent.map(..., batch_api=True) "
                        "does not make: use Compaction() (its summaries go through the batch) or no compaction")

    def batched(self, rounds: BatchRounds) -> Model | None:
        return self.inner.batched(rounds)

    def __repr__(self) -> str:
        return f"batched({self.inner!r})"
