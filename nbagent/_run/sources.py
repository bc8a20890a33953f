"""Tool sources in a run: the agent's Python tools merged with the tools of its `ToolSource`s.

Owns `SourceSet`, which an agent with tool sources keeps in its `RunConfig` (``config.sources``;
None for an agent with Python tools only, whose runs never come here). `SourceSet.current` gives
the run's config with every source's tools added, listing a source only when it says its list
is unknown or changed (`ToolSource.cached_tools`), and reusing the merged config while nothing
changed. The loop asks again before each model call, so a list that changed during a run
reaches the next request. Imports exceptions and tools (and the config, for types only).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..exceptions import DuplicateToolError, ToolDefinitionError
from ..tools import Tool, ToolSource

if TYPE_CHECKING:
    from .config import RunConfig

__all__ = ["SourceSet"]


class SourceSet:
    """An agent's tool sources, and its config with their tools as last merged.

    Args:
        sources: the sources, in the order the agent was given them.
        tools: the agent's own tools (Python functions, client tools), by name.
        definitions: the agent's tool definitions: those of `tools`, then any the agent adds
            after them (the structured answer's tool), which stay last.
        reserved: names no source tool may take (the structured answer's tool).
    """

    __slots__ = ("_merged", "definitions", "reserved", "sources", "tools")

    def __init__(self, sources: Sequence[ToolSource], tools: Mapping[str, Tool],
                 definitions: Sequence[dict[str, Any]], reserved: Sequence[str] = ()) -> None:
        self.sources = tuple(sources)
        self.tools = tools
        self.definitions = list(definitions)
        self.reserved = tuple(reserved)
        self._merged: tuple[tuple[Sequence[Tool], ...], RunConfig, RunConfig] | None = None
        """The lists last merged, the config made of them, and the config it was made from."""

    async def current(self, config: RunConfig, *, strict: bool = True) -> RunConfig:
        """`config` with the sources' tools as they are now.

        Args:
            config: the agent's config (or one this method returned).
            strict: raise when a source cannot list its tools (a run that starts); False keeps
                the tools as last merged instead (a run going on: a failing source's calls
                give error results, the run goes on).

        Raises:
            ToolSourceError: a source could not list its tools (strict only).
            DuplicateToolError: a source's tool has the name of another tool of the agent.
        """
        known = [source.cached_tools() for source in self.sources]
        merged = self._merged
        if merged is not None and all(a is b for a, b in zip(known, merged[0], strict=True)):
            return _keeping(config, merged)
        try:
            missing = [i for i, tools in enumerate(known) if tools is None]
            listed = await asyncio.gather(*(self.sources[i].list_tools() for i in missing))
        except Exception:
            if strict or merged is None:
                raise
            return _keeping(config, merged)
        for i, tools in zip(missing, listed, strict=True):
            known[i] = tools
        lists = tuple(tools for tools in known if tools is not None)
        resolved = self._merge(config, lists)
        self._merged = (lists, resolved, config)
        return resolved

    def _merge(self, config: RunConfig, lists: tuple[Sequence[Tool], ...]) -> RunConfig:
        tools = dict(self.tools)
        added: list[dict[str, Any]] = []
        for source, source_tools in zip(self.sources, lists, strict=True):
            for t in source_tools:
                if not isinstance(t, Tool):
                    raise ToolDefinitionError(f"tool source {source!r} gave {t!r}, which is not an nbagent.Tool")
                if t.name in tools or t.name in self.reserved:
                    raise DuplicateToolError(
                        f"tool source {source!r} has a tool named {t.name!r}, and so has another tool of "
                        "this agent; give the source a prefix (e.g. MCPTools.stdio(..., prefix='fs')) so "
                        "that its tools' names differ"
                    )
                tools[t.name] = t
                added.append(t.definition())
        own = len(self.tools)
        definitions = [*self.definitions[:own], *added, *self.definitions[own:]]
        return dataclasses.replace(config, tools=MappingProxyType(tools), tool_definitions=tuple(definitions))


def _keeping(config: RunConfig, merged: tuple[Any, RunConfig, RunConfig]) -> RunConfig:
    """The merged tools in `config`: the merged config itself when `config` is the one it was made
    from (or it), else `config` with its tools (a run hook may have changed the run's config, e.g.
    its model wrapped for tracing: that change is kept)."""
    _, resolved, base = merged
    if config is base or config is resolved or (config.model is resolved.model
                                                 and config.summarizer is resolved.summarizer):
        return resolved
    return dataclasses.replace(config, tools=resolved.tools, tool_definitions=resolved.tool_definitions)
