"""Estimating how many tokens a request takes, before it is sent.

The rule: a text takes ``ceil(len(text) / CHARS_PER_TOKEN)`` tokens, each message adds
`MESSAGE_TOKENS`, an image `IMAGE_TOKENS`, and the tools their JSON schema's length by the same
rule. Where the ``tiktoken`` package is installed and has the model's encoding at hand, OpenAI
models' texts are counted with it instead. docs/context.md gives the error measured against the
recorded wire cases. The run loop corrects the estimate with what the provider reported for the
previous call (`nbagent.context.next_request_tokens`), so the rule only has to size what was added
since. Imports messages only.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from ..messages import AssistantMessage, Message, SystemMessage, ToolResultMessage, UserMessage

__all__ = ["CHARS_PER_TOKEN", "IMAGE_TOKENS", "MESSAGE_TOKENS", "TOOL_PROMPT_TOKENS", "Counter", "counter_for",
           "message_tokens", "text_tokens", "tools_tokens"]

CHARS_PER_TOKEN = 4.0
"""Characters per token of the documented rule (English prose and code run about 4, JSON a
little less; the estimate is corrected by the provider's own count after each call)."""
MESSAGE_TOKENS = 4
"""Tokens a message costs beyond its text (role markers, separators)."""
IMAGE_TOKENS = 800
"""Tokens counted for an image (providers charge 85 to ~1,600 by size and detail)."""
TOOL_PROMPT_TOKENS = {"anthropic": 346}
"""Provider -> tokens of the hidden system prompt it adds to a request that offers tools.
Anthropic documents 346 for its current models with ``tool_choice`` auto (313 for any / tool);
on the recorded requests with tools the rule missed 264 to 600 tokens without it."""

Counter = Callable[[str], int]
"""Counts the tokens of one text."""


def text_tokens(text: str) -> int:
    """Tokens of `text` by the rule: a digit is a token of its own (as many open models'
    tokenizers split numbers: SmolLM2, Qwen, Mistral, Gemma), the rest `CHARS_PER_TOKEN`
    characters a token. A table of numbers is so counted 2 to 3 times what prose of its length
    is; where a tokenizer groups digits (OpenAI's, Llama 3's), numbers are overestimated, which
    cuts and compacts early rather than overflowing."""
    # The ASCII digits of a text are the digit bytes of its UTF-8 (no byte of a longer character
    # is one): deleting them from the bytes counts them in one pass (str.count takes ten).
    if not text:
        return 0
    data = text.encode("utf-8", "surrogatepass")
    digits = len(data) - len(data.translate(None, _DIGITS))
    return math.ceil((len(text) - digits) / CHARS_PER_TOKEN) + digits


_DIGITS = b"0123456789"


@functools.lru_cache(maxsize=32)
def _tiktoken_counter(model: str) -> Counter | None:
    try:
        import tiktoken
    except ImportError:
        return None
    try:
        encoding = tiktoken.encoding_for_model(model)
    except Exception:  # an unknown model, or its encoding file cannot be fetched (offline)
        try:
            encoding = tiktoken.get_encoding("o200k_base")
        except Exception:
            return None

    def count(text: str) -> int:
        return len(encoding.encode(text, disallowed_special=()))

    return count


def counter_for(provider: str, model: str) -> Counter:
    """The token counter for a model: tiktoken's for OpenAI models where tiktoken is installed
    and its encoding is available, else the characters-per-token rule (`text_tokens`)."""
    if provider == "openai":
        counter = _tiktoken_counter(model)
        if counter is not None:
            return counter
    return text_tokens


def message_tokens(message: Message, count: Counter = text_tokens) -> int:
    """The estimated tokens of one message as a provider is sent it."""
    if isinstance(message, AssistantMessage):
        size = count(message.text) if message.text else 0  # (an answer with calls often has no text)
        for call in message.tool_calls:
            size += count(call.name) + count(call.args_json) + MESSAGE_TOKENS
        for block in message.thinking_blocks:
            size += count(str(block.get("thinking") or block.get("data") or ""))
        return size + MESSAGE_TOKENS
    if isinstance(message, ToolResultMessage):
        return count(message.model_text()) + IMAGE_TOKENS * len(message.images) + MESSAGE_TOKENS
    if isinstance(message, UserMessage):
        return count(message.content) + IMAGE_TOKENS * len(message.images) + MESSAGE_TOKENS
    if isinstance(message, SystemMessage):
        return count(message.content) + MESSAGE_TOKENS
    return 0  # a compaction record is never sent as it is


def tools_tokens(definitions: Sequence[dict[str, Any]], count: Counter = text_tokens, provider: str = "") -> int:
    """The estimated tokens of the tool definitions sent with a request (with the `provider`'s
    hidden tool prompt, `TOOL_PROMPT_TOKENS`)."""
    if not definitions:
        return 0
    return count(json.dumps(list(definitions), ensure_ascii=False, default=str)) + TOOL_PROMPT_TOKENS.get(provider, 0)
