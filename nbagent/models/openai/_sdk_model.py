"""What `OpenAIModel` (Chat Completions) and `OpenAIResponsesModel` (the Responses API) share: the
``openai`` SDK's client, the configuration from ``OPENAI_*`` variables, and the error table.

Owns `OpenAISDKModel`, an `HTTPModel` whose client is an ``AsyncOpenAI`` and whose errors are
`OpenAIErrors`. Each API's model adds its wire (and the SDK resource its sends call) and its readers.

May import: ``openai``, nbagent's exceptions, the models' `_http` base, and `_errors`.
"""

from __future__ import annotations

import os

from openai import AsyncOpenAI

from ...exceptions import UserError
from .._http import HTTPModel
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
