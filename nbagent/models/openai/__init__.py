"""`OpenAIModel`: any OpenAI-compatible chat-completions server through the official ``openai`` SDK.

Owns the mapping between nbagent's messages / settings / errors and the chat-completions wire
format. Imported lazily (through ``nbagent.models.__getattr__``): importing it imports ``openai``;
it never imports widgets or pandas.

Works with OpenAI, Azure OpenAI, Ollama, vLLM, llama.cpp, Groq, Gemini's OpenAI endpoint,
DeepSeek, Together, OpenRouter. The quirks handled here are the ones seen in recorded traffic
(``tests/wire/cases``): tool-call deltas without ``index`` and with empty ids, a choice with no
``message`` (Azure content filter), ``finish_reason`` values outside the SDK's list (``eos``),
usage in ``x_groq`` or missing, ``reasoning_content``, ``content: ""`` next to tool calls.

A server can also report an error inside a stream it has already started (HTTP 200): an event
``data: {"error": {...}}`` (OpenAI, vLLM, llama.cpp, Groq with ``event: error``), OpenRouter's chunk
with a top-level ``error`` and ``finish_reason: "error"``, vLLM's older ``{"object": "error", ...}``.
`OpenAIModel.stream_error` sorts them: a request the server refuses (invalid request, context too
long, content policy, key, permission, not found, any 4xx but 408/409/429) fails at once as the
matching `BadRequestError`-family error; anything else (server error, overload, rate limit, an
unknown error) is retried like a broken stream.

The API key is kept in a `Secret` and handed only to the SDK client: it is never part of a
message, an event, a usage row, an error (errors are raised without their SDK cause, whose request
carries the ``Authorization`` header) or a repr.

The package, by responsibility (each module's docstring says what it owns and may import). Both
models are `nbagent.models._http.HTTPModel`s: the client per event loop, the deadline, the key's
hygiene, answers in another shape than asked and transport errors are the base's::

    _sdk_model  OpenAISDKModel: the openai SDK's client, OPENAI_* configuration, the error table
    _errors     the error table: HTTP statuses and in-stream error objects as nbagent's exceptions
    _wire       Chat Completions' request side: messages, tools, tool_choice, settings, request_params
    _stream     Chat Completions' answer side (sans-IO): whole completions, chunks assembled, token counts
    _model      OpenAIModel: Chat Completions' wire and readers on OpenAISDKModel
    responses   OpenAIResponsesModel: the Responses API's wire and readers on OpenAISDKModel
    _responses_wire, _responses_stream   its request side and answer side

`local_model` and `LocalModel` (the bundled llama.cpp server) live in `nbagent.models._local`
(which imports this package, not the other way round); `nbagent.models.local()` is their entry.
"""

from __future__ import annotations

from .._http_errors import parse_retry_after
from ._errors import stream_error_status
from ._model import DEFAULT_DEADLINE, DEFAULT_TIMEOUT, OpenAIModel
from ._stream import token_counts
from .responses import OpenAIResponsesModel

__all__ = [
    "DEFAULT_DEADLINE",
    "DEFAULT_TIMEOUT",
    "OpenAIModel",
    "OpenAIResponsesModel",
    "parse_retry_after",
    "stream_error_status",
    "token_counts",
]
