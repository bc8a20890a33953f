"""`OpenAIModel` itself: Chat Completions on the `OpenAISDKModel` base.

Owns the model's configuration beyond the base's (``send_reasoning``, ``tool_images``) and its
three parts for `HTTPModel`: the wire (`request_params`, `_wire`'s; ``chat.completions.create``
as the sends), the readers (`read_stream`: `_stream.stream_items` over the JSON object of each
chunk, read from the stream's bytes by the base's send; `read_answer`: a whole ``ChatCompletion``;
`body_events`: the chunks of event-stream text that came as one body) and the error table
(`OpenAIErrors`, through the base). The client per event loop, the deadline, the key's hygiene,
the streamed send and the answers in another shape than asked are the base's.

May import: ``openai``, nbagent's model base and the models' `_http`, and this package's
`_sdk_model`, `_wire`, `_stream`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

from openai import AsyncOpenAI

from .._deadline import DEFAULT_DEADLINE
from .._http import DEFAULT_TIMEOUT, Reading
from ..base import ModelRequest, ModelResponse, StreamItem
from ._sdk_model import OpenAISDKModel
from ._stream import StreamAssembler, chunks_of, completion_response, sdk_chunks, stream_items
from ._wire import WireCache, check_settings, request_params

__all__ = ["DEFAULT_DEADLINE", "DEFAULT_TIMEOUT", "OpenAIModel"]


class OpenAIModel(OpenAISDKModel):
    """A chat-completions model on any OpenAI-compatible server, via the official ``openai`` SDK.

    ```python
    model = OpenAIModel("gpt-4.1-mini")                               # OPENAI_API_KEY from the env
    model = OpenAIModel("llama3.1", base_url="http://localhost:11434/v1", provider="ollama")
    agent = Agent(model, tools=[get_weather], settings={"temperature": 0})
    ```

    Args:
        model_name: the model to ask for; default ``$OPENAI_MODEL``.
        base_url: the server's ``.../v1`` URL; default ``$OPENAI_BASE_URL``, else OpenAI's.
        api_key: default ``$OPENAI_API_KEY``; servers that need none get a placeholder when a
            `base_url` is given. Never shown in reprs, messages, events, usage rows or errors.
        provider: the name written to usage rows and used for prices (``"openai"``,
            ``"groq"``, ``"ollama"``...): what you configured, whatever the URL.
        settings: default settings (temperature, max_tokens, seed, stop, top_p, tool_choice,
            parallel_tool_calls, response_format, reasoning_effort, extra_body, ...); the
            agent's settings are merged over them (``extra_body`` / ``extra_headers`` dicts key
            by key). A ``tool_choice`` that is a tool's name forces that tool.
        timeout: seconds for each network operation (connect, each read); see also `deadline`.
        max_retries: the SDK's own retries; 0 because nbagent's run loop retries (and shows it).
        client: an ``openai.AsyncOpenAI`` to use as is (then `base_url`, `api_key`, `timeout`,
            `http_client` are ignored).
        http_client: an ``httpx2.AsyncClient`` for the SDK (proxies, custom TLS); it is bound to
            one event loop, so use the model from that loop only.
        send_reasoning: send an answer's reasoning text back as ``reasoning_content`` (what
            DeepSeek needs between tool calls); only answers from servers that return reasoning
            text have any.
        tool_images: send images tools return in a user message after the answer's tool results
            (``tool`` messages take text only; they say the images follow). False for a text-only
            model (`local_model`): it reads only the tool's text.
        deadline: seconds for a whole model call, from sending the request to the stream's last
            chunk (``None``: no limit; default `DEFAULT_DEADLINE`, 600). Unlike `timeout`, it
            ends a stream kept alive by keep-alive comments or empty deltas. A call past it fails
            with a retried `ModelTimeoutError`; each retry has a deadline of its own. It counts
            the time the consumer spends between deltas too, but it never interrupts the
            consumer: the stream fails at its next read.
        context_window: the model's context window in tokens, for a model genai-prices does not
            know or a server that serves less of it (`Model.context_window`; default: genai-prices'
            figure for `model_name` at `provider`, None when unknown).
        sdk_stream: read a streamed answer as the ``openai`` SDK's parsed chunks instead of
            reading the stream's bytes (the default; the SDK still sends the request). The same
            answers, at about 100 µs of the kernel's CPU a delta instead of ~10: for a server whose
            stream nbagent's reader refuses and the SDK's accepts.

    One SDK client is made per event loop and reused, so the same model works from
    ``agent.run_sync`` (nbagent's background loop) and from ``await agent.run`` in one notebook.
    """

    expected = "a chat completion"
    _per_process = (*OpenAISDKModel._per_process, "_wire")

    def __init__(
        self,
        model_name: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        provider: str = "openai",
        settings: Mapping[str, Any] | None = None,
        timeout: float | Any = DEFAULT_TIMEOUT,
        max_retries: int = 0,
        client: AsyncOpenAI | None = None,
        http_client: Any = None,
        send_reasoning: bool = True,
        deadline: float | None = DEFAULT_DEADLINE,
        tool_images: bool = True,
        context_window: int | None = None,
        sdk_stream: bool = False,
    ) -> None:
        self.send_reasoning = send_reasoning
        self.sdk_stream = bool(sdk_stream)
        self.tool_images = tool_images
        super().__init__(
            model_name, provider=provider, base_url=base_url, api_key=api_key, settings=settings, timeout=timeout,
            max_retries=max_retries, deadline=deadline, client=client, http_client=http_client,
            context_window=context_window,
        )

    def _check_settings(self, settings: Mapping[str, Any]) -> None:
        """Raise `UserError` for a setting the SDK's create call does not take."""
        check_settings(settings)

    def _init_clients(self) -> None:
        super()._init_clients()
        self._wire = WireCache()

    # ------------------------------------------------------------------ the wire
    def request_params(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        """The keyword arguments for ``chat.completions.create`` (without the key)."""
        return request_params(
            request, model_name=self.model_name, settings=self.settings, cache=self._wire,
            send_reasoning=self.send_reasoning, stream=stream, tool_images=self.tool_images,
        )

    def _resource(self, client: AsyncOpenAI) -> Any:
        return client.chat.completions

    def batch_wire(self) -> Any:
        """OpenAI's Batch API for chat completions (``agent.map(..., batch_api=True)``)."""
        from ._batch import OpenAIBatchWire

        return OpenAIBatchWire(self, "/v1/chat/completions")

    def _sdk_events(self, stream: AsyncIterator[Any]) -> AsyncIterator[dict[str, Any]]:
        """The SDK's parsed chunks as their dicts (`sdk_stream`)."""
        return sdk_chunks(stream)

    # ------------------------------------------------------------------ the readers
    def read_stream(self, events: AsyncIterator[Any], reading: Reading) -> AsyncGenerator[StreamItem, None]:
        """`_stream.stream_items` over the JSON objects of the stream's chunks."""
        state = StreamAssembler(reading.provider)
        state.request_id = reading.request_id
        return stream_items(events, state, reading.fail, reading.empty)

    def read_answer(self, body: dict[str, Any], reading: Reading) -> ModelResponse | None:
        """A whole ``ChatCompletion`` (a JSON object with ``choices``)."""
        return self.map_completion(body) if isinstance(body.get("choices"), list) else None

    def body_events(self, data: list[str]) -> list[Any] | None:
        return chunks_of(data)

    def map_completion(self, raw: Any) -> ModelResponse:
        """Map a ``ChatCompletion`` (or its JSON object) to a `ModelResponse` (choice 0 when there are several)."""
        if isinstance(raw, dict):
            from openai.types.chat import ChatCompletion

            raw = ChatCompletion.construct(**raw)
        return completion_response(raw)
