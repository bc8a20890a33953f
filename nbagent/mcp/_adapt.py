"""MCP tools as nbagent `Tool`s: names, schemas, the approval rule, and what a result becomes.

Owns `adapt` (one listed MCP tool -> a `Tool` whose body calls the server), `approval_policy`
(the user's ``requires_approval`` setting, or the tool's annotations) and `result_value` (a
``CallToolResult`` -> what the model sees). Pure functions: no I/O, no SDK import (the SDK's
objects are read by attribute). Imports nbagent's exceptions, messages and tools.

The approval rule with no setting: a tool needs approval unless the server marks it read-only
(``readOnlyHint: true``) and not destructive. Annotations are hints from the server: for a
server you do not trust, decide yourself (``requires_approval=True``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from ..exceptions import InvalidPromptError, ModelRetry, ToolDefinitionError, UserError
from ..messages import Image
from ..tools import Tool
from ._session import scrub

__all__ = ["ApprovalSetting", "adapt", "approval_policy", "check_setting", "result_value", "signature"]

ApprovalSetting = bool | Mapping[str, Any] | Callable[[str, dict[str, Any]], bool] | None
"""``requires_approval=`` of `MCPTools`: True / False for every tool, ``{tool name: True | False |
callable}`` per tool (tools not named: the annotations decide), ``callable(name, args) -> bool``,
or None (the annotations decide)."""


def check_setting(setting: ApprovalSetting) -> ApprovalSetting:
    """`setting` if it is one `ApprovalSetting` accepts.

    Raises:
        UserError: it is not.
    """
    if setting is None or isinstance(setting, bool) or callable(setting):
        return setting
    if isinstance(setting, Mapping):
        for key, value in setting.items():
            if not isinstance(key, str) or not (isinstance(value, bool) or callable(value)):
                raise UserError(f"requires_approval={{{key!r}: {value!r}}}: give tool names with True, False or "
                                "a function (name, args) -> bool")
        return setting
    raise UserError(f"requires_approval must be True, False, a dict of tool names or a function (name, args) "
                    f"-> bool, got {setting!r}")


def _annotation_rule(annotations: Any) -> bool:
    if annotations is None:
        return True
    destructive = getattr(annotations, "destructive_hint", None)
    read_only = getattr(annotations, "read_only_hint", None)
    return not (read_only is True and destructive is not True)


def approval_policy(setting: ApprovalSetting, server_name: str, tool_name: str,
                    annotations: Any) -> bool | Callable[[Any], bool]:
    """The `Tool.requires_approval` of one MCP tool.

    Args:
        setting: the user's ``requires_approval=``.
        server_name: the tool's name on the server (what a dict or a callable setting is given).
        tool_name: its name for the model (with the prefix), also accepted as a dict key.
        annotations: the tool's ``ToolAnnotations`` from the server, or None.
    """
    if isinstance(setting, Mapping):
        setting = setting.get(server_name, setting.get(tool_name))
    if setting is None:
        return _annotation_rule(annotations)
    if isinstance(setting, bool):
        return setting
    decide: Callable[[str, dict[str, Any]], Any] = setting  # type: ignore[assignment]
    return lambda args: bool(decide(server_name, dict(args.model_dump())))


def signature(mcp_tool: Any) -> tuple[Any, ...]:
    """What makes a listed tool the same tool: a list whose tools all keep theirs is unchanged."""
    annotations = getattr(mcp_tool, "annotations", None)
    return (mcp_tool.name, mcp_tool.description, getattr(mcp_tool, "title", None),
            json.dumps(mcp_tool.input_schema, sort_keys=True, default=str),
            annotations.model_dump_json() if annotations is not None else None)


def adapt(mcp_tool: Any, *, prefix: str | None, setting: ApprovalSetting, source: str,
          call: Callable[[str, dict[str, Any]], Awaitable[Any]]) -> Tool:
    """The `Tool` for one listed MCP tool; its body awaits ``call(server_name, arguments)``.

    Raises:
        ToolDefinitionError: the name (with the prefix) is not one models accept.
    """
    server_name = mcp_tool.name
    name = f"{prefix}_{server_name}" if prefix else server_name
    schema = dict(mcp_tool.input_schema or {})
    schema.setdefault("type", "object")
    if schema.get("type") == "object":
        schema.setdefault("properties", {})
    annotations = getattr(mcp_tool, "annotations", None)

    async def call_server(**arguments: Any) -> Any:
        return await call(server_name, arguments)

    call_server.__name__ = call_server.__qualname__ = f"mcp_{server_name}"
    try:
        return Tool(name, mcp_tool.description or getattr(mcp_tool, "title", None) or "", schema,
                    function=call_server,
                    requires_approval=approval_policy(setting, server_name, name, annotations),
                    idempotent=bool(annotations is not None and getattr(annotations, "idempotent_hint", None)))
    except ToolDefinitionError as exc:
        raise ToolDefinitionError(f"the MCP server {source!r} lists a tool nbagent cannot offer: {exc}") from None


# ---------------------------------------------------------------------- results
def result_value(result: Any, secrets: Sequence[str]) -> Any:
    """What a tool returns for a ``CallToolResult`` (the run turns it into the model's result).

    ``structuredContent`` -> its JSON; otherwise the text blocks joined by newlines (resources
    and audio as short notes). Image blocks become `nbagent.Image`s: the value is then a list of
    the text and the images, which the model is sent with the result (by providers that take
    images in tool results) and the result keeps (`ToolResultMessage.images`). Header and env
    values are replaced by ``***``.

    Raises:
        ModelRetry: ``isError``: the model gets an error result with the server's text.
    """
    blocks = list(getattr(result, "content", None) or ())
    if getattr(result, "is_error", False):
        text = "\n".join(_block_text(b) for b in blocks) or "the tool failed (the server gave no message)"
        raise ModelRetry(scrub(text, secrets))
    images = [image for image in map(_image, blocks) if image is not None]
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        text = json.dumps(structured, ensure_ascii=False, default=str)
    else:
        text = "\n".join(_block_text(b) for b in blocks if _image(b) is None)
    text = scrub(text, secrets)
    if not images:
        return text
    return [text, *images] if text else images


def _image(block: Any) -> Image | None:
    """An image block as an `Image` (None for other blocks, and images models do not take)."""
    if getattr(block, "type", None) != "image":
        return None
    try:
        return Image(base64.b64decode(block.data), block.mime_type)
    except (InvalidPromptError, ValueError, TypeError):  # not PNG/JPEG/GIF/WebP, or not base64
        return None


def _block_text(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind == "image":  # one models cannot take (an SVG, ...)
        return f"[image: {block.mime_type}, not passed on]"
    if kind == "audio":
        return f"[audio: {block.mime_type}, not passed on]"
    if kind == "resource_link":
        label = getattr(block, "name", None) or ""
        return f"[resource: {block.uri}{' ' + label if label else ''}]"
    if kind == "resource":
        inner = block.resource
        text = getattr(inner, "text", None)
        if text is not None:
            return str(text)
        return f"[resource {inner.uri}: {getattr(inner, 'mime_type', None) or 'binary'}, not passed on]"
    return f"[{kind or type(block).__name__} content, not passed on]"
