"""The loopback batch server (tests/wire/batch_server.py) against the official SDKs' own batch calls.

Every object the server sends is read by the real ``openai`` / ``anthropic`` client and then
validated strictly by the SDK's pydantic type (`strict`): the clients build their objects without
validation, so a wrong literal or a missing field would otherwise go unnoticed. The real lines at
the top (each with its source and licence) pin the shapes: the SDK types parse them, and every key
they have, the server's objects have too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from anthropic.types.messages import MessageBatch, MessageBatchIndividualResponse
from openai.types import Batch
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from tests.wire.batch_answers import BatchRequest
from tests.wire.batch_server import (
    BatchServer,
    RequestError,
    RequestExpired,
    ServerFault,
    Text,
    ToolCall,
    fetch_stats,
    route,
    script,
)

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-batch-test-secret-0123456789"

# A real output line of an OpenAI chat-completions batch: BerriAI/litellm,
# tests/test_litellm/batches/test_batch_utils.py (the `sample_file_content` fixture of an earlier
# version of that file), MIT licence.
REAL_OPENAI_LINE = json.loads(
    '{"id": "batch_req_6769ca596b38819093d7ae9f522de924", "custom_id": "request-1", "response": {"status_code": 200, '
    '"request_id": "07bc45ab4e7e26ac23a0c949973327e7", "body": {"id": "chatcmpl-AhjSMl7oZ79yIPHLRYgmgXSixTJr7", '
    '"object": "chat.completion", "created": 1734986202, "model": "gpt-4o-mini-2024-07-18", "choices": [{"index": 0, '
    '"message": {"role": "assistant", "content": "Hello! How can I assist you today?", "refusal": null}, "logprobs": '
    'null, "finish_reason": "stop"}], "usage": {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30, '
    '"prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0}, "completion_tokens_details": '
    '{"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}, '
    '"system_fingerprint": "fp_0aa8d3e20b"}}, "error": null}')

# A real line of Anthropic's batch results JSONL: MaxiDonkey/DelphiAnthropic,
# guides/batch-processing.md ("Return values"), MIT licence.
REAL_ANTHROPIC_LINE = json.loads(
    '{"custom_id":"my-first-request","result":{"type":"succeeded","message":{"model":"claude-sonnet-4-5-20250929",'
    '"id":"msg_017SY5ievvNM8fnNvtSeLZN6","type":"message","role":"assistant","content":[{"type":"text","text":'
    '"Hello! How can I help you today?"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,'
    '"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,'
    '"ephemeral_1h_input_tokens":0},"output_tokens":12,"service_tier":"batch","inference_geo":"not_available"}}}}')

# A real completed OpenAI batch, field by field: the values pydantic/pydantic-ai
# tests/batches/test_openai_batch.py (`test_batch_status_completed`, "like in check_status.py
# output") mocks, MIT licence; written back as the JSON the API sends.
REAL_OPENAI_BATCH = {
    "id": "batch_6887c4d206c88190b4e06c4f3867e8ca", "object": "batch", "endpoint": "/v1/chat/completions",
    "errors": None, "input_file_id": "file-Jfyv6WaoGG1i8ukdEL7cJz", "completion_window": "24h",
    "status": "completed", "output_file_id": "file-AiJT2XheqDiVYc5a1FA8Y8", "error_file_id": None,
    "created_at": 1753728210, "in_progress_at": 1753728210, "expires_at": 1753814610, "finalizing_at": 1753728292,
    "completed_at": 1753728293, "failed_at": None, "expired_at": None, "cancelling_at": None, "cancelled_at": None,
    "request_counts": {"completed": 3, "failed": 0, "total": 3}, "metadata": {}}

# A real ended Anthropic batch: the last poll printed in anthropics/anthropic-cookbook
# misc/batch_processing.ipynb (a `BetaMessageBatch` repr, written back as JSON), MIT licence.
REAL_ANTHROPIC_BATCH = {
    "id": "msgbatch_01GgqTz9XzriGNHzTSGZsJJ8", "type": "message_batch", "processing_status": "ended",
    "request_counts": {"canceled": 0, "errored": 0, "expired": 0, "processing": 0, "succeeded": 4},
    "cancel_initiated_at": None, "created_at": "2024-10-08T00:46:30.694748Z", "ended_at": "2024-10-08T00:46:47.283392Z",
    "expires_at": "2024-10-09T00:46:30.694748Z",
    "results_url": "https://api.anthropic.com/v1/messages/batches/msgbatch_01GgqTz9XzriGNHzTSGZsJJ8/results"}

TOOLS = {
    "chat": [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                                "parameters": {"type": "object", "properties": {
                                                    "city": {"type": "string"}}, "required": ["city"]}}}],
    "responses": [{"type": "function", "name": "get_weather", "description": "Weather in a city.", "strict": False,
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}],
    "messages": [{"name": "get_weather", "description": "Weather in a city.",
                  "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
}
ENDPOINT = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}


def strict(obj: Any) -> Any:
    """`obj` validated by its own SDK type (the clients construct objects without validating them)."""
    return type(obj).model_validate(obj.to_dict(mode="json"))


def line(custom_id: str, prompt: str, api: str = "chat", url: str | None = None, **body: Any) -> dict[str, Any]:
    """One OpenAI input line."""
    asked = ({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]} if api == "chat"
             else {"model": "gpt-4o-mini", "input": [{"role": "user", "content": prompt}]})
    return {"custom_id": custom_id, "method": "POST", "url": url or ENDPOINT[api], "body": {**asked, **body}}


def jsonl(lines: list[dict[str, Any]] | list[str]) -> bytes:
    return "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines).encode() + b"\n"


def submit(client: openai.OpenAI, lines: list[dict[str, Any]] | list[str], api: str = "chat") -> Batch:
    uploaded = client.files.create(file=("requests.jsonl", jsonl(lines)), purpose="batch")
    return client.batches.create(input_file_id=uploaded.id, endpoint=ENDPOINT[api],  # type: ignore[arg-type]
                                 completion_window="24h", metadata={"row": "all"})


def poll(client: openai.OpenAI, batch: Batch, limit: int = 10) -> list[Batch]:
    """Every object the retrieves returned, up to the first ended one."""
    seen = []
    for _ in range(limit):
        seen.append(strict(client.batches.retrieve(batch.id)))
        if seen[-1].status in ("completed", "failed", "expired", "cancelled"):
            return seen
    raise AssertionError(f"{batch.id} still {seen[-1].status} after {limit} polls")


def file_lines(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    return [json.loads(x) for x in client.files.content(file_id).text.splitlines() if x.strip()]


def anthropic_request(custom_id: str, prompt: str, **params: Any) -> dict[str, Any]:
    return {"custom_id": custom_id, "params": {"model": "claude-sonnet-4-5", "max_tokens": 256,
                                               "messages": [{"role": "user", "content": prompt}], **params}}


def anthropic_poll(client: anthropic.Anthropic, batch_id: str, limit: int = 10) -> list[MessageBatch]:
    seen = []
    for _ in range(limit):
        seen.append(strict(client.messages.batches.retrieve(batch_id)))
        if seen[-1].processing_status == "ended":
            return seen
    raise AssertionError(f"{batch_id} still {seen[-1].processing_status} after {limit} polls")


def results(client: anthropic.Anthropic, batch_id: str) -> dict[str, MessageBatchIndividualResponse]:
    return {r.custom_id: strict(r) for r in client.messages.batches.results(batch_id)}


def keys(obj: Any) -> set[str]:
    """The key paths of a JSON object (lists: their first item), e.g. ``response.body.usage``."""
    found: set[str] = set()

    def walk(value: Any, path: str) -> None:
        if isinstance(value, list) and value:
            walk(value[0], path)
        elif isinstance(value, dict):
            for key, item in value.items():
                found.add(path + key)
                walk(item, path + key + ".")

    walk(obj, "")
    return found


# ------------------------------------------------------------------------------------ real shapes
def test_the_real_lines_parse_and_the_server_sends_every_key_they_have() -> None:
    ChatCompletion.model_validate(REAL_OPENAI_LINE["response"]["body"])
    MessageBatchIndividualResponse.model_validate(REAL_ANTHROPIC_LINE)
    Batch.model_validate(REAL_OPENAI_BATCH)
    MessageBatch.model_validate(REAL_ANTHROPIC_BATCH)
    with BatchServer(polls=0) as server:
        with openai.OpenAI(base_url=server.base_url, api_key=KEY) as client:
            batch = poll(client, submit(client, [line("request-1", "Hello")]))[-1]
            ours = file_lines(client, batch.output_file_id)[0]
            assert keys(REAL_OPENAI_LINE) <= keys(ours)
            assert keys(REAL_OPENAI_BATCH) <= keys(batch.to_dict(mode="json"))
        with anthropic.Anthropic(base_url=server.url, api_key=KEY) as claude:
            created = claude.messages.batches.create(requests=[anthropic_request("my-first-request", "Hello")])
            ended = anthropic_poll(claude, created.id)[-1]
            ours = json.loads(httpx.get(ended.results_url).text)  # type: ignore[arg-type]
            assert keys(REAL_ANTHROPIC_LINE) <= keys(ours)
            assert keys(REAL_ANTHROPIC_BATCH) <= keys(ended.to_dict(mode="json"))


# ------------------------------------------------------------------------------------ OpenAI
def test_an_openai_batch_goes_validating_in_progress_finalizing_completed(capfd: pytest.CaptureFixture[str]) -> None:
    with BatchServer(polls=2) as server, openai.OpenAI(base_url=server.base_url, api_key=KEY) as client:
        uploaded = strict(client.files.create(file=("rows.jsonl", jsonl([line(f"row-{i}", f"q{i}") for i in range(3)])),
                                              purpose="batch"))
        assert (uploaded.purpose, uploaded.filename, uploaded.status) == ("batch", "rows.jsonl", "processed")
        assert strict(client.files.retrieve(uploaded.id)).bytes == uploaded.bytes
        created = strict(client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                               completion_window="24h", metadata={"run": "r1"}))
        assert (created.status, created.metadata, created.request_counts.total) == ("validating", {"run": "r1"}, 3)
        assert created.expires_at == created.created_at + 24 * 3600

        seen = poll(client, created)
        assert [b.status for b in seen] == ["in_progress", "finalizing", "completed"]
        done = seen[-1]
        assert done.request_counts.model_dump() == {"total": 3, "completed": 3, "failed": 0}
        assert done.created_at <= done.in_progress_at <= done.finalizing_at <= done.completed_at  # type: ignore[operator]
        assert done.error_file_id is None and done.model == "gpt-4o-mini"
        out = strict(client.files.retrieve(done.output_file_id))  # type: ignore[arg-type]
        assert out.purpose == "batch_output"
        lines = file_lines(client, done.output_file_id)
        assert [x["custom_id"] for x in lines] == ["row-0", "row-1", "row-2"]
        bodies = [ChatCompletion.model_validate(x["response"]["body"]) for x in lines]
        assert [b.choices[0].message.content for b in bodies] == ["answer to q0", "answer to q1", "answer to q2"]
        assert done.usage is not None and done.usage.input_tokens == sum(b.usage.prompt_tokens for b in bodies)  # type: ignore[union-attr]
        assert [b.id for b in client.batches.list()] == [done.id]
        assert client.files.delete(uploaded.id).deleted
        with pytest.raises(openai.NotFoundError):
            client.files.retrieve(uploaded.id)
    assert server.stats()["submitted"] == {"row-0": 1, "row-1": 1, "row-2": 1} and server.resubmitted() == []
    assert KEY not in "".join(capfd.readouterr())


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_a_two_step_tool_round_trip_one_step_per_batch(api: str) -> None:
    """Step 1 answers with a tool call, step 2 (the conversation carrying the tool result) with text."""
    agent = script(ToolCall("get_weather", {"city": "Paris"}), lambda r: Text(f"{r.tool_results[0]}, says the tool."))
    with BatchServer(agent, polls=0) as server:
        if api == "messages":
            first, second, tokens = _two_steps_anthropic(server)
        else:
            first, second, tokens = _two_steps_openai(server, api)
        assert first == {"get_weather": {"city": "Paris"}}
        assert second == "Sunny, 22 C, says the tool."
        assert tokens[1] > tokens[0]  # the second request carries the history
        asked = server.requests()
        assert [r.step for r in asked] == [0, 1] and asked[1].tool_results == ["Sunny, 22 C"]
        assert server.stats()["answered"] == {"row-0-step-0": 1, "row-0-step-1": 1}


def _two_steps_openai(server: BatchServer, api: str) -> tuple[dict[str, Any], str, list[int]]:
    with openai.OpenAI(base_url=server.base_url, api_key=KEY) as client:
        ask = line("row-0-step-0", "Weather in Paris?", api, tools=TOOLS[api])
        batch = poll(client, submit(client, [ask], api))[-1]
        body = file_lines(client, batch.output_file_id)[0]["response"]["body"]
        if api == "chat":
            message = ChatCompletion.model_validate(body).choices[0].message
            call = message.tool_calls[0]  # type: ignore[index]
            first = {call.function.name: json.loads(call.function.arguments)}  # type: ignore[union-attr]
            history = [*ask["body"]["messages"], message.model_dump(exclude_none=True),
                       {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 22 C"}]
            follow = line("row-0-step-1", "", api, messages=history, tools=TOOLS[api])
        else:
            fc = Response.model_validate(body).output[0]
            first = {fc.name: json.loads(fc.arguments)}  # type: ignore[union-attr]
            history = [*ask["body"]["input"], fc.model_dump(exclude_none=True),
                       {"type": "function_call_output", "call_id": fc.call_id, "output": "Sunny, 22 C"}]  # type: ignore[union-attr]
            follow = line("row-0-step-1", "", api, input=history, tools=TOOLS[api])
        batch2 = poll(client, submit(client, [follow], api))[-1]
        body2 = file_lines(client, batch2.output_file_id)[0]["response"]["body"]
        text = (ChatCompletion.model_validate(body2).choices[0].message.content if api == "chat"
                else Response.model_validate(body2).output_text)
        return first, text or "", [batch.usage.input_tokens, batch2.usage.input_tokens]  # type: ignore[union-attr]


def _two_steps_anthropic(server: BatchServer) -> tuple[dict[str, Any], str, list[int]]:
    with anthropic.Anthropic(base_url=server.url, api_key=KEY) as claude:
        ask = anthropic_request("row-0-step-0", "Weather in Paris?", tools=TOOLS["messages"])
        created = claude.messages.batches.create(requests=[ask])
        anthropic_poll(claude, created.id)
        message = results(claude, created.id)["row-0-step-0"].result.message  # type: ignore[union-attr]
        use = message.content[0]
        assert message.stop_reason == "tool_use" and message.usage.service_tier == "batch"
        history = [*ask["params"]["messages"], {"role": "assistant", "content": [use.model_dump(exclude_none=True)]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,  # type: ignore[union-attr]
                                                 "content": "Sunny, 22 C"}]}]
        follow = anthropic_request("row-0-step-1", "", tools=TOOLS["messages"])
        follow["params"]["messages"] = history
        created2 = claude.messages.batches.create(requests=[follow])
        anthropic_poll(claude, created2.id)
        message2 = results(claude, created2.id)["row-0-step-1"].result.message  # type: ignore[union-attr]
        assert message2.stop_reason == "end_turn"
        return ({use.name: use.input}, message2.content[0].text,  # type: ignore[union-attr]
                [message.usage.input_tokens, message2.usage.input_tokens])


def test_openai_per_line_errors_land_in_the_error_file() -> None:
    responder = route({"bad": lambda r: RequestError("Invalid 'messages[0].content': string too long.",
                                                     param="messages[0].content", code="string_above_max_length"),
                       "crash": lambda r: ServerFault()})
    with BatchServer(responder, polls=0) as server, openai.OpenAI(base_url=server.base_url, api_key=KEY) as client:
        done = poll(client, submit(client, [line("ok", "fine"), line("bad", "x"), line("crash", "y"),
                                            line("no-model", "z", model=None)]))[-1]
        assert done.status == "completed"
        assert done.request_counts.model_dump() == {"total": 4, "completed": 1, "failed": 3}  # type: ignore[union-attr]
        assert [x["custom_id"] for x in file_lines(client, done.output_file_id)] == ["ok"]
        errors = {x["custom_id"]: x for x in file_lines(client, done.error_file_id)}
    bad = errors["bad"]
    assert bad["error"] is None and bad["response"]["status_code"] == 400
    assert bad["response"]["body"]["error"] == {"message": "Invalid 'messages[0].content': string too long.",
                                                "type": "invalid_request_error", "param": "messages[0].content",
                                                "code": "string_above_max_length"}
    assert errors["crash"]["response"] is None and errors["crash"]["error"]["code"] == "server_error"
    assert errors["no-model"]["response"]["body"]["error"]["param"] == "model"  # checked before the responder


def test_an_expired_openai_batch_keeps_what_ran_and_expires_the_rest() -> None:
    with BatchServer(polls=1, outcome="expired", done_before_stop=1) as server, \
            openai.OpenAI(base_url=server.base_url, api_key=KEY) as client:
        seen = poll(client, submit(client, [line(f"r{i}", f"q{i}") for i in range(3)]))
        done = seen[-1]
        assert [b.status for b in seen] == ["in_progress", "expired"]
        assert done.expired_at is not None and done.completed_at is None
        assert done.request_counts.model_dump() == {"total": 3, "completed": 1, "failed": 2}  # type: ignore[union-attr]
        assert [x["custom_id"] for x in file_lines(client, done.output_file_id)] == ["r0"]
        expired = file_lines(client, done.error_file_id)
        assert {x["custom_id"] for x in expired} == {"r1", "r2"}
        assert all(x["response"] is None and x["error"]["code"] == "batch_expired" for x in expired)
        assert server.stats()["answered"] == {"r0": 1}  # the others never ran

        server.responder = lambda r: RequestExpired() if r.custom_id == "late" else Text("ok")
        server.plan_next(outcome="completed", polls=0)
        one = poll(client, submit(client, [line("early", "a"), line("late", "b")]))[-1]
        assert one.status == "expired" and one.request_counts.failed == 1  # type: ignore[union-attr]


@pytest.mark.parametrize(("lines", "code", "at"), [
    ([line("same", "a"), line("other", "b"), line("same", "c")], "duplicate_custom_id", 3),
    ([line("a", "a"), "{not json", line("b", "b")], "invalid_json_line", 2),
    ([line("a", "a", url="/v1/embeddings")], "url_mismatch", 1),
    ([""], "empty_file", None),
])
def test_an_openai_input_file_the_api_refuses_fails_the_batch_after_creation(lines: list[Any], code: str,
                                                                             at: int | None) -> None:
    with BatchServer(polls=3) as server, openai.OpenAI(base_url=server.base_url, api_key=KEY) as client:
        created = submit(client, lines)
        assert created.status == "validating"  # the real API also accepts the file first, then fails the batch
        failed = poll(client, created)
        assert [b.status for b in failed] == ["failed"]
        error = failed[-1].errors.data[0]  # type: ignore[union-attr]
        assert (error.code, error.line) == (code, at) and error.message
        assert failed[-1].failed_at is not None and failed[-1].output_file_id is None
        assert server.answered == {}


def test_a_whole_openai_batch_fails_and_a_resubmission_is_counted() -> None:
    with BatchServer(polls=0) as server, openai.OpenAI(base_url=server.base_url, api_key=KEY) as client:
        server.plan_next(outcome="failed")
        failed = poll(client, submit(client, [line("r0", "q")]))[-1]
        assert failed.status == "failed" and failed.errors.data[0].code == "token_limit_exceeded"  # type: ignore[union-attr]
        assert "Enqueued token limit reached" in failed.errors.data[0].message  # type: ignore[union-attr]
        again = poll(client, submit(client, [line("r0", "q")]))[-1]
        assert again.status == "completed"
    assert server.resubmitted() == ["r0"] and server.answered == {"r0": 1} and server.created == 2


def test_cancelling_an_openai_batch() -> None:
    with BatchServer(polls=None, done_before_stop=1) as server, \
            openai.OpenAI(base_url=server.base_url, api_key=KEY) as client:
        created = submit(client, [line("r0", "a"), line("r1", "b")])
        assert [strict(client.batches.retrieve(created.id)).status for _ in range(3)] == ["in_progress"] * 3
        cancelling = strict(client.batches.cancel(created.id))
        assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
        cancelled = poll(client, created)[-1]
        assert cancelled.status == "cancelled" and cancelled.cancelled_at is not None
        assert [x["custom_id"] for x in file_lines(client, cancelled.output_file_id)] == ["r0"]
        assert cancelled.error_file_id is None  # what never ran is in no file
        assert strict(client.batches.cancel(created.id)).status == "cancelled"
        with pytest.raises(openai.NotFoundError):
            client.batches.retrieve("batch_nope")


def test_a_batch_runs_until_the_test_says_or_for_some_seconds() -> None:
    with BatchServer(polls=None) as server, openai.OpenAI(base_url=server.base_url, api_key=KEY) as client:
        created = submit(client, [line("r0", "a")])
        assert strict(client.batches.retrieve(created.id)).status == "in_progress"
        server.finish(created.id)
        assert server.status(created.id) == "in_progress"  # a look without a retrieve moves nothing
        assert strict(client.batches.retrieve(created.id)).status == "completed"
        assert server.polls[created.id] == 2

        server.plan_next(polls=0, seconds=0.3, outcome="expired", done_before_stop=0)
        timed = submit(client, [line("r1", "b")])
        assert strict(client.batches.retrieve(timed.id)).status == "in_progress"
        time.sleep(0.3)
        assert strict(client.batches.retrieve(timed.id)).status == "expired"  # the plan holds from creation


def test_openai_output_out_of_order_with_blank_and_duplicate_lines() -> None:
    with BatchServer(polls=0, shuffle=True, blank_lines=True, duplicate_lines=1) as server, \
            openai.OpenAI(base_url=server.base_url, api_key=KEY) as client:
        done = poll(client, submit(client, [line(f"r{i}", f"q{i}") for i in range(5)]))[-1]
        text = client.files.content(done.output_file_id).text  # type: ignore[arg-type]
    raw = text.split("\n")
    assert "" in raw[:-1]  # blank lines inside the file, not only its end
    ids = [json.loads(x)["custom_id"] for x in raw if x.strip()]
    assert sorted(set(ids)) == [f"r{i}" for i in range(5)] and len(ids) == 6
    assert ids[:5] != sorted(ids[:5])  # out of order
    assert done.request_counts.completed == 5  # type: ignore[union-attr]


async def test_the_async_openai_client() -> None:
    with BatchServer(polls=1) as server:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key=KEY) as client:
            uploaded = await client.files.create(file=("a.jsonl", jsonl([line("r0", "q0")])), purpose="batch")
            created = await client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                                  completion_window="24h")
            statuses = [strict(await client.batches.retrieve(created.id)).status for _ in range(2)]
            assert statuses == ["in_progress", "completed"]
            done = await client.batches.retrieve(created.id)
            content = await client.files.content(done.output_file_id)  # type: ignore[arg-type]
            assert json.loads(content.text)["custom_id"] == "r0"
            assert [b.id async for b in client.batches.list()] == [created.id]
            assert (await client.batches.cancel(created.id)).status == "completed"


def test_openai_list_pages_newest_first() -> None:
    with BatchServer(polls=0) as server, openai.OpenAI(base_url=server.base_url, api_key=KEY) as client:
        ids = [submit(client, [line("r", "q")]).id for _ in range(3)]
        page = client.batches.list(limit=2)
        assert [b.id for b in page.data] == ids[::-1][:2] and page.has_more
        assert [b.id for b in client.batches.list(limit=2)] == ids[::-1]  # the SDK follows `after`


# ------------------------------------------------------------------------------------ Anthropic
def test_an_anthropic_batch_in_progress_then_ended_with_every_result_type() -> None:
    responder = route({"bad": lambda r: RequestError("messages.0.content: Input should be a valid list"),
                       "crash": lambda r: ServerFault("Internal server error"),
                       "late": lambda r: RequestExpired()})
    with BatchServer(responder, polls=2) as server, anthropic.Anthropic(base_url=server.url, api_key=KEY) as claude:
        created = strict(claude.messages.batches.create(requests=[
            anthropic_request(cid, f"about {cid}") for cid in ("ok", "bad", "crash", "late")]))
        assert created.processing_status == "in_progress" and created.results_url is None
        assert created.request_counts.processing == 4 and created.request_counts.succeeded == 0
        assert round((created.expires_at - created.created_at).total_seconds()) == 24 * 3600
        seen = anthropic_poll(claude, created.id)
        assert [b.processing_status for b in seen] == ["in_progress", "in_progress", "ended"]
        ended = seen[-1]
        assert ended.request_counts.model_dump() == {"processing": 0, "succeeded": 1, "errored": 2, "canceled": 0,
                                                     "expired": 1}
        assert ended.ended_at is not None and ended.results_url.endswith(f"/v1/messages/batches/{created.id}/results")  # type: ignore[union-attr]
        got = results(claude, created.id)
    assert {cid: r.result.type for cid, r in got.items()} == {"ok": "succeeded", "bad": "errored",
                                                              "crash": "errored", "late": "expired"}
    assert got["ok"].result.message.content[0].text == "answer to about ok"  # type: ignore[union-attr]
    bad = got["bad"].result.error  # type: ignore[union-attr]
    assert (bad.type, bad.error.type, bad.error.message) == ("error", "invalid_request_error",
                                                              "messages.0.content: Input should be a valid list")
    assert got["crash"].result.error.error.type == "api_error"  # type: ignore[union-attr]


@pytest.mark.parametrize(("custom_ids", "message"), [
    (["a", "b", "a"], "requests.2.custom_id: Duplicate custom_id 'a'"),
    (["a" * 65], "requests.0.custom_id: String should have at most 64 characters"),
    (["row 1"], "requests.0.custom_id: String should match pattern"),
])
def test_anthropic_refuses_bad_custom_ids_at_create(custom_ids: list[str], message: str) -> None:
    with BatchServer() as server, anthropic.Anthropic(base_url=server.url, api_key=KEY) as claude:
        with pytest.raises(anthropic.BadRequestError) as refused:
            claude.messages.batches.create(requests=[anthropic_request(cid, "q") for cid in custom_ids])
        assert refused.value.status_code == 400 and message in str(refused.value)
        assert refused.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert server.created == 0 and server.submitted == {}


def test_cancelling_and_deleting_an_anthropic_batch() -> None:
    with BatchServer(polls=None, done_before_stop=1) as server, \
            anthropic.Anthropic(base_url=server.url, api_key=KEY) as claude:
        created = claude.messages.batches.create(requests=[anthropic_request(f"r{i}", "q") for i in range(3)])
        with pytest.raises(anthropic.BadRequestError):
            claude.messages.batches.delete(created.id)  # not ended yet
        canceling = strict(claude.messages.batches.cancel(created.id))
        assert canceling.processing_status == "canceling" and canceling.cancel_initiated_at is not None
        ended = anthropic_poll(claude, created.id)[-1]
        assert (ended.request_counts.succeeded, ended.request_counts.canceled) == (1, 2)
        assert {c: r.result.type for c, r in results(claude, created.id).items()} == {
            "r0": "succeeded", "r1": "canceled", "r2": "canceled"}
        assert strict(claude.messages.batches.delete(created.id)).type == "message_batch_deleted"
        with pytest.raises(anthropic.NotFoundError):
            claude.messages.batches.retrieve(created.id)
    assert server.answered == {"r0": 1}


@pytest.mark.parametrize(("outcome", "result", "error"), [("expired", "expired", None),
                                                          ("failed", "errored", "api_error")])
def test_an_anthropic_batch_that_expires_or_fails_as_a_whole(outcome: str, result: str, error: str | None) -> None:
    with BatchServer(polls=0, outcome=outcome) as server, \
            anthropic.Anthropic(base_url=server.url, api_key=KEY) as claude:
        created = claude.messages.batches.create(requests=[anthropic_request(f"r{i}", "q") for i in range(2)])
        assert anthropic_poll(claude, created.id)[-1].processing_status == "ended"
        got = results(claude, created.id)
    assert {r.result.type for r in got.values()} == {result}
    if error:
        assert {r.result.error.error.type for r in got.values()} == {error}  # type: ignore[union-attr]
    assert server.answered == {}


def test_anthropic_results_out_of_order_and_the_sdk_on_a_blank_line() -> None:
    with BatchServer(polls=0, shuffle=True) as server, anthropic.Anthropic(base_url=server.url, api_key=KEY) as claude:
        created = claude.messages.batches.create(requests=[anthropic_request(f"r{i}", "q") for i in range(5)])
        anthropic_poll(claude, created.id)
        order = [r.custom_id for r in claude.messages.batches.results(created.id)]
        assert sorted(order) == [f"r{i}" for i in range(5)] and order != sorted(order)

        server.plan_next(blank_lines=True)
        blank = claude.messages.batches.create(requests=[anthropic_request(f"b{i}", "q") for i in range(2)])
        ended = anthropic_poll(claude, blank.id)[-1]
        with pytest.raises(json.JSONDecodeError):  # the SDK's JSONL decoder does not skip a blank line
            list(claude.messages.batches.results(blank.id))
        raw = httpx.get(ended.results_url, headers={"x-api-key": KEY}).text  # type: ignore[arg-type]
        assert sorted(MessageBatchIndividualResponse.model_validate_json(x).custom_id
                      for x in raw.splitlines() if x.strip()) == ["b0", "b1"]


async def test_the_async_anthropic_client() -> None:
    with BatchServer(polls=1) as server:
        async with anthropic.AsyncAnthropic(base_url=server.url, api_key=KEY) as claude:
            created = await claude.messages.batches.create(requests=[anthropic_request("r0", "q")])
            statuses = [strict(await claude.messages.batches.retrieve(created.id)).processing_status
                        for _ in range(2)]
            assert statuses == ["in_progress", "ended"]
            got = [strict(r) async for r in await claude.messages.batches.results(created.id)]
            assert [(r.custom_id, r.result.type) for r in got] == [("r0", "succeeded")]
            second = await claude.messages.batches.create(requests=[anthropic_request("r1", "q")])
            assert (await claude.messages.batches.cancel(second.id)).processing_status == "canceling"
            listed = [b.id async for b in claude.messages.batches.list(limit=1)]
            assert listed == [second.id, created.id]  # newest first, one page at a time


# ------------------------------------------------------------------------------------ processes
def test_a_client_killed_with_sigkill_leaves_the_batch_and_the_counters_intact() -> None:
    child = ("import json, sys, time, openai\n"
             "c = openai.OpenAI(base_url=sys.argv[1], api_key='sk-child')\n"
             "rows = ''.join(json.dumps({'custom_id': f'r{i}', 'method': 'POST', 'url': '/v1/chat/completions',"
             " 'body': {'model': 'm', 'messages': [{'role': 'user', 'content': f'q{i}'}]}}) + '\\n'"
             " for i in range(2))\n"
             "f = c.files.create(file=('in.jsonl', rows.encode()), purpose='batch')\n"
             "b = c.batches.create(input_file_id=f.id, endpoint='/v1/chat/completions', completion_window='24h')\n"
             "print(b.id, c.batches.retrieve(b.id).status, flush=True)\n"
             "time.sleep(60)\n")
    with BatchServer(polls=2) as server:
        proc = subprocess.Popen([sys.executable, "-c", child, server.base_url], stdout=subprocess.PIPE, text=True)
        try:
            batch_id, status = proc.stdout.readline().split()  # type: ignore[union-attr]
            assert status == "in_progress"
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            proc.stdout.close()  # type: ignore[union-attr]
        with openai.OpenAI(base_url=server.base_url, api_key=KEY) as client:
            done = poll(client, client.batches.retrieve(batch_id))[-1]
            assert done.status == "completed" and len(file_lines(client, done.output_file_id)) == 2
        assert (server.created, server.uploads, server.resubmitted()) == (1, 1, [])
        assert server.submitted == {"r0": 1, "r1": 1} and server.answered == {"r0": 1, "r1": 1}


def test_the_server_in_its_own_process_with_http_control() -> None:
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "wire" / "batch_server.py"), "--polls", "5"],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        port = int(proc.stdout.readline().split()[1])  # type: ignore[union-attr]
        url = f"http://127.0.0.1:{port}"
        httpx.post(f"{url}/_batch/plan", json={"polls": 0, "outcome": "expired"}).raise_for_status()
        with anthropic.Anthropic(base_url=url, api_key=KEY) as claude:
            created = claude.messages.batches.create(requests=[anthropic_request("r0", "Weather? [fail]")])
            assert claude.messages.batches.retrieve(created.id).processing_status == "ended"
            assert [r.result.type for r in claude.messages.batches.results(created.id)] == ["expired"]
            again = claude.messages.batches.create(requests=[anthropic_request("r1", "Weather? [fail]")])
            assert claude.messages.batches.retrieve(again.id).processing_status == "in_progress"  # back to --polls 5
            httpx.post(f"{url}/_batch/finish/{again.id}").raise_for_status()
            assert claude.messages.batches.retrieve(again.id).processing_status == "ended"
            assert [r.result.type for r in claude.messages.batches.results(again.id)] == ["errored"]
        stats = fetch_stats(url)
        assert stats["batches"] == 2 and stats["submitted"] == {"r0": 1, "r1": 1} and stats["answered"] == {"r1": 1}
        httpx.post(f"{url}/_batch/reset").raise_for_status()
        assert fetch_stats(url)["batches"] == 0
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()  # type: ignore[union-attr]


def test_a_responder_that_raises_is_a_server_fault_and_fails_the_test_at_exit() -> None:
    def broken(request: BatchRequest) -> Text:
        raise ZeroDivisionError("oops")

    server = BatchServer(broken, polls=0)
    with pytest.raises(ZeroDivisionError), server, anthropic.Anthropic(base_url=server.url, api_key=KEY) as claude:
        created = claude.messages.batches.create(requests=[anthropic_request("r0", "q")])
        claude.messages.batches.retrieve(created.id)
        error = next(iter(claude.messages.batches.results(created.id))).result.error  # type: ignore[union-attr]
        assert error.error.type == "api_error" and "ZeroDivisionError" in error.error.message
