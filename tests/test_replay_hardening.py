"""Record and replay at its edges (issue #43): no header, query parameter or secret-named field of
the settings reaches a recording, in the store or in an exported file; a missing source, a
malformed usage and an unreadable file are typed errors naming what is wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nbagent import Agent
from nbagent._sync import run_sync
from nbagent.models import FunctionModel, export_recording, record, replay
from nbagent.models._recording import Recording, request_key
from nbagent.store import SQLiteStore
from tests.loopback import answering

GATEWAY_KEY = "pk-gateway-0123456789abcdef-SECRET"
SETTINGS: dict[str, Any] = {
    "extra_headers": {"X-Portkey-Api-Key": GATEWAY_KEY, "X-Portkey-Provider": "openai"},
    "extra_query": {"api-key": GATEWAY_KEY, "api-version": "2025-01-01"},
    "extra_body": {"top_k": 3, "litellm_params": {"api_key": GATEWAY_KEY}},
}
"""Every setting that can carry a key: a gateway's header, an ``api-key`` query parameter, a
body field named like a key (LiteLLM's client-side credentials)."""

_CHAT = {"id": "c1", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
         "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
         "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}
_RESPONSES = {"id": "resp_1", "object": "response", "created_at": 0, "model": "gpt-4o-mini", "status": "completed",
              "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                          "content": [{"type": "output_text", "text": "hello", "annotations": []}]}],
              "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4,
                        "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
              "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}
_ANTHROPIC = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
              "content": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn",
              "usage": {"input_tokens": 3, "output_tokens": 1}}
PROVIDERS = {"openai-chat": _CHAT, "openai-responses": _RESPONSES, "anthropic": _ANTHROPIC}


def provider_model(name: str, url: str) -> Any:
    if name == "openai-chat":
        from nbagent.models import OpenAIModel

        return OpenAIModel("gpt-4o-mini", base_url=f"{url}/v1", api_key="sk-test-model-key-0123456789")
    if name == "openai-responses":
        from nbagent.models import OpenAIResponsesModel

        return OpenAIResponsesModel("gpt-4o-mini", base_url=f"{url}/v1", api_key="sk-test-model-key-0123456789")
    from nbagent.models import AnthropicModel

    return AnthropicModel("claude-sonnet-4-5", base_url=url, api_key="sk-ant-test-model-key-0123456789")


# ----------------------------------------------------------------------------- no secret recorded
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_gateway_key_in_the_settings_is_sent_but_never_recorded(provider: str, tmp_path: Path) -> None:
    """The header and the query parameter reach the server (so the test sends them), and neither
    the store's recording nor the exported file holds the key; the body's other parameters are
    kept, and the recording replays with the same settings, or with another key."""
    pytest.importorskip("anthropic" if provider == "anthropic" else "openai")
    seen: list[str] = []
    heard: list[dict[str, str]] = []
    store = SQLiteStore(tmp_path / "threads.db")
    with answering(("application/json", json.dumps(PROVIDERS[provider]).encode()), seen=seen, heard=heard) as url:
        first = Agent(record(provider_model(provider, url)), settings=SETTINGS, store=store).run_sync("hi", thread="t")
    assert first.status == "completed" and first.output == "hello", first.error
    assert heard[0]["x-portkey-api-key"] == GATEWAY_KEY and f"api-key={GATEWAY_KEY}" in seen[0]
    stored = json.dumps(run_sync(lambda: store.recordings(["t"])))
    path = tmp_path / "recording.jsonl"
    assert export_recording(store, path) == 1
    for text in (stored, path.read_text(), (tmp_path / "threads.db").read_bytes().decode("latin-1")):
        assert GATEWAY_KEY not in text and "X-Portkey" not in text and "api-version" not in text
    settings = json.loads(path.read_text())["request"]["settings"]
    assert settings == {"extra_body": {"top_k": 3, "litellm_params": {"api_key": "[redacted]"}}}
    other_key = {**SETTINGS, "extra_headers": {"X-Portkey-Api-Key": "pk-another-key"}}
    for replayed_settings in (SETTINGS, other_key):
        again = Agent(replay(path), settings=replayed_settings).run_sync("hi")
        assert again.status == "completed" and again.output == "hello", again.error


def test_a_recording_made_before_keeps_matching_and_exports_without_its_key(tmp_path: Path) -> None:
    """A file written before headers were left out (its settings and key hold them): it still
    answers the same request, and exporting it again drops them."""
    store = SQLiteStore(tmp_path / "threads.db")
    Agent(record(FunctionModel(lambda m, r: "hello")), settings=SETTINGS, store=store).run_sync("hi", thread="t")
    line = json.loads(_export_line(store, tmp_path))
    line["request"]["settings"] = dict(SETTINGS)  # as the old code wrote it
    line["key"] = request_key(line["request"])
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps(line) + "\n")
    assert GATEWAY_KEY in old.read_text()
    again = Agent(replay(old), settings=SETTINGS).run_sync("hi")
    assert again.status == "completed" and again.output == "hello", again.error
    assert export_recording(old, tmp_path / "clean.jsonl") == 1
    assert GATEWAY_KEY not in (tmp_path / "clean.jsonl").read_text()
    assert Recording.from_dict(line).request["settings"]["extra_body"]["top_k"] == 3


def _export_line(store: SQLiteStore, tmp_path: Path) -> str:
    path = tmp_path / "new.jsonl"
    export_recording(store, path)
    return path.read_text().splitlines()[0]


# ----------------------------------------------------------------------------- sources that cannot be read
@pytest.mark.parametrize("name", ["missing.sqlite", "missing.db", "missing.jsonl"])
def test_a_missing_source_is_file_not_found_and_nothing_is_made(name: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from nbagent.exceptions import UserError
    from nbagent.models import auto

    path = tmp_path / "nowhere" / name
    with pytest.raises(UserError, match=f"{path}: file not found"):
        replay(path)
    monkeypatch.setenv("NBAGENT_REPLAY", str(path))
    with pytest.raises(UserError, match=f"NBAGENT_REPLAY: {path}: file not found"):
        auto()
    assert not (tmp_path / "nowhere").exists()  # no empty store, no directory


def good_line(tmp_path: Path) -> dict[str, Any]:
    store = SQLiteStore(tmp_path / "good.db")
    Agent(record(FunctionModel(lambda m, r: "hello")), store=store).run_sync("hi", thread="t")
    return json.loads(_export_line(store, tmp_path))  # type: ignore[no-any-return]


@pytest.mark.parametrize(("field", "value", "words"), [
    ("usage", {"input_tokens": "many"}, "its usage's input_tokens is 'many', not a whole number of tokens"),
    ("usage", {"output_tokens": 1.5}, "its usage's output_tokens is 1.5"),
    ("usage", {"output_tokens": None}, "its usage's output_tokens is None"),
    ("usage", [3, 4], "its usage is list"),
    ("usage", {"reported": "yes"}, "its usage's reported is 'yes'"),
    ("deltas", [[0.1, "text", 5]], "is not [seconds, 'text' or 'reasoning', text]"),
    ("message", "hello", "its message is not a model's answer"),
    ("request", None, "its request is not a recorded request"),
])
def test_a_malformed_recording_is_a_user_error_naming_the_line(tmp_path: Path, field: str, value: Any,
                                                               words: str) -> None:
    from nbagent.exceptions import UserError

    line = good_line(tmp_path)
    line[field] = value
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(UserError) as info:
        replay(path)
    assert str(info.value).startswith(f"{path}, line 1: not a recorded model call (") and words in str(info.value)


def test_a_malformed_recording_in_a_store_is_a_user_error_naming_the_thread(tmp_path: Path) -> None:
    from nbagent.exceptions import UserError

    line = good_line(tmp_path)
    line["usage"] = {"input_tokens": "many"}
    store = SQLiteStore(tmp_path / "other.db")
    run_sync(lambda: store.add_recording("t", line))
    with pytest.raises(UserError, match=r"the recorded call 0 \(of thread 't'\): not a recorded model call"):
        replay(str(tmp_path / "other.db"))


def test_a_file_that_is_not_utf8_is_a_user_error_naming_the_line_and_byte(tmp_path: Path) -> None:
    from nbagent.exceptions import UserError

    good = json.dumps(good_line(tmp_path), ensure_ascii=False)
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(good.encode() + b"\n" + good.replace("hello", "caf\u00e9").encode("latin-1") + b"\n")
    with pytest.raises(UserError, match=r"latin1\.jsonl, line 2: not UTF-8 text \(the byte 0xe9 at offset \d+"):
        replay(path)
    path.write_bytes(b"\xef\xbb\xbf" + good.encode() + b"\n")  # a byte-order mark, as some editors write
    assert len(replay(path).recordings) == 1
