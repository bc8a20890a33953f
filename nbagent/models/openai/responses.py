"""`OpenAIResponsesModel`: OpenAI's Responses API (``client.responses``) through the official ``openai`` SDK.

The API for OpenAI's reasoning models with tools: on Chat Completions, GPT-5.4 and later take no
tool calls with a reasoning effort other than ``none``; here they do, and the reasoning carries
across steps. A sibling of `OpenAIModel` on the same `OpenAISDKModel` base (the SDK's client per
event loop, time limits, the error table, key hygiene, travelling to workers, answers in another
shape than asked: `models._http`); what it adds is its wire (`_responses_wire`, and
``client.responses`` as the sends), its readers (`_responses_stream`) and native compaction
(`OpenAIResponsesModel.compact`).

The reasoning rule (``store=False``, the default): every request sends ``"store": false`` and no
``previous_response_id``; with reasoning configured (``reasoning_effort`` / ``reasoning_summary``,
or a reasoning model: ``o*``, ``gpt-5*``) ``include`` holds ``"reasoning.encrypted_content"``. Every
output item of an answer (reasoning with its encrypted content, messages with their ``phase``,
function calls, built-in tool calls, item types nbagent does not know) is kept with the answer in
the thread (every store persists it) and sent back in its place on every later request: after an
approval pause, and after a restart from another process. With ``store=True`` the server keeps the
responses and items go back as they came (reasoning by id); ``previous_response_id`` is never used.

May import: ``openai``, nbagent's exceptions, messages and model base, the models' shared helpers, and
this package's `_sdk_model`, `_responses_wire`, `_responses_stream`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from typing import Any

from openai import AsyncOpenAI

from ...exceptions import ModelError, ModelResponseError, UserError
from ...messages import AssistantMessage
from .._deadline import DEFAULT_DEADLINE, within
from .._http import DEFAULT_TIMEOUT, Reading
from .._keys import scrub_error
from .._whole_body import body_error
from ..base import ModelRequest, ModelResponse, StreamItem
from ._responses_stream import response_answer, response_counts, response_stream_items, sdk_events
from ._responses_wire import check_settings, input_items, responses_params
from ._sdk_model import OpenAISDKModel

__all__ = ["OpenAIResponsesModel"]

_REASONING_MODEL = re.compile(r"^(o\d|gpt-5|codex)", re.IGNORECASE)
"""Model names that reason whether asked to or not (their reasoning items must go back whole)."""

class OpenAIResponsesModel(OpenAISDKModel):
    """A model on OpenAI's Responses API (``/v1/responses``), via the official ``openai`` SDK.

    ```python
    agent = Agent("openai-responses:gpt-5.4", tools=[get_weather])
    agent = Agent(OpenAIResponsesModel("gpt-5.4", reasoning_effort="medium", reasoning_summary="auto"))
    agent = Agent(OpenAIResponsesModel("gpt-5.4", builtin_tools=[{"type": "web_search"}]))
    ```

    Args:
        model_name: the model to ask for; default ``$OPENAI_MODEL``.
        base_url: default ``$OPENAI_BASE_URL``, else OpenAI's (Azure's ``.../openai/v1`` works too).
        api_key: default ``$OPENAI_API_KEY``; never shown in reprs, messages, events, usage rows or errors.
        reasoning_effort: ``reasoning.effort`` (``"none"``, ``"minimal"``, ``"low"``, ``"medium"``,
            ``"high"``, ``"xhigh"``); None: the model's default.
        reasoning_summary: ``reasoning.summary`` (``"auto"``, ``"concise"``, ``"detailed"``): the
            summaries stream as reasoning (the view's Thinking section) and go back only inside
            their reasoning item.
        store: False (default): nothing is kept on OpenAI's side, the encrypted reasoning goes back
            with every request (see the module docstring). True: the server keeps the responses.
        builtin_tools: OpenAI's built-in tools, as the API spells them (``{"type": "web_search"}``,
            ``{"type": "code_interpreter", "container": {"type": "auto"}}``, ``{"type":
            "image_generation"}``, ``{"type": "file_search", "vector_store_ids": [...]}``): they run
            on OpenAI's side, never locally, and need no approval; their items stay with the answer.
        encrypted_reasoning: ask for ``reasoning.encrypted_content``; None (default): when
            ``store`` is False and reasoning is configured or the model reasons (``o*``, ``gpt-5*``).
        sdk_stream: read a streamed answer as the ``openai`` SDK's parsed events
            (``responses.create(stream=True)``) instead of nbagent's own reader of the stream's
            bytes (`models._sse.json_events`, the default). The same answer either way; the SDK's
            events cost five to six times as much kernel CPU per delta (bench/README.md, "Fast
            paths"). For a server whose stream nbagent's reader does not read right.
        provider, settings, timeout, max_retries, client, http_client, deadline, context_window:
            as for `OpenAIModel` (both are `OpenAISDKModel`s); `settings` are ``responses.create``'s
            (``max_output_tokens``, or nbagent's ``max_tokens``; ``temperature``, ``text``,
            ``truncation``, ``extra_body``...).
    """

    native_compaction = True  # Compaction.native(): `compact`, /v1/responses/compact
    expected = "a Responses API response"

    def __init__(
        self,
        model_name: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        reasoning_effort: str | None = None,
        reasoning_summary: str | None = None,
        store: bool = False,
        builtin_tools: Sequence[Mapping[str, Any]] = (),
        encrypted_reasoning: bool | None = None,
        sdk_stream: bool = False,
        provider: str = "openai",
        settings: Mapping[str, Any] | None = None,
        timeout: float | Any = DEFAULT_TIMEOUT,
        max_retries: int = 0,
        client: Any = None,
        http_client: Any = None,
        deadline: float | None = DEFAULT_DEADLINE,
        context_window: int | None = None,
    ) -> None:
        super().__init__(
            model_name, base_url=base_url, api_key=api_key, provider=provider, settings=settings,
            timeout=timeout, max_retries=max_retries, client=client, http_client=http_client,
            deadline=deadline, context_window=context_window,
        )
        self.store = bool(store)
        self.sdk_stream = bool(sdk_stream)
        self.reasoning: dict[str, Any] = {}
        if reasoning_effort is not None:
            self.reasoning["effort"] = reasoning_effort
        if reasoning_summary is not None:
            self.reasoning["summary"] = reasoning_summary
        for tool in builtin_tools:
            if not isinstance(tool, Mapping) or not isinstance(tool.get("type"), str):
                raise UserError(
                    f"a built-in tool is a dict with a 'type' (e.g. {{'type': 'web_search'}}), got {tool!r}")
        self.builtin_tools = [dict(t) for t in builtin_tools]
        if encrypted_reasoning is None:
            encrypted_reasoning = not self.store and bool(
                self.reasoning or self.settings.get("reasoning") or _REASONING_MODEL.match(self.model_name))
        self.encrypted_reasoning = bool(encrypted_reasoning)

    def _check_settings(self, settings: Mapping[str, Any]) -> None:
        check_settings(settings)

    # ------------------------------------------------------------------ the wire
    def request_params(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        """The keyword arguments for ``responses.create`` (without the key)."""
        return responses_params(
            request, model_name=self.model_name, settings=self.settings, store=self.store,
            reasoning=self.reasoning, encrypted=self.encrypted_reasoning, builtin_tools=self.builtin_tools,
            stream=stream,
        )

    def _resource(self, client: AsyncOpenAI) -> Any:
        return client.responses

    def batch_wire(self) -> Any:
        """OpenAI's Batch API for the Responses API (``agent.map(..., batch_api=True)``)."""
        from ._batch import OpenAIBatchWire

        return OpenAIBatchWire(self, "/v1/responses")

    def _sdk_events(self, stream: AsyncIterator[Any]) -> AsyncIterator[dict[str, Any]]:
        """The SDK's parsed events as the JSON objects `response_stream_items` reads (`sdk_stream`)."""
        return sdk_events(stream)

    # ------------------------------------------------------------------ the readers
    def read_stream(self, events: AsyncIterator[Any], reading: Reading) -> AsyncGenerator[StreamItem, None]:
        """`_responses_stream.response_stream_items` over the JSON objects of the stream's events."""
        return response_stream_items(events, reading.request_id, reading.fail, reading.empty, reading.provider)

    def read_answer(self, body: dict[str, Any], reading: Reading) -> ModelResponse | None:
        """A whole response: a JSON object that is one (``"object": "response"``, or an ``output`` list)."""
        if body.get("object") == "response" or isinstance(body.get("output"), list):
            return self.map_completion(body)
        return None

    def map_completion(self, raw: Any) -> ModelResponse:
        """Map a whole response (its JSON dict, or the SDK's ``Response``) to a `ModelResponse`."""
        data = raw if isinstance(raw, dict) else raw.to_dict()
        return response_answer(data, functools.partial(self.stream_error, in_stream=False), self.provider)

    # ------------------------------------------------------------------ native compaction
    async def compact(self, request: ModelRequest) -> ModelResponse:
        """Compact a history on OpenAI's side (``/v1/responses/compact``; `Compaction.native`):
        the answer's `thinking_blocks` are the items the server returned (the user's messages and
        an encrypted ``compaction`` item), which later requests send, as they came, in place of
        that history; its usage is the compaction's."""
        try:
            return await self._compacted(request)
        except ModelError as error:
            scrub_error(self._api_key, error)
            raise

    async def _compacted(self, request: ModelRequest) -> ModelResponse:
        deadline = self._deadline()
        try:
            client = await self.client()
            instructions, items = input_items(request.messages, self.store)
            params: dict[str, Any] = {"model": self.model_name, "input": items}
            if instructions is not None:
                params["instructions"] = instructions
            raw = await within(deadline, lambda: client.responses.with_raw_response.compact(**params),
                               self.map_error)
        finally:
            deadline.close()
        response = raw.http_response  # the JSON as sent (the SDK's models would retype the user's items)
        data: Any = None
        with contextlib.suppress(ValueError):
            data = json.loads(response.content.decode("utf-8"))
        if not isinstance(data, dict):
            raise body_error(self, response.status_code, response.headers.get("content-type", ""),
                             response.content, streaming=False, expected="a compacted response")
        output = [dict(i) for i in data.get("output") or () if isinstance(i, dict)]
        if not any(i.get("type") == "compaction" for i in output):
            raise ModelResponseError(f"/v1/responses/compact answered no compaction item ({len(output)} items)",
                                     provider=self.provider)
        return ModelResponse(AssistantMessage(thinking_blocks=output), response_counts(data.get("usage")),
                             data.get("model") or None, data.get("id") or None)
