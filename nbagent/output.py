"""Structured output: ``Agent(model, output_type=Invoice)`` makes ``result.output`` an ``Invoice``.

Owns `OutputSpec`: how an output type becomes a tool the model calls to give its final answer
(``final_result``, whose parameters are the type's JSON schema), how the answer is validated, and
how it is stored (JSON) and rebuilt. Imports tools and exceptions; pydantic is imported when an
agent with an output type is made, never by ``import nbagent``.

Why a tool and not the provider's JSON mode: every model that calls tools can give a structured
answer this way (OpenAI, Gemini, Groq, Ollama, vLLM, llama.cpp, and the fakes), the arguments are
validated like any tool's, and a wrong answer goes back to the model as an error it can correct.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .exceptions import InvalidArgumentsError, ToolDefinitionError
from .tools import Tool, format_validation_error, is_pydantic_model, schema_of

__all__ = ["OUTPUT_TOOL", "OutputSpec"]

OUTPUT_TOOL = "final_result"
"""The name of the tool the model calls to give a structured final answer."""

_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```\s*$", re.S)


class OutputSpec:
    """What an agent's structured answer must be, and the tool that carries it.

    Args:
        output_type: a pydantic model class, a dataclass, a TypedDict, or any type pydantic
            validates (``list[str]``, ``int``, ``Literal["yes", "no"]``...). A pydantic model's
            fields become the tool's parameters; any other type is wrapped as ``{"result": ...}``.
        description: what the model is told about the tool (default: a sentence that says to
            call it once with the final answer).
    """

    def __init__(self, output_type: Any, *, description: str | None = None) -> None:
        try:
            from pydantic import ConfigDict, TypeAdapter, create_model
        except ImportError as exc:  # pragma: no cover - pydantic is a dependency
            raise ToolDefinitionError(f"output_type needs pydantic: {exc}") from None
        self.output_type = output_type
        self.wrapped = not is_pydantic_model(output_type)
        try:
            self._adapter = TypeAdapter(output_type)
            if self.wrapped:
                model = create_model(
                    "final_result_arguments", __config__=ConfigDict(extra="forbid"), result=(output_type, ...)
                )
            else:
                model = output_type
        except Exception as exc:
            raise ToolDefinitionError(
                f"output_type {output_type!r} cannot be validated by pydantic: {exc}"
            ) from None
        self._model = model
        schema = schema_of(model, OUTPUT_TOOL)
        self.type_name = name = output_type.__name__ if isinstance(output_type, type) else str(output_type)
        """The output type's name, for messages."""
        self.tool = Tool(
            OUTPUT_TOOL,
            description or (
                f"Give your final answer ({name}) by calling this tool once, when you have it; "
                "its arguments are the answer. Do not answer in plain text."
            ),
            schema,
            params_model=model,
        )

    @property
    def name(self) -> str:
        return self.tool.name

    def __repr__(self) -> str:
        return f"OutputSpec({self.output_type!r})"

    def validate(self, args: dict[str, Any] | None) -> Any:
        """The answer from ``final_result`` arguments.

        Raises:
            InvalidArgumentsError: with a message the model can act on.
        """
        validated = self.tool.validate(args)
        return validated.result if self.wrapped else validated

    def from_text(self, text: str | None) -> Any:
        """The answer from a plain-text reply (a model that wrote JSON instead of calling the
        tool; a ``str`` output type takes the text as it is).

        Raises:
            InvalidArgumentsError: the text is not an answer of the output type.
        """
        text = (text or "").strip()
        if self.output_type is str:
            if not text:
                raise InvalidArgumentsError("the answer is empty")
            return text
        fenced = _FENCE.match(text)
        if fenced:
            text = fenced.group(1).strip()
        from pydantic import ValidationError

        try:
            return self._adapter.validate_json(text)
        except ValidationError as exc:
            if self.wrapped:
                try:  # {"result": ...} written as text
                    return self.validate(json.loads(text))
                except (ValueError, InvalidArgumentsError):
                    pass
            detail = format_validation_error(exc).removeprefix("invalid arguments: ")
            raise InvalidArgumentsError(f"the text is not a {self.type_name} as JSON: {detail}") from None

    def dump(self, value: Any) -> Any:
        """The answer as JSON-able data (what the store keeps)."""
        return self._adapter.dump_python(value, mode="json")

    def load(self, data: Any) -> Any:
        """The answer rebuilt from `dump`'s data (None stays None)."""
        return None if data is None else self._adapter.validate_python(data)
