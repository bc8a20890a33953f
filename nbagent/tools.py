"""Tools: Python functions (or client-side declarations) the model can call.

Owns `Tool`, the `tool` decorator, `RunContext` and the `ToolSource` protocol (tools known only
when a run needs them, such as an MCP server's); imports exceptions only. The JSON schema of a
tool's parameters comes from pydantic (imported lazily, when the first tool is defined), and its
description and parameter docs from the docstring (Google ``Args:`` or Sphinx ``:param x:``).

A tool function may take plain typed arguments or a single pydantic model, may be sync or async
(sync ones run in a worker thread so they never block the event loop), and may take a ``ctx``
parameter (a `RunContext`) to read and change the run's state; such tools run one after the other
in the model's order, each seeing the previous one's change.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, overload, runtime_checkable

from .exceptions import InvalidArgumentsError, ToolDefinitionError

__all__ = ["ApprovalPolicy", "RunContext", "Tool", "ToolSource", "tool"]

StateT = TypeVar("StateT")

ApprovalPolicy = "bool | Callable[[Any], bool]"
"""`requires_approval`: True, False, or a function of the validated arguments (attribute access,
e.g. ``lambda args: args.amount > 100``) that says whether this call needs a person."""


@dataclass
class RunContext(Generic[StateT]):
    """What a tool taking a ``ctx`` parameter gets: the user's state object and the run so far."""

    state: StateT
    run_id: str
    thread: str | None
    step: int
    messages: list[Any] = field(repr=False)
    """The conversation so far (read it; do not change it)."""
    call_id: str = ""
    """Id of the tool call being executed."""


