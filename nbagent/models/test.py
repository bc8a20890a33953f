"""`TestModel`: calls every tool once with arguments made from its schema, then answers with
text summarising the results. No key, no network: for smoke tests and demos."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..messages import Message, ToolCall
from .base import ModelRequest
from .function import FunctionModel

__all__ = ["TestModel", "example_args"]


class TestModel(FunctionModel):
    """Calls every tool (or those named in `call_tools`) once, then answers with `text`, or with
    a JSON summary of the tool results when `text` is None. For an agent with an ``output_type``
    it answers by calling the output tool with arguments made from its schema (or
    ``args["final_result"]``).

    Args:
        call_tools: ``"all"`` or the names of the tools to call.
        text: the final answer (default: ``{"tool_name": result, ...}`` as JSON).
        args: arguments to use per tool name instead of generated ones.
        model_name: reported as the model (usage rows).
        context_window: what `context_window` reports, in tokens (default None: unknown).
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        *,
        call_tools: str | Sequence[str] = "all",
        text: str | None = None,
        args: dict[str, dict[str, Any]] | None = None,
        model_name: str = "test",
        context_window: int | None = None,
    ) -> None:
        self.call_tools = call_tools
        self.text = text
        self.args = args or {}
        super().__init__(self._answer_fn, model_name=model_name, context_window=context_window)

    def _answer_fn(self, messages: list[Message], request: ModelRequest) -> Any:
        last = messages[-1] if messages else None
        final = request.output_tool
        if last is not None and last.kind == "user" and request.tools:
            names = [t["name"] for t in request.tools if t["name"] != final]
            if self.call_tools != "all":
                names = [n for n in names if n in self.call_tools]
            if names:
                return [
                    ToolCall.of(t["name"], self.args.get(t["name"], example_args(t["parameters"])))
                    for t in request.tools
                    if t["name"] in names
                ]
        if final is not None:  # a structured answer: through the output tool
            schema = next(t["parameters"] for t in request.tools if t["name"] == final)
            return ToolCall.of(final, self.args.get(final, example_args(schema)))
        if self.text is not None:
            return self.text
        results: dict[str, Any] = {}
        for m in reversed(messages):
            if m.kind != "tool-result":
                break
            results[m.name] = m.content
        if not results:
            return "success (no tool calls)"
        return json.dumps(dict(reversed(list(results.items()))), ensure_ascii=False)


def example_args(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> Any:
    """Arguments that fit a JSON schema (required fields only)."""
    defs = defs if defs is not None else schema.get("$defs", {})
    if "$ref" in schema:
        return example_args(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            options = [s for s in schema[key] if s.get("type") != "null"] or schema[key]
            return example_args(options[0], defs)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: example_args(props[name], defs) for name in schema.get("required", []) if name in props}
    if kind == "array":
        return []
    if kind == "string":
        return "a"
    if kind == "integer":
        return int(schema.get("minimum", 0))
    if kind == "number":
        return float(schema.get("minimum", 0.0))
    if kind == "boolean":
        return False
    return None
