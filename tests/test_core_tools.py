"""Tools: definition-time errors, schemas from signatures and docstrings, sync and async bodies,
concurrency and ordering, error results the model sees, ModelRetry, and tools that change state.

Bad input is refused when the tool is defined. Only the shipped fakes and `MemoryStore` are used.
"""

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel, Field

from nbagent import (
    Agent,
    AssistantMessage,
    ModelRetry,
    RunContext,
    Tool,
    ToolCall,
    ToolDefinitionError,
    tool,
)
from nbagent.exceptions import DuplicateToolError, ServerError
from nbagent.models import FunctionModel, ScriptedModel, TestModel, tool_call
from nbagent.store import MemoryStore
from tests.helpers import assert_valid_history, shape


# ---------------------------------------------------------------------- definition time
def test_unannotated_parameter_is_a_definition_error() -> None:
    def lookup(order_id):  # type: ignore[no-untyped-def]
        """Look up an order."""

    with pytest.raises(ToolDefinitionError, match=r"'order_id' has no type annotation"):
        tool(lookup)


def test_var_args_are_a_definition_error() -> None:
    def many(*items: str) -> str:
        """Many."""
        return ""

    def kw(**options: str) -> str:
        """Options."""
        return ""

    with pytest.raises(ToolDefinitionError, match=r"\*items"):
        tool(many)
    with pytest.raises(ToolDefinitionError, match=r"\*\*options|\*options"):
        tool(kw)


def test_duplicate_tool_names_are_rejected() -> None:
    def lookup(order_id: str) -> str:
        """One."""
        return ""

    other = Tool.client("lookup", "The same name on a client tool.")
    with pytest.raises(DuplicateToolError, match="'lookup'"):
        Agent(TestModel(), tools=[lookup, other], store=MemoryStore())
    assert issubclass(DuplicateToolError, ToolDefinitionError)


def test_lambda_needs_a_name() -> None:
    with pytest.raises(ToolDefinitionError, match="name="):
        tool(lambda x: x)


def test_client_tool_with_a_body_is_rejected() -> None:
    def body() -> str:
        return ""

    with pytest.raises(ToolDefinitionError, match="no body"):
        Tool.client("ask_user", "Ask the person.", function=body)


def test_client_tool_params_must_be_pydantic_or_schema() -> None:
    @dataclass
    class NotPydantic:
        question: str

    with pytest.raises(ToolDefinitionError, match="pydantic model class or a JSON schema"):
        Tool.client("ask_user", "Ask the person.", params=NotPydantic)
    with pytest.raises(ToolDefinitionError):
        Tool.client("ask_user", "Ask the person.", params=42)

    class Ask(BaseModel):
        question: str

    by_model = Tool.client("ask_user", "Ask the person.", params=Ask)
    assert by_model.is_client
    assert by_model.parameters["required"] == ["question"]
    raw = {"type": "object", "properties": {"q": {"type": "string"}}}
    assert Tool.client("ask", "Ask.", params=raw).parameters == raw
    assert Tool.client("ping", "Ping.").parameters == {"type": "object", "properties": {}}


def test_invalid_tool_name_is_rejected() -> None:
    with pytest.raises(ToolDefinitionError, match="1-64 letters"):
        Tool.client("has space", "x")


# ---------------------------------------------------------------------- schemas
def test_google_docstring_becomes_description_and_parameter_docs() -> None:
    @tool
    def get_weather(city: str, days: int = 1) -> str:
        """Current weather for a city.

        Args:
            city: The city name, e.g. "Paris".
                Use the English spelling.
            days (int): How many days to forecast.

        Returns:
            A short sentence.
        """
        return ""

    assert get_weather.description == "Current weather for a city."
    props = get_weather.parameters["properties"]
    assert props["city"] == {
        "type": "string",
        "description": 'The city name, e.g. "Paris". Use the English spelling.',
    }
    assert props["days"]["description"] == "How many days to forecast."
    assert props["days"]["default"] == 1
    assert get_weather.parameters["required"] == ["city"]
    assert get_weather.definition()["name"] == "get_weather"


