"""Context: how full the model's window is, and how a long conversation is kept inside it.

- `ContextUsage` (``result.context``): tokens of the last request, the window, the fraction,
  and the tokens by part (system, tools, history, tool results, latest message);
- `Compaction`: the policy that replaces old turns *in the request* by a summary (or clears old
  tool results) when the next request would pass a fraction of the window;
- the estimator (`text_tokens`, `counter_for`, `CHARS_PER_TOKEN`) and the result cut (`cut_result`).

A base module: imports messages and exceptions only (no model, no store). docs/context.md.
"""

from ._cap import chars_for, cut_result
from ._compaction import (
    Compaction,
    NativeContext,
    Visible,
    clear_candidates,
    cut_point,
    is_blocked,
    transcript,
    visible,
)
from ._estimate import (
    CHARS_PER_TOKEN,
    IMAGE_TOKENS,
    MESSAGE_TOKENS,
    TOOL_PROMPT_TOKENS,
    counter_for,
    message_tokens,
    text_tokens,
)
from ._usage import PARTS, ContextUsage, last_sent, parts_json, request_parts, scale_parts
from ._view import ThreadView

__all__ = [
    "CHARS_PER_TOKEN",
    "IMAGE_TOKENS",
    "MESSAGE_TOKENS",
    "PARTS",
    "TOOL_PROMPT_TOKENS",
    "Compaction",
    "ContextUsage",
    "NativeContext",
    "ThreadView",
    "Visible",
    "chars_for",
    "clear_candidates",
    "counter_for",
    "cut_point",
    "cut_result",
    "is_blocked",
    "last_sent",
    "message_tokens",
    "parts_json",
    "request_parts",
    "scale_parts",
    "text_tokens",
    "transcript",
    "visible",
]
