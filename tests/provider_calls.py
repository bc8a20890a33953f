"""One model call through `OpenAIModel` against the replay server, for the provider's fault tests.

Shared by tests/test_openai_bad_bodies.py and tests/test_openai_deadline.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nbagent import exceptions
from nbagent.messages import UserMessage
from nbagent.models.base import ModelRequest
from nbagent.models.openai import OpenAIModel

KEY = "sk-proj-SECRET-0123456789abcdefghijklmnop"
GUARD = 15.0
"""Seconds after which a test gives up on a call that should have ended long before."""


def model_at(url: str, **kwargs: Any) -> OpenAIModel:
    return OpenAIModel("gpt-4o-mini", base_url=url, api_key=KEY, **kwargs)


def request() -> ModelRequest:
    return ModelRequest([UserMessage("hi")])


async def call(model: OpenAIModel, stream: bool) -> list[Any]:
    """The items of one model call (the answer last), within GUARD seconds."""

    async def run() -> list[Any]:
        if not stream:
            return [await model.request(request())]
        return [item async for item in model.request_stream(request())]

    try:
        return await asyncio.wait_for(run(), GUARD)
    finally:
        await model.aclose()


async def failure(model: OpenAIModel, stream: bool) -> BaseException:
    try:
        items = await call(model, stream)
    except exceptions.ModelError as exc:
        return exc
    raise AssertionError(f"the call completed: {items[-1]!r}")