def test_sphinx_docstring_becomes_parameter_docs() -> None:
    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund an order.

        :param order_id: The order to refund.
        :param float amount: How much, in euros.
        :returns: a confirmation.
        """
        return ""

    assert refund.description == "Refund an order."
    props = refund.parameters["properties"]
    assert props["order_id"]["description"] == "The order to refund."
    assert props["amount"]["description"] == "How much, in euros."
    assert props["amount"]["type"] == "number"


def test_explicit_name_and_description_win() -> None:
    @tool(name="weather", description="Weather now.")
    def get_weather(city: str) -> str:
        """Docstring text."""
        return city

    assert (get_weather.name, get_weather.description) == ("weather", "Weather now.")
    assert get_weather("Paris") == "Paris"  # a Tool stays callable


class Order(BaseModel):
    order_id: str = Field(description="The order id.")
    amount: float = Field(gt=0)


async def test_single_pydantic_model_parameter() -> None:
    seen: list[Order] = []

    @tool
    def place(order: Order) -> str:
        """Place an order."""
        seen.append(order)
        return f"placed {order.order_id}"

    assert place.parameters["properties"]["order_id"]["description"] == "The order id."
    assert set(place.parameters["required"]) == {"order_id", "amount"}
    model = ScriptedModel([tool_call("place", order_id="7", amount=2.5), "ok"])
    result = await Agent(model, tools=[place], store=MemoryStore()).run("go")
    assert result.status == "completed"
    assert seen == [Order(order_id="7", amount=2.5)]
    assert shape(result.messages)[2] == ("tool-result", "place", "placed 7", False)


async def test_sync_and_async_tools_both_work() -> None:
    @tool
    def plain(x: int) -> int:
        """Sync."""
        return x * 2

    @tool
    async def coro(x: int) -> dict[str, int]:
        """Async."""
        await asyncio.sleep(0)
        return {"x": x + 1}

    assert not plain.is_async and coro.is_async
    model = ScriptedModel([[tool_call("plain", x=2), tool_call("coro", x=2)], "done"])
    result = await Agent(model, tools=[plain, coro], store=MemoryStore()).run("go")
    results = {m.name: m.content for m in result.messages if m.kind == "tool-result"}
    assert results == {"plain": "4", "coro": '{"x": 3}'}
    assert result.output == "done"


def test_plain_functions_are_wrapped_by_the_agent() -> None:
    def get_time(zone: str) -> str:
        """The time in a zone."""
        return "noon"

    agent = Agent(TestModel(), tools=[get_time], store=MemoryStore())
    assert agent.tool_definitions == [
        {
            "name": "get_time",
            "description": "The time in a zone.",
            "parameters": {
                "type": "object",
                "properties": {"zone": {"type": "string"}},
                "required": ["zone"],
                "additionalProperties": False,
            },
        }
    ]
    assert agent.run_sync("time?").output == '{"get_time": "noon"}'


# ---------------------------------------------------------------------- concurrency
async def test_async_tools_of_one_answer_run_concurrently() -> None:
    spans: dict[str, tuple[float, float]] = {}

    def make(name: str) -> Tool:
        async def body(x: int) -> str:
            start = time.perf_counter()
            await asyncio.sleep(0.2)
            spans[name] = (start, time.perf_counter())
            return name

        return Tool.from_function(body, name=name, description=name)

    agent = Agent(TestModel(text="done"), tools=[make("a"), make("b")], store=MemoryStore())
    result = await agent.run("go")
    assert result.status == "completed"
    (a0, a1), (b0, b1) = spans["a"], spans["b"]
    assert b0 < a1 and a0 < b1, "the two calls did not overlap"


@pytest.mark.perf
async def test_two_concurrent_tools_take_about_as_long_as_one() -> None:
    async def body(x: int) -> str:
        await asyncio.sleep(0.2)
        return "ok"

    tools = [Tool.from_function(body, name=n, description=n) for n in ("a", "b")]
    clock = time.perf_counter()
    result = await Agent(TestModel(text="done"), tools=tools, store=MemoryStore()).run("go")
    total = time.perf_counter() - clock
    assert result.status == "completed"
    assert total < 0.35, f"two 0.2 s tools took {total:.3f} s together"


async def test_sync_tools_do_not_block_the_event_loop() -> None:
    ticks: list[float] = []
    sync_span: list[float] = []

    @tool
    def blocking(seconds: float) -> str:
        """Sleeps in a worker thread."""
        sync_span.append(time.perf_counter())
        time.sleep(seconds)
        sync_span.append(time.perf_counter())
        return f"slept in {threading.current_thread().name}"

    @tool
    async def ticker(n: int) -> int:
        """Ticks on the event loop."""
        for _ in range(n):
            await asyncio.sleep(0.02)
            ticks.append(time.perf_counter())
        return len(ticks)

    model = ScriptedModel([[tool_call("blocking", seconds=0.3), tool_call("ticker", n=20)], "ok"])
    result = await Agent(model, tools=[blocking, ticker], store=MemoryStore()).run("go")
    assert result.status == "completed"
    start, end = sync_span
    during = [t for t in ticks if start < t < end]
    assert len(during) >= 5, f"only {len(during)} ticks while the sync tool slept: the loop was blocked"
    loop_thread = threading.current_thread().name
    blocking_result = next(m for m in result.messages if m.kind == "tool-result" and m.name == "blocking")
    assert loop_thread not in blocking_result.content


async def test_sync_tools_run_concurrently_with_each_other() -> None:
    both_running = threading.Barrier(2, timeout=10)  # passes only when the two calls run at once

    @tool
    def nap(seconds: float) -> str:
        """Sleep."""
        both_running.wait()
        time.sleep(seconds)
        return "ok"

    model = ScriptedModel([[tool_call("nap", seconds=0.01), tool_call("nap", seconds=0.01)], "ok"])
    result = await Agent(model, tools=[nap], store=MemoryStore()).run("go")
    assert result.status == "completed"
    assert [m.is_error for m in result.messages if m.kind == "tool-result"] == [False, False]


def _ordered_tools(log: list[str]) -> list[Tool]:
    def make(name: str, delay: float) -> Tool:
        async def body() -> str:
            log.append(f"start {name}")
            await asyncio.sleep(delay)
            log.append(f"end {name}")
            return name

        return Tool.from_function(body, name=name, description=name)

    return [make("slow", 0.1), make("medium", 0.05), make("fast", 0.0)]


async def test_tools_in_order_runs_calls_one_after_the_other_in_model_order() -> None:
    log: list[str] = []
    answer = [tool_call("slow"), tool_call("medium"), tool_call("fast")]
    agent = Agent(ScriptedModel([answer, "ok"]), tools=_ordered_tools(log), tools_in_order=True,
                  store=MemoryStore())
    result = await agent.run("go")
    assert log == ["start slow", "end slow", "start medium", "end medium", "start fast", "end fast"]
    assert [m.name for m in result.messages if m.kind == "tool-result"] == ["slow", "medium", "fast"]
    assert_valid_history(result.messages)


async def test_default_runs_calls_concurrently_and_records_in_finish_order() -> None:
    log: list[str] = []
    answer = [tool_call("slow"), tool_call("medium"), tool_call("fast")]
    agent = Agent(ScriptedModel([answer, "ok"]), tools=_ordered_tools(log), store=MemoryStore())
    result = await agent.run("go")
    assert log[:3] == ["start slow", "start medium", "start fast"]
    assert [m.name for m in result.messages if m.kind == "tool-result"] == ["fast", "medium", "slow"]
    assert_valid_history(result.messages)


# ---------------------------------------------------------------------- errors the model sees
async def test_tool_errors_become_results_the_model_sees_and_the_run_goes_on() -> None:
    @tool
    def get_weather(city: str) -> str:
        """Weather."""
        if city == "Atlantis":
            raise ValueError("no such city")
        return f"Sunny in {city}"

    answer = [
        tool_call("get_weather", city="Atlantis", id="c1"),  # raises
        ToolCall("c2", "get_weather", '{"city": "Par'),  # not JSON
        tool_call("get_weather", town="Paris", id="c3"),  # does not fit the schema
        tool_call("get_weather", city=5, id="c4"),  # wrong type
        tool_call("teleport", to="Mars", id="c5"),  # unknown tool
        tool_call("get_weather", city="Paris", id="c6"),  # fine
    ]
    model = ScriptedModel([answer, "Paris is sunny."])
    agent = Agent(model, tools=[get_weather], store=MemoryStore())
    result = await agent.run("Weather?")

    assert result.status == "completed"
    assert result.output == "Paris is sunny."
    by_id = {m.call_id: m for m in result.messages if m.kind == "tool-result"}
    assert by_id["c1"].content == "ValueError: no such city"
    assert by_id["c2"].content.startswith("invalid arguments: not a JSON object")
    assert "JSON object matching the tool's schema" in by_id["c2"].content
    assert "city: Field required" in by_id["c3"].content
    assert "town: Extra inputs are not permitted" in by_id["c3"].content
    assert "fix the arguments and call get_weather again" in by_id["c3"].content
    assert by_id["c4"].content.startswith("invalid arguments: city:")
    assert by_id["c5"].content == "unknown tool 'teleport'; available tools: get_weather"
    assert by_id["c6"].content == "Sunny in Paris"
    assert [by_id[c].is_error for c in ("c1", "c2", "c3", "c4", "c5", "c6")] == [True] * 5 + [False]
    assert all(by_id[c].status == "failed" for c in ("c1", "c2", "c3", "c4", "c5"))
    # The model's second request carries all six results.
    second = model.requests[1].messages
    assert {m.call_id for m in second if m.kind == "tool-result"} == {f"c{i}" for i in range(1, 7)}
    assert_valid_history(result.messages)


async def test_model_retry_sends_the_message_back_and_the_model_tries_again() -> None:
    calls: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Weather."""
        calls.append(city)
        if city != city.title():
            raise ModelRetry("write the city name capitalised, e.g. 'Paris'")
        return f"Sunny in {city}"

    def answer(messages: list[Any], request: Any) -> Any:
        last = messages[-1]
        if last.kind == "user":
            return tool_call("get_weather", city="paris")
        if last.is_error:
            return tool_call("get_weather", city="Paris")
        return last.content

    result = await Agent(FunctionModel(answer), tools=[get_weather], store=MemoryStore()).run("Weather?")
    assert result.status == "completed"
    assert calls == ["paris", "Paris"]
    assert shape(result.messages) == [
        ("user", "Weather?"),
        ("assistant", None, [("get_weather", {"city": "paris"})]),
        ("tool-result", "get_weather", "write the city name capitalised, e.g. 'Paris'", True),
        ("assistant", None, [("get_weather", {"city": "Paris"})]),
        ("tool-result", "get_weather", "Sunny in Paris", False),
        ("assistant", "Sunny in Paris", []),
    ]


