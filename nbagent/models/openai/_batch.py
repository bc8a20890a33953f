"""`OpenAIBatchWire`: OpenAI's Batch API for `OpenAIModel` (``/v1/chat/completions``) and
`OpenAIResponsesModel` (``/v1/responses``) requests.

A batch is a JSONL file uploaded with ``purpose="batch"`` (``/v1/files``), then a batch made of it
(``/v1/batches``, ``completion_window="24h"``, nbagent's label in ``metadata``). An ended batch has
an output file (the lines whose request answered 200) and an error file (the others: an HTTP error
of the request, a fault with no HTTP answer, or ``batch_expired``); a request that did not run
before a cancel is in neither. A batch whose input the API refused ends ``failed`` with its
``errors``. The lines are read with the model's own ``read_answer`` (`_batch.BatchWire.answer`).

May import: ``openai`` (through the model's client), nbagent's exceptions and model base, and the
models' `_batch`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...exceptions import UserError
from .._batch import BatchResult, BatchState, BatchWire, jsonl_lines, timestamp
from ..base import ModelRequest

__all__ = ["OpenAIBatchWire"]

_ENDED = ("completed", "failed", "expired", "cancelled")
_LABEL = "nbagent_label"
"""The metadata key of nbagent's label on a batch."""


class OpenAIBatchWire(BatchWire):
    """OpenAI's Batch API for one `OpenAIModel` or `OpenAIResponsesModel` (see the module docstring)."""

    max_requests = 50_000
    max_bytes = 190_000_000  # the API takes 200 MB
    batches_path = "/batches"  # the client's base URL ends in /v1
    shown_path = "/v1/batches"

    def __init__(self, model: Any, endpoint: str) -> None:
        super().__init__(model)
        self.endpoint = endpoint
        self.api = "openai-chat" if endpoint == "/v1/chat/completions" else "openai-responses"

    # ------------------------------------------------------------------ lines
    def line(self, custom_id: str, request: ModelRequest) -> bytes:
        body = self.model.request_params(request, stream=False)
        for key in ("extra_headers", "extra_query"):
            if body.pop(key, None):
                raise UserError(f"settings {key!r} cannot go with a batch request (a batch line is a body only); "
                                "remove it, or run the map without batch_api=True")
        extra = body.pop("extra_body", None)
        if isinstance(extra, Mapping):
            body.update(extra)
        line = {"custom_id": custom_id, "method": "POST", "url": self.endpoint, "body": body}
        return json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode()

    def read(self, data: Mapping[str, Any]) -> BatchResult:
        custom_id = str(data.get("custom_id") or "")
        response, error = data.get("response"), data.get("error")
        if isinstance(response, dict) and response.get("status_code") == 200:
            answer = self.answer(response.get("body"), response.get("request_id"))
            if answer is not None:
                return BatchResult(custom_id, "succeeded", answer)
            return BatchResult(custom_id, "errored", error=self.line_error(
                502, response.get("body"), f"the batch line of {custom_id} holds no answer"))
        if isinstance(error, dict) and error.get("code") == "batch_expired":
            return self.not_run(custom_id, "expired", error.get("message"))
        if isinstance(response, dict) and isinstance(response.get("status_code"), int):
            status, body = response["status_code"], response.get("body")
            inner = body.get("error") if isinstance(body, dict) else None  # the table reads the error object
            return BatchResult(custom_id, "errored", error=self.line_error(
                status, inner if isinstance(inner, dict) else body, f"HTTP {status} for {custom_id} in the batch"))
        # A fault with no HTTP answer (``response`` null): the error object is the line's own.
        fault = error if isinstance(error, dict) else {"message": str(error or "no answer")}
        return BatchResult(custom_id, "errored", error=self.line_error(
            500, fault, f"the batch could not run {custom_id}"))

    # ------------------------------------------------------------------ batch calls
    async def submit(self, lines: list[bytes], label: str) -> BatchState:
        client = await self.model.client()
        try:
            uploaded = await client.files.create(file=(f"{label}.jsonl", b"\n".join(lines) + b"\n"), purpose="batch")
        except Exception as exc:
            raise self._fail(exc) from None
        return self.state(await self._json("post", "/batches", body={
            "input_file_id": uploaded.id, "endpoint": self.endpoint, "completion_window": "24h",
            "metadata": {_LABEL: label}}))

    async def results(self, state: BatchState) -> list[BatchResult]:
        raw = state.raw
        if state.status == "failed":
            return []  # nothing ran: the driver fails every request with `state.failure`
        out: list[BatchResult] = []
        for key in ("output_file_id", "error_file_id"):
            file_id = raw.get(key)
            if file_id:
                out.extend(self.read(line) for line in jsonl_lines(await self._content(file_id)))
        return out

    async def _content(self, file_id: str) -> bytes:
        client = await self.model.client()
        try:
            return (await client.files.content(file_id)).content
        except Exception as exc:
            raise self._fail(exc) from None

    async def find(self, label: str, since: float, count: int) -> BatchState | None:
        after: str | None = None
        for _ in range(20):  # newest first: 2,000 batches back at most
            params: dict[str, Any] = {"limit": 100, **({"after": after} if after else {})}
            page = await self._json("get", "/batches", options={"params": params})
            for item in page.get("data") or ():
                state = self.state(item)
                if state.label == label:
                    return state
                if state.created_at is not None and state.created_at < since - 300:
                    return None
            if not page.get("has_more") or not page.get("last_id"):
                return None
            after = page["last_id"]
        return None

    def state(self, raw: dict[str, Any]) -> BatchState:
        status = str(raw.get("status") or "")
        counts = raw.get("request_counts") or {}
        total, done, failed = (int(counts.get(k) or 0) for k in ("total", "completed", "failed"))
        ended = status in _ENDED
        errors = (raw.get("errors") or {}).get("data") or []
        failure = None
        if status == "failed":
            failure = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors if isinstance(e, dict)) \
                or "the batch failed"
        metadata = raw.get("metadata") or {}
        return BatchState(
            str(raw.get("id") or ""), status, ended,
            {"processing": 0 if ended else max(total - done - failed, 0), "succeeded": done, "errored": failed},
            timestamp(raw.get("created_at")), timestamp(raw.get("expires_at")), failure,
            metadata.get(_LABEL) if isinstance(metadata, dict) else None, raw,
        )
