"""`Model.context_window`: every model knows its context window in tokens.

Looked up in genai-prices' table (`nbagent.pricing.context_window_of`) for the providers' models,
given with ``context_window=`` to any model's constructor, None for the fakes, the server's
``ctx`` for the bundled local model; None everywhere when genai-prices is not installed.
"""

from __future__ import annotations

import json
import pickle
import sys
import urllib.request
from typing import Any

import cloudpickle
import pytest

from nbagent import Agent
from nbagent.exceptions import UserError
from nbagent.models import AnthropicModel, FunctionModel, OpenAIModel, ScriptedModel, TestModel, infer_model
from nbagent.pricing import context_window_of


@pytest.fixture(autouse=True)
def _fresh_cache() -> Any:
    context_window_of.cache_clear()
    yield
    context_window_of.cache_clear()


# ---------------------------------------------------------------------------------- lookup
def test_known_models_give_their_windows() -> None:
    assert OpenAIModel("gpt-4o-mini", api_key="sk-test").context_window == 128_000
    assert AnthropicModel("claude-sonnet-4-5", api_key="sk-ant-test").context_window == 200_000
    assert context_window_of("gpt-4o-mini") == 128_000
    assert context_window_of("claude-sonnet-4-5", "anthropic") == 200_000


def test_dated_and_differently_cased_names_match_as_prices_do() -> None:
    assert AnthropicModel("claude-haiku-4-5-20251001", api_key="sk-ant-test").context_window == 200_000
    assert OpenAIModel("gpt-4o-mini-2024-07-18", api_key="sk-test").context_window == 128_000
    assert context_window_of("GPT-4o-mini") == 128_000


def test_a_gateway_provider_finds_the_model_by_name_as_its_prices_do() -> None:
    gateway = OpenAIModel("gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key="k", provider="my-gateway")
    assert gateway.context_window == 128_000


def test_an_unknown_model_has_no_window() -> None:
    assert OpenAIModel("my-finetune-xyz", api_key="sk-test").context_window is None
    ollama = OpenAIModel("llama3.1", base_url="http://127.0.0.1:11434/v1", provider="ollama")
    assert ollama.context_window is None
    assert context_window_of("no-such-model-anywhere", "anthropic") is None
    assert context_window_of("") is None


def test_a_model_made_from_a_string_looks_its_window_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    assert infer_model("openai:gpt-4o-mini").context_window == 128_000
    assert infer_model("anthropic:claude-sonnet-4-5").context_window == 200_000
    assert Agent("openai:gpt-4o-mini").model.context_window == 128_000
    assert infer_model("test").context_window is None


def test_the_lookup_is_made_once_per_model_and_provider() -> None:
    for _ in range(3):
        assert OpenAIModel("gpt-4o-mini", api_key="sk-test").context_window == 128_000
    info = context_window_of.cache_info()
    assert (info.misses, info.hits) == (1, 2)


def test_your_own_provider_looks_its_window_up_or_sets_it() -> None:
    from nbagent.models import Model

    class Mine(Model):
        provider = "openai"
        model_name = "gpt-4o-mini"

    class Sized(Model):
        def __init__(self) -> None:
            self.context_window = 65_536

    assert Mine().context_window == 128_000
    assert Sized().context_window == 65_536
    assert Model().context_window is None  # model "unknown"


# ---------------------------------------------------------------------------------- override
def test_context_window_overrides_the_lookup() -> None:
    assert OpenAIModel("gpt-4o-mini", api_key="sk-test", context_window=32_000).context_window == 32_000
    proxy = OpenAIModel("my-finetune-xyz", base_url="http://127.0.0.1:9/v1", context_window=8192)
    assert proxy.context_window == 8192
    assert AnthropicModel("claude-sonnet-4-5", api_key="sk-ant-test", context_window=100_000).context_window == 100_000


def test_the_window_can_be_set_later_and_reset_to_the_lookup() -> None:
    model = OpenAIModel("gpt-4o-mini", api_key="sk-test")
    model.context_window = 16_000
    assert model.context_window == 16_000
    model.context_window = None
    assert model.context_window == 128_000
    with pytest.raises(UserError, match=r"OpenAIModel\.context_window is a positive int"):
        model.context_window = -1


@pytest.mark.parametrize("bad", [0, -5, True, False, 1.5, "128000", 128_000.0])
def test_a_bad_window_is_a_user_error_naming_the_argument(bad: Any) -> None:
    with pytest.raises(UserError, match=r"OpenAIModel\(context_window=\.\.\.\) is a positive int"):
        OpenAIModel("gpt-4o-mini", api_key="sk-test", context_window=bad)
    with pytest.raises(UserError, match=r"AnthropicModel\(context_window=\.\.\.\)"):
        AnthropicModel("claude-sonnet-4-5", api_key="sk-ant-test", context_window=bad)
    with pytest.raises(UserError, match=r"TestModel\(context_window=\.\.\.\)"):
        TestModel(context_window=bad)
    with pytest.raises(UserError, match=r"FunctionModel\(context_window=\.\.\.\)"):
        FunctionModel(lambda m, r: "ok", context_window=bad)


# ---------------------------------------------------------------------------------- fakes
def test_the_fakes_have_no_window_unless_given_one() -> None:
    assert TestModel().context_window is None
    assert FunctionModel(lambda m, r: "ok").context_window is None
    assert ScriptedModel(["ok"]).context_window is None
    # not even under a real model's name (a test pricing a fake like a real model)
    fake = FunctionModel(lambda m, r: "ok", model_name="gpt-4o-mini")
    fake.provider = "openai"
    assert fake.context_window is None
    assert TestModel(context_window=4000).context_window == 4000
    assert FunctionModel(lambda m, r: "ok", context_window=4000).context_window == 4000
    assert ScriptedModel(["ok"], context_window=2048).context_window == 2048


async def test_a_fake_with_a_window_still_runs() -> None:
    result = await Agent(TestModel(text="hi", context_window=4000)).run("hello")
    assert result.output == "hi"


# ---------------------------------------------------------------------------------- travel
def test_models_pickle_with_their_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-workers-own-key-0123456789")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-workers-own")
    given = pickle.loads(cloudpickle.dumps(OpenAIModel("gpt-4o-mini", api_key="sk-a", context_window=32_000)))
    assert given.context_window == 32_000
    looked_up = pickle.loads(cloudpickle.dumps(OpenAIModel("gpt-4o-mini", api_key="sk-a")))
    assert looked_up.context_window == 128_000
    claude = pickle.loads(cloudpickle.dumps(AnthropicModel("claude-sonnet-4-5", api_key="k", context_window=9000)))
    assert claude.context_window == 9000
    assert pickle.loads(cloudpickle.dumps(TestModel(context_window=4000))).context_window == 4000
    assert pickle.loads(pickle.dumps(TestModel())).context_window is None