class Tool:
    """A tool the model can call.

    Build one with the `tool` decorator (or `Tool.from_function`), or declare a client-side tool
    with `Tool.client` (no body: the person or the front end supplies the result).

    Attributes:
        name: what the model calls it by.
        description: what the model is told it does.
        parameters: the JSON schema of its arguments.
        requires_approval: True / False / a function of the validated arguments.
        idempotent: safe to run again after a crash left it unfinished (see the store's ledger).
        sequential: runs one after the other with other sequential calls of an answer (tools that
            take ``ctx`` are sequential).
        max_result_tokens: the most of a result the model reads, in tokens (None: the agent's
            ``max_result_fraction`` of the model's window). A longer result is cut as head + tail;
            the whole stays in the store and the model can page through it (``read_result``).
        continues: running a call again continues its work instead of repeating it (an agent's
            tool, `Agent.as_tool`: the sub-agent's own thread, whose ledger keeps its tools
            exactly-once): a call the ledger says started runs again after a crash or a pause,
            without asking for its approval again. False for every other tool.
    """

    continues = False

    __slots__ = (
        "_ctx_name",
        "_model_param",
        "_params_model",
        "builtin",
        "description",
        "function",
        "idempotent",
        "is_async",
        "max_result_tokens",
        "name",
        "parameters",
        "requires_approval",
        "sequential",
    )

    def __init__(
        self,
        name: str,
        description: str,
        parameters: dict[str, Any],
        *,
        function: Callable[..., Any] | None = None,
        params_model: Any = None,
        model_param: str | None = None,
        ctx_name: str | None = None,
        requires_approval: bool | Callable[[Any], bool] = False,
        idempotent: bool = False,
        sequential: bool = False,
        max_result_tokens: int | None = None,
    ) -> None:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise ToolDefinitionError(
                f"tool name {name!r} must be 1-64 letters, digits, '_', '.' or '-' (what providers accept)"
            )
        if not (isinstance(requires_approval, bool) or callable(requires_approval)):
            raise ToolDefinitionError(
                f"tool {name!r}: requires_approval must be True, False or a function of the arguments"
            )
        self.name = name
        self.description = description
        self.parameters = parameters
        self.function = function
        self._params_model = params_model
        self._model_param = model_param
        self._ctx_name = ctx_name
        self.requires_approval = requires_approval
        self.idempotent = idempotent
        self.sequential = sequential or ctx_name is not None
        if max_result_tokens is not None and (
            isinstance(max_result_tokens, bool) or not isinstance(max_result_tokens, int) or max_result_tokens < 1
        ):
            raise ToolDefinitionError(
                f"tool {name!r}: max_result_tokens must be a positive number of tokens, got {max_result_tokens!r}"
            )
        self.max_result_tokens = max_result_tokens
        self.builtin = False
        """True for nbagent's own tools (``read_result``), offered only when they apply."""
        self.is_async = function is not None and inspect.iscoroutinefunction(function)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_function(
        cls,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        requires_approval: bool | Callable[[Any], bool] = False,
        idempotent: bool = False,
        sequential: bool = False,
        max_result_tokens: int | None = None,
    ) -> Tool:
        """Build a tool from a typed function; see the `tool` decorator."""
        if not callable(function):
            raise ToolDefinitionError(f"a tool needs a function, got {function!r}")
        tool_name = name or getattr(function, "__name__", None)
        if not tool_name or tool_name == "<lambda>":
            raise ToolDefinitionError("a lambda tool needs name=...")
        summary, param_docs = _parse_docstring(inspect.getdoc(function) or "")
        params_model, model_param, ctx_name = _params_model_for(function, tool_name, param_docs)
        schema = schema_of(params_model, tool_name)
        return cls(
            tool_name,
            description if description is not None else summary,
            schema,
            function=function,
            params_model=params_model,
            model_param=model_param,
            ctx_name=ctx_name,
            requires_approval=requires_approval,
            idempotent=idempotent,
            sequential=sequential,
            max_result_tokens=max_result_tokens,
        )

    @classmethod
    def client(
        cls,
        name: str,
        description: str,
        params: Any = None,
        *,
        requires_approval: bool = False,
        function: Any = None,
    ) -> Tool:
        """Declare a client-side tool: the model may call it, and the run pauses until
        ``resume(results={call_id: value})`` (or the view's input box) supplies the result.

        Args:
            name: the tool's name.
            description: what the model is told it does.
            params: a pydantic model class, a JSON schema dict, or None (no arguments).
        """
        if function is not None:
            raise ToolDefinitionError(
                f"Tool.client({name!r}) declares a tool with no body: the client answers it. "
                "Use @tool for a tool that runs Python code."
            )
        params_model = None
        if params is None:
            schema: dict[str, Any] = {"type": "object", "properties": {}}
        elif isinstance(params, dict):
            schema = params
        elif is_pydantic_model(params):
            params_model = params
            schema = schema_of(params, name)
        else:
            raise ToolDefinitionError(
                f"Tool.client({name!r}): params must be a pydantic model class or a JSON schema dict"
            )
        return cls(name, description, schema, params_model=params_model, requires_approval=requires_approval)

    # ------------------------------------------------------------------ behaviour
    @property
    def is_client(self) -> bool:
        """True for a tool with no body (the client supplies its result)."""
        return self.function is None

    @property
    def takes_ctx(self) -> bool:
        return self._ctx_name is not None

    def validate(self, args: dict[str, Any] | None) -> Any:
        """Check arguments against the schema; returns the validated arguments object.

        Raises:
            InvalidArgumentsError: with a message the model (or person) can act on.
        """
        if args is None:
            raise InvalidArgumentsError("arguments are not a valid JSON object")
        if self._params_model is None:
            return _Args(args)
        from pydantic import ValidationError

        try:
            return self._params_model.model_validate(args)
        except ValidationError as exc:
            raise InvalidArgumentsError(format_validation_error(exc)) from None

    def needs_approval(self, validated: Any) -> bool:
        policy = self.requires_approval
        if isinstance(policy, bool):
            return policy
        return bool(policy(validated))

    def bind(self, validated: Any, ctx: RunContext[Any] | None) -> Callable[[], Any]:
        """A zero-argument callable that runs the tool with validated arguments."""
        fn = self.function
        if fn is None:
            raise ToolDefinitionError(f"tool {self.name!r} is a client tool and has no body")
        if self._model_param is not None:
            kwargs: dict[str, Any] = {self._model_param: validated}
        elif isinstance(validated, _Args):
            kwargs = dict(validated.data)
        else:
            kwargs = {name: getattr(validated, name) for name in type(validated).model_fields}
        if self._ctx_name is not None:
            kwargs[self._ctx_name] = ctx
        return lambda: fn(**kwargs)

    def definition(self) -> dict[str, Any]:
        """The provider-neutral definition sent to the model: name, description, parameters."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (handy in notebooks and tests)."""
        if self.function is None:
            raise ToolDefinitionError(f"tool {self.name!r} is a client tool and has no body")
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        kind = "client" if self.function is None else ("async" if self.is_async else "sync")
        extra = ", requires_approval" if self.requires_approval else ""
        return f"Tool({self.name!r}, {kind}{extra})"