async def test_tools_are_never_retried_by_the_loop() -> None:
    runs: list[int] = []

    @tool
    def flaky() -> str:
        """Fails like a server would."""
        runs.append(1)
        raise ServerError("upstream down", status_code=503)

    model = ScriptedModel([tool_call("flaky"), "gave up"])
    result = await Agent(model, tools=[flaky], store=MemoryStore()).run("go")
    assert runs == [1]
    assert result.status == "completed"
    err = next(m for m in result.messages if m.kind == "tool-result")
    assert err.is_error and "503 upstream down" in err.content


async def test_tool_return_values_are_shown_as_json_or_text() -> None:
    @tool
    def data() -> dict[str, Any]:
        """Data."""
        return {"a": [1, 2], "b": None}

    @tool
    def order() -> Order:
        """A pydantic object."""
        return Order(order_id="1", amount=3.0)

    @tool
    def odd() -> Any:
        """Not JSON."""
        return {1, 2}

    model = ScriptedModel([[tool_call("data"), tool_call("order"), tool_call("odd")], "ok"])
    result = await Agent(model, tools=[data, order, odd], store=MemoryStore(), tools_in_order=True).run("go")
    contents = [m.content for m in result.messages if m.kind == "tool-result"]
    assert contents[0] == '{"a": [1, 2], "b": null}'
    assert contents[1] == '{"order_id":"1","amount":3.0}'
    assert contents[2] in ("[1,2]", "[2,1]")


