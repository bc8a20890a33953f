"""OpenTelemetry spans for every run, following the GenAI semantic conventions.

```python
import nbagent.tracing
nbagent.tracing.instrument()                     # the global TracerProvider (opentelemetry-api only)
nbagent.tracing.instrument(tracer_provider=tp, include_content=True)   # prompts and answers too
```

The conventions followed are OpenTelemetry's GenAI semantic conventions, version
`SEMCONV_VERSION`, whose GenAI part is still in "Development" status (names may change). The tree
of one run:

- ``invoke_agent {name}`` (INTERNAL; ``name`` is ``Agent(name=...)`` or ``agent``): the run, with
  ``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.agent.name``,
  ``gen_ai.request.model``, ``gen_ai.conversation.id`` (the thread), the run's token totals, and
  ``nbagent.thread``, ``nbagent.run_id``, ``nbagent.status``, ``nbagent.steps``, ``nbagent.cost``;
  span events ``nbagent.approval.requested``, ``nbagent.approval.decided``, ``nbagent.retry``,
  ``nbagent.fallback`` and ``nbagent.compaction``;
- ``chat {model}`` (CLIENT), one per model call (a retried call is one per attempt), with
  ``gen_ai.request.model``, ``gen_ai.response.model``, ``gen_ai.response.finish_reasons``,
  ``gen_ai.usage.input_tokens`` / ``output_tokens`` / ``cache_read.input_tokens`` /
  ``cache_creation.input_tokens`` / ``reasoning.output_tokens``, ``nbagent.step``,
  ``nbagent.cost``, ``nbagent.purpose``; current while the call goes on;
- ``execute_tool {tool}`` (INTERNAL), one per tool call, with ``gen_ai.tool.name``,
  ``gen_ai.tool.call.id``, ``gen_ai.tool.type``, ``nbagent.status``, ``nbagent.decision``;
  current while the tool runs (a tool's own spans, or an agent run inside it, nest in it).

Content (prompts, answers, tool arguments and results: ``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.system_instructions``, ``gen_ai.tool.call.arguments``,
``gen_ai.tool.call.result``) is recorded only with ``include_content=True``; API keys and the
header secrets of MCP servers never are, and error texts are scrubbed of what looks like a key.

A run paused for approval and resumed, in this process or another, continues the same trace: the
``invoke_agent`` span's context is stored with the thread (`ThreadMeta.trace`) and the resumed
run's span is its child. With tracing on, `nbagent.usage_frame` has ``trace_id`` and ``span_id``
columns (the ``chat`` span of each row this process traced).

Free when off: importing this module imports no OpenTelemetry; `instrument()` does. Owns the
public functions; the spans live in `_spans`. Imports the run hook (`nbagent._run.hooks`).
"""

from __future__ import annotations

from typing import Any

from .._run import hooks
from ._index import trace_ids

__all__ = ["SEMCONV_VERSION", "instrument", "is_instrumented", "trace_ids", "uninstrument"]

SEMCONV_VERSION = "1.44.0"
"""The OpenTelemetry semantic conventions version the spans follow (GenAI: "Development")."""

_installed: Any = None
"""The `_spans.Tracing` hook `instrument()` installed (None: tracing is off)."""


def instrument(tracer_provider: Any = None, *, include_content: bool = False) -> None:
    """Trace every run started from now on (see the module for the spans).

    Idempotent: calling it again changes the settings, never adds a second set of spans.

    Args:
        tracer_provider: an OpenTelemetry ``TracerProvider``; None: the global one
            (``opentelemetry.trace.set_tracer_provider``, also when set later).
        include_content: record prompts, answers, tool arguments and results (off by default,
            as the conventions ask: they may hold personal data).

    Raises:
        ImportError: opentelemetry-api is not installed (``pip install 'nbagent[otel]'``).
    """
    global _installed
    try:
        from opentelemetry import trace
    except ImportError as exc:  # pragma: no cover - the test extra has it
        raise ImportError("nbagent.tracing needs opentelemetry-api: pip install 'nbagent[otel]'") from exc
    from .. import __version__
    from ._spans import Settings, Tracing

    tracer = trace.get_tracer("nbagent", __version__, tracer_provider=tracer_provider,
                              schema_url=f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}")
    settings = Settings(tracer, bool(include_content))
    if _installed is None:
        _installed = Tracing(settings)
    else:
        _installed.settings = settings
    hooks.set_run_hook(_installed)


def uninstrument() -> None:
    """Stop tracing the runs started from now on."""
    global _installed
    _installed = None
    hooks.set_run_hook(None)


def is_instrumented() -> bool:
    """Whether runs are traced (`instrument` was called, and not `uninstrument` since)."""
    return _installed is not None and hooks.run_hook is _installed
