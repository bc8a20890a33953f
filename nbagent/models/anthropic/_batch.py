"""`AnthropicBatchWire`: Anthropic's Message Batches API (``/v1/messages/batches``) for
`AnthropicModel` requests.

A batch is one request holding ``{custom_id, params}`` items, each ``params`` the body a live
``messages.create`` would send (`AnthropicModel.request_params`; beta headers the requests need go
on the batch's create call). An ended batch's results are a JSONL file at its ``results_url``, read
here as bytes: the ``anthropic`` SDK's ``results()`` decoder raises on a blank line. Each result is
``succeeded`` (a whole ``Message``, read with the model's ``read_answer``), ``errored`` (the error
nested as ``{"type": "error", "error": {...}}``, or flat), ``expired`` or ``canceled``. The API
keeps no label on a batch: `AnthropicBatchWire.find` matches the time and the request count.

May import: ``anthropic`` (through the model's client), nbagent's exceptions and model base, and the
models' `_batch`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...exceptions import ModelResponseError, UserError
from .._batch import BatchResult, BatchState, BatchWire, jsonl_lines, timestamp
from ..base import ModelRequest

__all__ = ["AnthropicBatchWire"]

_STATUS = {"invalid_request_error": 400, "authentication_error": 401, "billing_error": 402,
           "permission_error": 403, "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429,
           "api_error": 500, "timeout_error": 504, "overloaded_error": 529}
"""The HTTP status of each of the API's error types (an errored result carries the type only)."""


class AnthropicBatchWire(BatchWire):
    """Anthropic's Message Batches API for one `AnthropicModel` (see the module docstring)."""

    api = "anthropic-messages"
    max_requests = 100_000
    max_bytes = 240_000_000  # the API takes 256 MB
    batches_path = shown_path = "/v1/messages/batches"

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        self.betas: set[str] = set()
        """The ``anthropic-beta`` values the lines asked for: sent with the batch's create call."""

    # ------------------------------------------------------------------ lines
    def line(self, custom_id: str, request: ModelRequest) -> bytes:
        params = self.model.request_params(request, stream=False)
        headers = params.pop("extra_headers", None) or {}
        for name, value in headers.items():
            if name.lower() != "anthropic-beta":
                raise UserError(f"the header {name!r} (settings 'extra_headers') cannot go with a batch request; "
                                "remove it, or run the map without batch_api=True")
            self.betas.update(b.strip() for b in str(value or "").split(",") if b.strip())
        if params.pop("extra_query", None):
            raise UserError("settings 'extra_query' cannot go with a batch request; remove it, or run the map "
                            "without batch_api=True")
        extra = params.pop("extra_body", None)
        if isinstance(extra, Mapping):
            params.update(extra)
        return json.dumps({"custom_id": custom_id, "params": params}, ensure_ascii=False,
                          separators=(",", ":")).encode()

    def read(self, data: Mapping[str, Any]) -> BatchResult:
        custom_id = str(data.get("custom_id") or "")
        found = data.get("result")
        result: dict[str, Any] = found if isinstance(found, dict) else {}
        kind = result.get("type")
        if kind == "succeeded":
            answer = self.answer(result.get("message"), None)
            if answer is not None:
                if answer.message.finish_reason == "pause_turn":
                    answer.error = ModelResponseError(
                        "the server paused its turn (stop_reason pause_turn: a long-running server tool) inside a "
                        "batch, which cannot continue a paused turn: run this row without batch_api=True",
                        provider="anthropic")
                return BatchResult(custom_id, "succeeded", answer)
            return BatchResult(custom_id, "errored", error=self.line_error(
                502, result, f"the result of {custom_id} holds no message"))
        if kind in ("expired", "canceled"):
            return self.not_run(custom_id, kind)
        error = result.get("error")
        error = error if isinstance(error, dict) else {}
        inner = error.get("error")
        inner = inner if isinstance(inner, dict) else error  # nested {"type": "error", "error": {...}}, or flat
        status = _STATUS.get(str(inner.get("type")), 500)
        return BatchResult(custom_id, "errored", error=self.line_error(
            status, {"type": "error", "error": inner}, f"the batch could not run {custom_id}"))

    # ------------------------------------------------------------------ batch calls
    async def submit(self, lines: list[bytes], label: str) -> BatchState:
        del label  # the API keeps none
        headers = {"content-type": "application/json"}
        if self.betas:
            headers["anthropic-beta"] = ",".join(sorted(self.betas))
        body = b'{"requests":[' + b",".join(lines) + b"]}"
        return self.state(await self._json("post", self.batches_path, content=body, options={"headers": headers}))

    async def results(self, state: BatchState) -> list[BatchResult]:
        url = state.raw.get("results_url") or f"/v1/messages/batches/{state.id}/results"
        client = await self.model.client()
        try:
            text = await client.get(url, cast_to=str, options={"headers": {"Accept": "application/binary"}})
        except Exception as exc:
            raise self._fail(exc) from None
        return [self.read(line) for line in jsonl_lines(text)]

    async def find(self, label: str, since: float, count: int) -> BatchState | None:
        del label  # the API keeps none: the batch created then with that many requests, if only one was
        found: list[BatchState] = []
        after: str | None = None
        for _ in range(20):  # newest first: 2,000 batches back at most
            params: dict[str, Any] = {"limit": 100, **({"after_id": after} if after else {})}
            page = await self._json("get", self.batches_path, options={"params": params})
            older = False
            for item in page.get("data") or ():
                state = self.state(item)
                if state.created_at is not None and state.created_at < since - 5:
                    older = True
                    break
                if state.total == count:
                    found.append(state)
            if older or not page.get("has_more") or not page.get("last_id"):
                break
            after = page["last_id"]
        return found[0] if len(found) == 1 else None

    def state(self, raw: dict[str, Any]) -> BatchState:
        status = str(raw.get("processing_status") or "")
        counts = {k: int(v or 0) for k, v in (raw.get("request_counts") or {}).items()}
        return BatchState(str(raw.get("id") or ""), status, status == "ended", counts,
                          timestamp(raw.get("created_at")), timestamp(raw.get("expires_at")), None, None, raw)