@runtime_checkable
class ToolSource(Protocol):
    """Tools that are known only when a run needs them: an MCP server's (`nbagent.mcp.MCPTools`),
    or any object with these two methods. Give it to ``Agent(tools=[...])`` next to Python tools.

    A run asks `cached_tools` before it starts and before each model call; when that returns
    None (never listed, or the list changed), it awaits `list_tools`. A source's tools are
    `Tool`s like any other: approvals, the ledger and the view treat them alike.
    """

    def cached_tools(self) -> Sequence[Tool] | None:
        """The tools as last listed, or None when they must be listed (first use, or the source
        learnt that its list changed). The same object as long as the list did not change."""

    async def list_tools(self) -> Sequence[Tool]:
        """List the tools (connecting on first use); the answer is what `cached_tools` returns
        until the list changes."""


class _Args:
    """Arguments of a tool declared by a raw JSON schema: attribute and item access to the dict."""

    __slots__ = ("data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def __getattr__(self, name: str) -> Any:
        try:
            return self.data[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, name: str) -> Any:
        return self.data[name]

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return dict(self.data)


@overload
def tool(function: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    function: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool | Callable[[Any], bool] = False,
    idempotent: bool = False,
    sequential: bool = False,
    max_result_tokens: int | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool | Callable[[Any], bool] = False,
    idempotent: bool = False,
    sequential: bool = False,
    max_result_tokens: int | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a typed function into a `Tool`.

    ```python
    @tool
    def get_weather(city: str) -> str:
        \"\"\"Current weather for a city.

        Args:
            city: The city name, e.g. "Paris".
        \"\"\"

    @tool(requires_approval=lambda args: args.amount > 100)
    def refund(order_id: str, amount: float) -> str: ...
    ```

    Args:
        name: defaults to the function's name.
        description: defaults to the docstring's first paragraph.
        requires_approval: True, or a function of the validated arguments returning True when a
            person must approve this call.
        idempotent: the tool may safely run again if a crash interrupted it.
        sequential: run one after the other with other sequential calls (tools with ``ctx`` are).
        max_result_tokens: the most of a result the model reads, in tokens (default: the agent's
            ``max_result_fraction`` of the window); the whole result is kept (see docs/context.md).
    """

    def wrap(fn: Callable[..., Any]) -> Tool:
        return Tool.from_function(
            fn,
            name=name,
            description=description,
            requires_approval=requires_approval,
            idempotent=idempotent,
            sequential=sequential,
            max_result_tokens=max_result_tokens,
        )

    return wrap if function is None else wrap(function)


# ---------------------------------------------------------------------- schema helpers
_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params|Returns?|Raises|Yields|Examples?|Notes?):\s*$")
_GOOGLE_ARG = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_ARG = re.compile(r"^\s*:param\s+(?:[\w\[\], ]+\s+)?(\w+)\s*:\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """First paragraph(s) before any section, and per-parameter descriptions."""
    summary_lines: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    arg_indent: int | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        sphinx = _SPHINX_ARG.match(line)
        if sphinx:
            current, section = sphinx.group(1), "sphinx"
            params[current] = sphinx.group(2).strip()
            continue
        header = _SECTION.match(stripped)
        if header:
            section, current, arg_indent = header.group(1).lower(), None, None
            continue
        if section is None:
            summary_lines.append(line)
        elif section in ("args", "arguments", "parameters", "params"):
            match = _GOOGLE_ARG.match(line)
            if match and (arg_indent is None or indent <= arg_indent):
                arg_indent = indent
                current = match.group(1).lstrip("*")
                params[current] = match.group(2).strip()
            elif current and stripped:
                params[current] = (params[current] + " " + stripped).strip()
        elif section == "sphinx" and current and stripped and not stripped.startswith(":"):
            params[current] = (params[current] + " " + stripped).strip()
    return "\n".join(summary_lines).strip(), params


def is_pydantic_model(obj: Any) -> bool:
    if not isinstance(obj, type):
        return False
    try:
        from pydantic import BaseModel
    except ImportError:  # pragma: no cover - pydantic is a dependency
        return False
    return issubclass(obj, BaseModel)


def _is_ctx_param(param: inspect.Parameter, hint: Any) -> bool:
    if param.name == "ctx":
        return True
    origin = typing.get_origin(hint) or hint
    return origin is RunContext


def _params_model_for(
    function: Callable[..., Any], tool_name: str, param_docs: dict[str, str]
) -> tuple[Any, str | None, str | None]:
    from pydantic import ConfigDict, Field, create_model

    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"tool {tool_name!r}: cannot read the signature: {exc}") from None
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception as exc:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: cannot resolve the type hints ({exc}); define the types at module level"
        ) from None

    ctx_name: str | None = None
    plain: list[inspect.Parameter] = []
    for param in signature.parameters.values():
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"tool {tool_name!r}: *{param.name} / **{param.name} cannot become a JSON schema; "
                "list the parameters explicitly"
            )
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                f"tool {tool_name!r}: positional-only parameter {param.name!r} cannot be passed by name"
            )
        hint = hints.get(param.name, inspect.Parameter.empty)
        if _is_ctx_param(param, hint):
            ctx_name = param.name
            continue
        if hint is inspect.Parameter.empty:
            raise ToolDefinitionError(
                f"tool {tool_name!r}: parameter {param.name!r} has no type annotation; "
                "annotate it (e.g. `city: str`) so the model gets a schema"
            )
        plain.append(param)

    if len(plain) == 1 and is_pydantic_model(hints[plain[0].name]):
        return hints[plain[0].name], plain[0].name, ctx_name

    field_defs: dict[str, Any] = {}
    for param in plain:
        hint = hints[param.name]
        default = ... if param.default is inspect.Parameter.empty else param.default
        doc = param_docs.get(param.name)
        field_defs[param.name] = (hint, Field(default, description=doc) if doc else default)
    try:
        model = create_model(
            f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **field_defs
        )
    except Exception as exc:
        raise ToolDefinitionError(f"tool {tool_name!r}: cannot build an argument model: {exc}") from None
    return model, None, ctx_name


def schema_of(model: Any, tool_name: str) -> dict[str, Any]:
    try:
        schema = model.model_json_schema()
    except Exception as exc:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: its parameters cannot be turned into a JSON schema: {exc}"
        ) from None
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    schema.setdefault("properties", {})
    return schema  # type: ignore[no-any-return]


def format_validation_error(exc: Any) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(arguments)"
        parts.append(f"{loc}: {err.get('msg')}")
    return "invalid arguments: " + "; ".join(parts)