# ---------------------------------------------------------------------- state
@dataclass
class Cart:
    items: list[str] = field(default_factory=list)
    total: float = 0.0


@tool
async def add_item(name: str, price: float, ctx: RunContext[Cart]) -> str:
    """Add an item to the cart."""
    # Earlier calls wait longer: if these ran concurrently, they would finish out of order.
    await asyncio.sleep(0.03 * (3 - len(ctx.state.items)))
    ctx.state.items.append(name)
    ctx.state.total += price
    return f"{len(ctx.state.items)} items, total {ctx.state.total:g}"


@tool
def checkout(context: RunContext[Cart]) -> str:
    """Pay for the cart (a ctx parameter under another name)."""
    return f"paid {context.state.total:g} for {', '.join(context.state.items)}"


async def test_state_tools_run_in_order_each_seeing_the_previous_change() -> None:
    assert add_item.sequential and checkout.sequential
    answer = [
        tool_call("add_item", name="tea", price=2),
        tool_call("add_item", name="cake", price=3.5),
        tool_call("add_item", name="jam", price=4),
        tool_call("checkout"),
    ]
    cart = Cart()
    agent = Agent(ScriptedModel([answer, "bought"]), tools=[add_item, checkout], store=MemoryStore())
    result = await agent.run("shop", state=cart)
    assert result.state is cart
    assert cart == Cart(["tea", "cake", "jam"], 9.5)
    assert [m.content for m in result.messages if m.kind == "tool-result"] == [
        "1 items, total 2",
        "2 items, total 5.5",
        "3 items, total 9.5",
        "paid 9.5 for tea, cake, jam",
    ]