# ---------------------------------------------------------------------------------- no genai-prices
def test_without_genai_prices_windows_are_none_and_models_still_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "genai_prices", None)  # `import genai_prices` now fails
    monkeypatch.setitem(sys.modules, "genai_prices.data_snapshot", None)
    context_window_of.cache_clear()
    model = OpenAIModel("gpt-4o-mini", api_key="sk-test")
    assert model.context_window is None
    assert AnthropicModel("claude-sonnet-4-5", api_key="sk-ant-test").context_window is None
    assert context_window_of("gpt-4o-mini") is None
    assert OpenAIModel("gpt-4o-mini", api_key="sk-test", context_window=32_000).context_window == 32_000
    assert Agent(TestModel(text="ok")).run_sync("hi").output == "ok"


# ---------------------------------------------------------------------------------- the local model
class _Server:
    base_url = "http://127.0.0.1:9/v1"


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """No server: `local()` is given a stand-in, and the keys it asked for are recorded."""
    from nbagent.models import _local

    keys: list[tuple[Any, ...]] = []

    def fake_server(key: tuple[Any, ...], timeout: float) -> _Server:
        keys.append(key)
        return _Server()

    monkeypatch.setattr(_local, "_local_server", fake_server)
    return keys


def test_the_local_models_window_is_its_servers_ctx(started: list[tuple[Any, ...]]) -> None:
    from nbagent.models import local

    assert local().context_window == 4096
    assert local(ctx=8192).context_window == 8192
    assert local(context_window=2048).context_window == 2048  # another name for ctx
    assert local(ctx=1024, context_window=1024).context_window == 1024
    assert [key[2] for key in started] == [4096, 8192, 2048, 1024]  # what the server is started with


def test_the_local_models_ctx_is_checked(started: list[tuple[Any, ...]]) -> None:
    from nbagent.models import local

    with pytest.raises(UserError, match=r"local\(ctx=4096, context_window=8192\): both name"):
        local(ctx=4096, context_window=8192)
    with pytest.raises(UserError, match=r"local\(ctx=\.\.\.\) is a positive int"):
        local(ctx=0)
    with pytest.raises(UserError, match=r"local\(context_window=\.\.\.\) is a positive int"):
        local(context_window="big")
    assert started == []  # refused before any server is started


def test_the_local_model_travels_with_its_window(monkeypatch: pytest.MonkeyPatch) -> None:
    from nbagent.models._local import LocalModel

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = LocalModel("local-model", base_url="http://127.0.0.1:18282/v1", api_key="local",
                       server_key=(None, None, 2048), start_timeout=1.0)
    assert model.context_window == 2048
    assert pickle.loads(cloudpickle.dumps(model)).context_window == 2048


@pytest.mark.local_llm
@pytest.mark.timeout(300)
def test_the_local_models_window_is_what_the_real_server_has(local_llm_server: Any) -> None:
    """The window `local()` reports without asking is the ``n_ctx`` the running server reports."""
    from nbagent.models import local

    model = local(port=local_llm_server.port)
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
            local_llm_server.base_url.removesuffix("/v1") + "/props", timeout=30) as reply:
        props = json.loads(reply.read())
    assert model.context_window == props["default_generation_settings"]["n_ctx"] == 4096
