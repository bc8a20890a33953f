"""Structured output: ``Agent(output_type=...)``, answered through the ``final_result`` tool."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from nbagent import Agent, tool
from nbagent.exceptions import DuplicateToolError, ModelResponseError, ToolDefinitionError, UserError
from nbagent.models import FunctionModel, ScriptedModel, TestModel, tool_call
from nbagent.output import OUTPUT_TOOL, OutputSpec
from nbagent.store import MemoryStore, SQLiteStore
from tests.helpers import assert_valid_history


class City(BaseModel):
    """A city and its population."""

    name: str
    population: int = Field(description="people living there")


@dataclasses.dataclass
class Point:
    x: float
    y: float


looked_up: list[str] = []


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    looked_up.append(city)
    return f"{city}: 2.1 million people"


@tool(requires_approval=True)
def delete_everything() -> str:
    """Dangerous."""
    raise AssertionError("must never run")


# ---------------------------------------------------------------------------- the answer
async def test_a_pydantic_model_answer_after_tools() -> None:
    looked_up.clear()
    model = TestModel(args={OUTPUT_TOOL: {"name": "Paris", "population": 2_100_000}})
    agent = Agent(model, tools=[lookup], output_type=City, store=MemoryStore())
    result = await agent.run("How many people live in Paris?")
    assert result.status == "completed"
    assert result.output == City(name="Paris", population=2_100_000)
    assert looked_up == ["a"]  # the tool ran first (TestModel's generated argument)
    assert_valid_history(result.messages)  # the final_result call has its result: the thread goes on
    assert "City(name='Paris'" in repr(result)
    # the model was offered the output tool, with the model's schema as its parameters, and had to call a tool
    request = model.requests[-1]
    definition = next(t for t in request.tools if t["name"] == OUTPUT_TOOL)
    assert definition["parameters"]["required"] == ["name", "population"]
    assert definition["parameters"]["properties"]["population"]["description"] == "people living there"
    assert request.settings["tool_choice"] == "required" and request.output_tool == OUTPUT_TOOL
    again = await agent.run("And Oslo?", thread=result.thread)
    assert again.status == "completed" and isinstance(again.output, City)


@pytest.mark.parametrize(("output_type", "args", "expected"), [
    (list[int], {"result": [1, 2, 3]}, [1, 2, 3]),
    (Literal["yes", "no"], {"result": "no"}, "no"),
    (Point, {"result": {"x": 1, "y": 2.5}}, Point(1.0, 2.5)),
    (str, {"result": "plain"}, "plain"),
])
async def test_other_types_are_wrapped_as_result(output_type: Any, args: dict[str, Any], expected: Any) -> None:
    agent = Agent(ScriptedModel([tool_call(OUTPUT_TOOL, **args)]), output_type=output_type, store=MemoryStore())
    result = await agent.run("go")
    assert result.output == expected


async def test_invalid_arguments_go_back_to_the_model() -> None:
    model = ScriptedModel([
        tool_call(OUTPUT_TOOL, name="Oslo"),                      # population missing
        tool_call(OUTPUT_TOOL, name="Oslo", population="many"),   # not an int
        tool_call(OUTPUT_TOOL, name="Oslo", population=717_710),
    ])
    result = await Agent(model, output_type=City, store=MemoryStore()).run("Oslo?")
    assert result.output == City(name="Oslo", population=717_710) and result.steps == 3
    errors = [m.content for m in result.messages if m.kind == "tool-result" and m.is_error]
    assert "population: Field required; fix the answer and call final_result again" in errors[0]
    assert "population: Input should be a valid integer" in errors[1]


async def test_a_json_text_answer_is_accepted() -> None:
    model = ScriptedModel(['```json\n{"name": "Rome", "population": 2800000}\n```'])
    result = await Agent(model, output_type=City, store=MemoryStore()).run("Rome?")
    assert result.output == City(name="Rome", population=2_800_000)
    wrapped = await Agent(ScriptedModel(["[4, 5]"]), output_type=list[int], store=MemoryStore()).run("?")
    assert wrapped.output == [4, 5]
    text = await Agent(ScriptedModel(["Just text."]), output_type=str, store=MemoryStore()).run("?")
    assert text.output == "Just text."


async def test_text_that_does_not_fit_is_sent_back_then_fails_clearly() -> None:
    model = ScriptedModel(["It is big.", '{"name": "Lima"}', "Still text."])
    agent = Agent(model, output_type=City, output_retries=2, store=MemoryStore())
    result = await agent.run("Lima?")
    assert result.status == "failed" and result.output is None and result.steps == 3
    assert isinstance(result.exception, ModelResponseError)
    assert "answered in text 3 time(s) instead of calling final_result with a City answer" in result.error
    prompts = [m.content for m in result.messages if m.kind == "user"][1:]
    assert len(prompts) == 2 and all(p.startswith("[nbagent] Your answer must be given by calling") for p in prompts)
    assert "the text is not a City as JSON" in prompts[0] and "population: Field required" in prompts[1]
    # a later run on the thread can still succeed
    agent.model = ScriptedModel([tool_call(OUTPUT_TOOL, name="Lima", population=10_000_000)])
    assert (await agent.run("Try again", thread=result.thread)).output.population == 10_000_000


async def test_calls_beside_the_final_answer_are_not_run() -> None:
    looked_up.clear()
    answer = [tool_call("lookup", city="Paris"), tool_call("delete_everything"),
              tool_call(OUTPUT_TOOL, name="Paris", population=1), tool_call(OUTPUT_TOOL, name="Nice", population=2)]
    agent = Agent(ScriptedModel([answer]), tools=[lookup, delete_everything], output_type=City, store=MemoryStore())
    result = await agent.run("go")
    assert result.status == "completed" and result.pending == []  # no pause for the dangerous call
    assert result.output == City(name="Paris", population=1)  # the first valid one
    assert looked_up == []
    results = {m.call_id: m for m in result.messages if m.kind == "tool-result"}
    statuses = [results[c.id].status for c in result.messages[1].tool_calls]
    assert statuses == ["cancelled", "cancelled", "done", "cancelled"]
    assert_valid_history(result.messages)


async def test_streaming_ends_with_the_structured_answer() -> None:
    agent = Agent(ScriptedModel([tool_call(OUTPUT_TOOL, name="Bern", population=134_000)]),
                  output_type=City, store=MemoryStore())
    events = [e async for e in agent.stream("Bern?")]
    kinds = [e.kind for e in events]
    assert kinds[-1] == "run-completed" and events[-1].result.output == City(name="Bern", population=134_000)
    assert "tool-call-started" not in kinds  # nothing ran; the final_result call is answered at once
    assert "tool-call-finished" in kinds


def test_run_sync_and_a_user_tool_choice_is_kept() -> None:
    model = ScriptedModel([tool_call(OUTPUT_TOOL, result=7)])
    agent = Agent(model, output_type=int, settings={"tool_choice": "auto"}, store=MemoryStore())
    assert agent.run_sync("7?").output == 7
    assert model.requests[-1].settings["tool_choice"] == "auto"


# ---------------------------------------------------------------------------- storage
async def test_the_answer_is_stored_as_json_and_rebuilt(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "threads.db")
    agent = Agent(ScriptedModel([tool_call(OUTPUT_TOOL, name="Kyiv", population=2_952_301)]),
                  output_type=City, store=store)
    result = await agent.run("Kyiv?", thread="kyiv")
    loaded = await store.load("kyiv")
    assert loaded is not None and loaded.meta.output == {"name": "Kyiv", "population": 2_952_301}
    assert agent.output is not None and agent.output.load(loaded.meta.output) == result.output
    await store.close()


async def test_batch_rows_hold_the_answers_and_a_rerun_rebuilds_them(tmp_path: Path) -> None:
    import pandas as pd

    def answer(messages: list[Any], request: Any) -> Any:
        name = messages[-1].content
        return tool_call(OUTPUT_TOOL, name=name, population=len(name))

    model = FunctionModel(answer)
    agent = Agent(model, output_type=City, store=SQLiteStore(tmp_path / "threads.db"))
    frame = agent.map(pd.Series(["Oslo", "Rome"]), progress=False)
    assert list(frame["output"]) == [City(name="Oslo", population=4), City(name="Rome", population=4)]
    calls = len(model.requests)
    again = agent.map(pd.Series(["Oslo", "Rome"]), progress=False)  # completed rows are not run again
    assert len(model.requests) == calls and list(again["output"]) == list(frame["output"])
    await agent.store.close()


# ---------------------------------------------------------------------------- bad definitions
def test_bad_output_definitions_fail_at_once() -> None:
    @tool
    def final_result(x: int) -> int:
        """Clashes."""
        return x

    with pytest.raises(DuplicateToolError, match="final_result"):
        Agent(TestModel(), tools=[final_result], output_type=City, store=MemoryStore())

    class Opaque:
        pass

    with pytest.raises(ToolDefinitionError, match="cannot be validated by pydantic"):
        Agent(TestModel(), output_type=Opaque, store=MemoryStore())
    with pytest.raises(UserError, match="output_retries"):
        Agent(TestModel(), output_type=City, output_retries=-1, store=MemoryStore())


def test_output_spec_schema_and_round_trip() -> None:
    spec = OutputSpec(list[Point])
    assert spec.tool.parameters["required"] == ["result"] and spec.type_name == "list[tests.test_core_output.Point]"
    value = spec.validate({"result": [{"x": 1, "y": 2}]})
    assert value == [Point(1.0, 2.0)] and spec.load(spec.dump(value)) == value


def test_output_frame_turns_answers_into_columns() -> None:
    import pandas as pd

    import nbagent

    frame = pd.DataFrame({"output": [City(name="Oslo", population=1), None, City(name="Rome", population=2)]},
                         index=["a", "b", "c"])
    columns = nbagent.output_frame(frame)
    assert list(columns.columns) == ["name", "population"] and list(columns.index) == ["a", "b", "c"]
    assert columns.loc["a", "name"] == "Oslo" and columns.loc["b"].isna().all()
    assert nbagent.output_frame([Point(1, 2)]).to_dict("records") == [{"x": 1, "y": 2}]
    assert nbagent.output_frame(pd.Series([3, 4])).to_dict("list") == {"output": [3, 4]}
    result = Agent(ScriptedModel([tool_call(OUTPUT_TOOL, name="Bern", population=3)]),
                   output_type=City, store=MemoryStore()).run_sync("Bern?")
    assert nbagent.output_frame([result]).loc[0, "name"] == "Bern"
    with pytest.raises(UserError, match="with an 'output' column"):
        nbagent.output_frame(pd.DataFrame({"x": [1]}))


def test_another_output_type_is_another_batch() -> None:
    from nbagent.dataframe import batch_thread_ids

    def ids(**kwargs: Any) -> list[str]:
        return batch_thread_ids(Agent(TestModel(), store=MemoryStore(), **kwargs), ["q"], [0])

    assert ids() == ids()  # text agents keep their ids
    assert ids(output_type=City) == ids(output_type=City)
    assert len({ids()[0], ids(output_type=City)[0], ids(output_type=Point)[0]}) == 3
