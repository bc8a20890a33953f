"""`AnthropicModel`: Claude through the official ``anthropic`` SDK (the Messages API).

Imported lazily (through ``nbagent.models.__getattr__``): importing it imports ``anthropic``; it
never imports widgets, pandas or ``openai``.

The API key is kept in a `Secret` and handed only to the SDK client: it is never part of a
message, an event, a usage row, an error (errors are raised without their SDK cause) or a repr.

The package, by responsibility (each module's docstring says what it owns and may import). The
model is an `nbagent.models._http.HTTPModel`: the client per event loop, the deadline, the key's
hygiene, answers in another shape than asked and transport errors are the base's::

    _wire      request side: messages, tools, tool_choice, caching breakpoints, settings, request_params
    _stream    answer side (sans-IO): whole messages, streamed events assembled, stop reasons, token counts
    _errors    the error table: HTTP statuses and error events as nbagent's exceptions
    _model     AnthropicModel: the wire and readers on HTTPModel; a paused turn continued
"""

from __future__ import annotations

from .._deadline import DEFAULT_DEADLINE
from .._http_errors import parse_retry_after
from ._model import DEFAULT_MAX_CONTINUATIONS, DEFAULT_MAX_TOKENS, DEFAULT_TIMEOUT, AnthropicModel
from ._stream import REDACTED_THINKING, token_counts

__all__ = [
    "DEFAULT_DEADLINE",
    "DEFAULT_MAX_CONTINUATIONS",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_TIMEOUT",
    "REDACTED_THINKING",
    "AnthropicModel",
    "parse_retry_after",
    "token_counts",
]
