"""What `OpenAIModel` (Chat Completions) and `OpenAIResponsesModel` (the Responses API) share: the
``openai`` SDK's client, the configuration from ``OPENAI_*`` variables, and the error table.

Owns `OpenAISDKModel`, an `HTTPModel` whose client is an ``AsyncOpenAI`` and whose errors are
`OpenAIErrors`, and its streamed send: the SDK sends the request (auth, retries, error statuses),
nbagent reads the stream's bytes (`models._sse.json_events`: the JSON object of each event). The
SDK's parsed stream builds a pydantic object per event: about a hundred µs of the kernel's only
thread per delta, four to five times the rest of a delta's way into a notebook's chat view
(bench/README.md, "The kernel's loop while an answer streams").
Each API's model adds its wire (and the SDK resource its sends call) and its readers.

May import: ``openai``, nbagent's exceptions, the models' `_http` base and `_sse`, and `_errors`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

from openai import AsyncOpenAI

from ...exceptions import UserError
from .._http import HTTPModel, Streamed
from .._sse import json_events
from ._errors import OpenAIErrors

__all__ = ["OpenAISDKModel"]


class OpenAISDKModel(HTTPModel):
    """An `HTTPModel` on the ``openai`` SDK's ``AsyncOpenAI``: `OpenAIModel`'s and
    `OpenAIResponsesModel`'s common part (each takes `HTTPModel`'s arguments, and its own)."""

    key_variable = "OPENAI_API_KEY"
    base_url_variable = "OPENAI_BASE_URL"
    default_host = "api.openai.com"
    errors = OpenAIErrors()

    def _default_model_name(self) -> str:
        name = os.environ.get("OPENAI_MODEL")
        if not name:
            raise UserError(
                f"{type(self).__name__} needs a model name: {type(self).__name__}('gpt-4.1-mini'), "
                "Agent('openai:gpt-4.1-mini'), or set the OPENAI_MODEL environment variable"
            )
        return name

    def _no_key(self) -> str:
        if self.base_url is None or "api.openai.com" in self.base_url:
            raise UserError(
                f"no OpenAI API key: pass {type(self).__name__}(..., api_key=...) or set OPENAI_API_KEY "
                "(for a local server that needs no key, pass base_url=...)"
            )
        self._key_placeholder = "not-needed"  # no secret: it travels (`Travelling`)
        return self._key_placeholder

    def _make_client(self) -> AsyncOpenAI:
        return AsyncOpenAI(
            api_key=self._api_key.get(),
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=self.max_retries,
            http_client=self._http_client,
        )

    sdk_stream: bool = False
    """Read a streamed answer as the SDK's parsed events (each model's ``sdk_stream=``), the
    plain path beside the byte reader."""

    async def _send_stream(self, client: AsyncOpenAI, params: dict[str, Any]) -> Streamed:
        """The started stream, as the JSON objects of its events, read from the HTTP response's
        bytes by `json_events` (the SDK still sends the request, with its auth and error statuses),
        or, with `sdk_stream`, the SDK's parsed events as the same objects (`_sdk_events`)."""
        resource = self._resource(client)
        if self.sdk_stream:
            stream = await resource.create(**params)
            return Streamed(self._sdk_events(stream), stream.response, stream.close)
        response = (await resource.with_raw_response.create(**params)).http_response
        return Streamed(json_events(response.aiter_bytes(), self.provider), response, response.aclose)

    def _sdk_events(self, stream: AsyncIterator[Any]) -> AsyncIterator[dict[str, Any]]:
        """The SDK's parsed stream as the JSON objects this API's reader takes."""
        raise NotImplementedError
