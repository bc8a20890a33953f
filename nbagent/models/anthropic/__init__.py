"""`AnthropicModel`: Claude through the official ``anthropic`` SDK (the Messages API).

Imported lazily (through ``nbagent.models.__getattr__``): importing it imports ``anthropic``; it
never imports widgets, pandas or ``openai``.

The API key is kept in a `_Secret` and handed only to the SDK client: it is never part of a
message, an event, a usage row, an error (errors are raised without their SDK cause) or a repr.

The package, by responsibility (each module's docstring says what it owns and may import)::

    _wire      request side: messages, tools, tool_choice, caching breakpoints, settings, request_params
    _stream    answer side: whole messages, streamed events assembled, stop reasons, token counts
    _errors    failures sorted into nbagent's exceptions; the key's hygiene (secret, scrubbing)
    _model     AnthropicModel: the client of each event loop, request / request_stream
"""

from __future__ import annotations

from .._deadline import DEFAULT_DEADLINE
from .._keys import parse_retry_after
from ._model import DEFAULT_MAX_CONTINUATIONS, DEFAULT_MAX_TOKENS, DEFAULT_TIMEOUT, AnthropicModel
from ._stream import REDACTED_THINKING, token_counts
from ._wire import _allowed_settings as _allowed_settings  # private, re-exported for the tests

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