async def test_run_context_carries_run_details() -> None:
    seen: list[RunContext[Any]] = []

    @tool
    def inspect_ctx(ctx: RunContext[dict[str, int]]) -> str:
        """Look at the context."""
        seen.append(ctx)
        ctx.state["n"] += 1
        return "ok"

    model = ScriptedModel([tool_call("inspect_ctx", id="call_x"), "done"])
    state = {"n": 0}
    result = await Agent(model, tools=[inspect_ctx], store=MemoryStore()).run("go", thread="t1", state=state)
    (ctx,) = seen
    assert (ctx.run_id, ctx.thread, ctx.call_id, ctx.step) == (result.run_id, "t1", "call_x", 1)
    assert ctx.messages[0].content == "go"
    assert "ctx" not in inspect_ctx.parameters["properties"]
    assert result.state == {"n": 1}


@pytest.mark.parametrize("siblings", [0, 1], ids=["alone", "with-a-sibling"])
async def test_a_tool_raising_cancelled_error_itself_is_an_error_result(siblings: int) -> None:
    """E.g. a tool awaiting a future someone else cancelled: neither a hang nor an aborted run."""

    @tool
    async def fetch() -> str:
        """Awaits work that another component cancels."""
        work = asyncio.get_running_loop().create_future()
        work.cancel()
        return await work

    @tool
    def other() -> str:
        """Fine."""
        return "fine"

    answer = [tool_call("fetch"), *[tool_call("other") for _ in range(siblings)]]
    agent = Agent(ScriptedModel([answer, "done"]), tools=[fetch, other], store=MemoryStore())
    result = await asyncio.wait_for(agent.run("go"), 10)
    assert result.status == "completed"
    failed = next(m for m in result.messages if m.kind == "tool-result" and m.name == "fetch")
    assert failed.is_error and failed.content.startswith("CancelledError")
    assert_valid_history(result.messages)


async def test_missing_and_repeated_call_ids_get_fresh_ones() -> None:
    @tool
    def echo(x: int = 0) -> int:
        """Echo."""
        return x

    calls = [ToolCall("same", "echo", '{"x": 1}'), ToolCall("same", "echo", '{"x": 2}'),
             ToolCall("", "echo", '{"x": 3}')]
    answer = AssistantMessage(tool_calls=calls)
    result = await Agent(ScriptedModel([answer, "done"]), tools=[echo], store=MemoryStore()).run("go")
    ids = [c.id for c in result.messages[1].tool_calls]
    assert ids[0] == "same" and len(set(ids)) == 3 and all(ids)
    by_id = {m.call_id: m.content for m in result.messages if m.kind == "tool-result"}
    assert [by_id[i] for i in ids] == ["1", "2", "3"]
    assert_valid_history(result.messages)
