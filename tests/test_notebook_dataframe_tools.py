"""`nbagent.notebook.dataframe_tools`: each tool's answer is the pandas expression's, bad arguments
come back to the model as error results naming what is valid, and an agent can use them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from nbagent import Agent
from nbagent.exceptions import ModelRetry, ToolDefinitionError
from nbagent.models import FunctionModel, tool_call
from nbagent.notebook import dataframe_tools
from nbagent.notebook._dataframe_tools import AGGREGATIONS, MAX_GROUPS, OPERATORS, FrameAnswer

NAMES = ["describe", "head", "filter", "groupby_agg", "value_counts", "sort_top"]


@pytest.fixture
def df() -> pd.DataFrame:
    return pd.DataFrame({
        "city": ["Paris", "Lyon", None, "Paris", "Nice", "lyon"],
        "units": [3, 5, 2, 7, 1, 5],
        "price": [10.5, 3.0, 7.25, None, 12.0, 4.5],
        "day": pd.to_datetime(["2026-01-01", "2026-01-02", "2026-01-02", "2026-01-05", "2026-02-01",
                               "2026-02-03"]),
    })


def _tools(df: pd.DataFrame, name: str = "sales") -> dict[str, Any]:
    return {t.name: t for t in dataframe_tools(df, name=name)}


def _filter(df: pd.DataFrame, *conditions: dict[str, Any], limit: int = 50) -> pd.DataFrame:
    answer = _tools(df)["sales_filter"](conditions=list(conditions), limit=limit)
    assert isinstance(answer, FrameAnswer)
    return answer.frame


# ---------------------------------------------------------------------- each tool equals pandas
def test_describe_and_head_equal_pandas(df: pd.DataFrame) -> None:
    tools = _tools(df)
    assert_frame_equal(tools["sales_describe"]().frame, df.describe(include="all"))
    answer = tools["sales_describe"](columns=["units", "city"])
    assert_frame_equal(answer.frame, df[["units", "city"]].describe(include="all"))
    assert answer.note.startswith("sales: 6 rows x 4 columns; dtypes: units int64, city ")
    assert_frame_equal(tools["sales_head"]().frame, df.head(5))
    assert_frame_equal(tools["sales_head"](n=2).frame, df.head(2))


@pytest.mark.parametrize(("op", "value", "expected"), [
    ("==", "Paris", lambda d: d[d.city == "Paris"]),
    ("!=", "Paris", lambda d: d[(d.city != "Paris") & d.city.notna()]),  # a missing value matches only isnull
    ("in", ["Lyon", "Nice"], lambda d: d[d.city.isin(["Lyon", "Nice"])]),
    ("contains", "YON", lambda d: d[d.city.str.contains("yon", case=False, regex=False).fillna(False).astype(bool)]),
    ("isnull", None, lambda d: d[d.city.isnull()]),
    ("notnull", None, lambda d: d[d.city.notnull()]),
])
def test_filter_on_text_equals_pandas(df: pd.DataFrame, op: str, value: Any, expected: Any) -> None:
    assert_frame_equal(_filter(df, {"column": "city", "op": op, "value": value}), expected(df))


@pytest.mark.parametrize(("op", "value", "expected"), [
    ("<", 3, lambda d: d[d.units < 3]),
    ("<=", 3, lambda d: d[d.units <= 3]),
    (">", 3, lambda d: d[d.units > 3]),
    (">=", "5", lambda d: d[d.units >= 5]),  # a number sent as text compares as a number
    ("in", [5, 1], lambda d: d[d.units.isin([5, 1])]),
])
def test_filter_on_numbers_equals_pandas(df: pd.DataFrame, op: str, value: Any, expected: Any) -> None:
    assert_frame_equal(_filter(df, {"column": "units", "op": op, "value": value}), expected(df))


def test_filter_conditions_are_anded_limited_and_counted(df: pd.DataFrame) -> None:
    conditions = [{"column": "price", "op": ">", "value": 4}, {"column": "day", "op": "<", "value": "2026-02-02"}]
    expected = df[(df.price > 4) & (df.day < pd.Timestamp("2026-02-02"))]
    assert_frame_equal(_filter(df, *conditions), expected)
    answer = _tools(df)["sales_filter"](conditions=conditions, limit=1)
    assert_frame_equal(answer.frame, expected.head(1))
    assert answer.note == "sales: 6 rows x 4 columns; matching rows: 3, shown: 1"
    assert_frame_equal(_filter(df), df)  # no condition: every row


@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_groupby_agg_equals_pandas_for_every_aggregation(df: pd.DataFrame, agg: str) -> None:
    answer = _tools(df)["sales_groupby_agg"](by="city", column="price", agg=agg)
    assert_frame_equal(answer.frame, df.groupby("city")["price"].agg(agg).to_frame())


def test_groupby_agg_by_several_columns_and_the_group_cap(df: pd.DataFrame) -> None:
    answer = _tools(df)["sales_groupby_agg"](by=["city", "units"], column="price", agg="max")
    assert_frame_equal(answer.frame, df.groupby(["city", "units"])["price"].agg("max").to_frame())
    big = pd.DataFrame({"k": np.arange(MAX_GROUPS + 50), "v": 1})
    answer = _tools(big)["sales_groupby_agg"](by="k", column="v", agg="sum")
    assert len(answer.frame) == MAX_GROUPS
    assert f"{MAX_GROUPS + 50} groups, the first {MAX_GROUPS} shown" in answer.note


def test_value_counts_and_sort_top_equal_pandas(df: pd.DataFrame) -> None:
    tools = _tools(df)
    answer = tools["sales_value_counts"](column="city")
    assert_frame_equal(answer.frame, df.city.value_counts().head(20).to_frame())
    assert "'city' has 4 distinct values and 1 missing" in answer.note
    assert_frame_equal(tools["sales_value_counts"](column="units", top=1).frame,
                       df.units.value_counts().head(1).to_frame())
    smallest = tools["sales_sort_top"](column="units", n=2, ascending=True)
    assert smallest.note.endswith("top 2 by 'units', smallest first")
    assert_frame_equal(tools["sales_sort_top"](column="price").frame,
                       df.sort_values("price", ascending=False).head(10))
    assert_frame_equal(tools["sales_sort_top"](column="units", n=2, ascending=True).frame,
                       df.sort_values("units", ascending=True).head(2))


def test_the_tools_see_the_frames_current_contents_and_never_change_it(df: pd.DataFrame) -> None:
    tools = _tools(df)
    before = df.copy()
    for name, args in [("sales_describe", {}), ("sales_head", {}), ("sales_sort_top", {"column": "units"}),
                       ("sales_filter", {"conditions": [{"column": "units", "op": ">", "value": 1}]}),
                       ("sales_groupby_agg", {"by": "city", "column": "units", "agg": "sum"}),
                       ("sales_value_counts", {"column": "city"})]:
        tools[name](**args)
    assert_frame_equal(df, before)
    df.loc[len(df)] = ["Lille", 9, 1.0, pd.Timestamp("2026-03-01")]  # changed in place: the tools see it
    assert tools["sales_head"](n=10).note.startswith("sales: 7 rows")


def test_model_text_is_the_note_and_the_table(df: pd.DataFrame) -> None:
    from nbagent._run.execute import tool_output

    answer = _tools(df)["sales_filter"](conditions=[{"column": "city", "op": "==", "value": "Nice"}])
    output = tool_output(answer)
    assert output.content == str(answer)
    assert output.content.splitlines()[0] == "sales: 6 rows x 4 columns; matching rows: 1, shown: 1"
    assert "Nice" in output.content.splitlines()[2]
    assert output.display is not None and "<table" in output.display["text/html"]


# ---------------------------------------------------------------------- errors the model reads
@pytest.mark.parametrize(("call", "args", "message"), [
    ("sales_filter", {"conditions": [{"column": "town", "op": "==", "value": "Paris"}]},
     "sales has no column 'town'; its columns are: 'city', 'units', 'price', 'day'"),
    ("sales_filter", {"conditions": [{"column": "units", "op": ">", "value": "many"}]},
     "column 'units' of sales holds numbers (int64); 'many' is not a number"),
    ("sales_filter", {"conditions": [{"column": "day", "op": ">", "value": "someday"}]}, "'someday' is not a date"),
    ("sales_filter", {"conditions": [{"column": "units", "op": "in", "value": 3}]}, "'in' needs a list of values"),
    ("sales_filter", {"conditions": [{"column": "city", "op": "contains", "value": 3}]}, "'contains' needs a text"),
    ("sales_filter", {"conditions": [{"column": "units", "op": ">"}]}, "'>' needs one value"),
    ("sales_filter", {"conditions": [{"column": "units", "op": "~=", "value": 1}]},
     "Input should be '==', '!=', '<', '<=', '>', '>=', 'in', 'contains', 'isnull' or 'notnull'"),
    ("sales_groupby_agg", {"by": "cty", "column": "units", "agg": "sum"}, "sales has no column 'cty'"),
    ("sales_groupby_agg", {"by": "units", "column": "city", "agg": "mean"}, "pandas could not do this"),
    ("sales_value_counts", {"column": "Units"}, "its columns are: 'city', 'units'"),
    ("sales_sort_top", {"column": "cost"}, "sales has no column 'cost'"),
    ("sales_describe", {"columns": ["units", "nope"]}, "sales has no column 'nope'"),
])
def test_bad_arguments_raise_an_error_for_the_model(df: pd.DataFrame, call: str, args: dict[str, Any],
                                                    message: str) -> None:
    with pytest.raises(ModelRetry) as info:
        _tools(df)[call](**args)
    assert message in info.value.message


def test_a_comparison_pandas_refuses_is_an_error_for_the_model() -> None:
    mixed = pd.DataFrame({"x": ["a", 1, None]}, dtype=object)
    with pytest.raises(ModelRetry, match="cannot compare column 'x'"):
        _tools(mixed)["sales_filter"](conditions=[{"column": "x", "op": "<", "value": 2}])


@pytest.mark.parametrize("name", ["", "1sales", "sales data", "sales.q", "s" * 52, None])
def test_a_name_that_cannot_prefix_a_tool_name_is_refused(df: pd.DataFrame, name: Any) -> None:
    with pytest.raises(ToolDefinitionError, match="prefixes the tools' names"):
        dataframe_tools(df, name=name)


def test_only_a_dataframe_is_accepted(df: pd.DataFrame) -> None:
    with pytest.raises(ToolDefinitionError, match=r"a Series: pass series.to_frame\(\)"):
        dataframe_tools(df.units)
    with pytest.raises(ToolDefinitionError, match="needs a pandas DataFrame, got list"):
        dataframe_tools([1, 2])


# ---------------------------------------------------------------------- what the model sees
def test_names_parameters_and_no_approval(df: pd.DataFrame) -> None:
    tools = dataframe_tools(df, name="orders_2026")
    assert [t.name for t in tools] == [f"orders_2026_{n}" for n in NAMES]
    assert len(max((t.name for t in dataframe_tools(df, name="s" * 51)), key=len)) == 64
    schema = {t.name.removeprefix("orders_2026_"): t.parameters for t in tools}
    required = {name: sorted(s.get("required", [])) for name, s in schema.items()}
    assert required == {"describe": [], "head": [], "filter": ["conditions"], "groupby_agg": ["agg", "by", "column"],
                        "value_counts": ["column"], "sort_top": ["column"]}
    assert {k: list(s["properties"]) for k, s in schema.items()} == {
        "describe": ["columns"], "head": ["n"], "filter": ["conditions", "limit"],
        "groupby_agg": ["by", "column", "agg"], "value_counts": ["column", "top"],
        "sort_top": ["column", "n", "ascending"]}
    condition = schema["filter"]["properties"]["conditions"]["items"]
    assert "$defs" not in schema["filter"] and condition["required"] == ["column", "op"]
    assert condition["properties"]["op"]["enum"] == list(OPERATORS)
    assert schema["groupby_agg"]["properties"]["agg"]["enum"] == list(AGGREGATIONS)
    assert schema["head"]["properties"]["n"] == {"default": 5, "description": "how many rows.", "maximum": 1000,
                                                 "minimum": 1, "type": "integer"}
    for t in tools:
        assert "orders_2026" in t.description
        assert t.requires_approval is False and not t.needs_approval(None) and t.idempotent


# ---------------------------------------------------------------------- through an agent
def test_an_agent_filters_then_answers_from_the_result(df: pd.DataFrame) -> None:
    seen: list[Any] = []

    def model(messages: list[Any], request: Any) -> Any:
        last = messages[-1]
        if last.kind == "user":
            assert "sales_filter" in [d["name"] for d in request.tools]
            return tool_call("sales_filter", conditions=[{"column": "units", "op": ">=", "value": 5}], limit=2)
        seen.append(last)
        return f"{last.content.splitlines()[0]}"

    agent = Agent(FunctionModel(model), tools=dataframe_tools(df))
    result = agent.run_sync("Which sales had 5 units or more?")
    [received] = seen
    assert received.kind == "tool-result" and received.name == "sales_filter" and not received.is_error
    expected = df[df.units >= 5].head(2).to_string(max_colwidth=100)
    assert received.content == "sales: 6 rows x 4 columns; matching rows: 3, shown: 2\n" + expected
    assert result.output == "sales: 6 rows x 4 columns; matching rows: 3, shown: 2"


def test_an_agent_reads_errors_and_tries_again(df: pd.DataFrame) -> None:
    seen: list[Any] = []
    calls = iter([
        tool_call("sales_value_counts", column="town"),                                      # unknown column
        tool_call("sales_filter", conditions=[{"column": "city", "op": "like", "value": "P"}]),  # bad op: schema
        tool_call("sales_value_counts", column="city", top=1),
    ])

    def model(messages: list[Any], request: Any) -> Any:
        if messages[-1].kind == "tool-result":
            seen.append(messages[-1])
        return next(calls, "done")

    result = Agent(FunctionModel(model), tools=dataframe_tools(df)).run_sync("Top city?")
    assert result.output == "done"
    assert [r.is_error for r in seen] == [True, True, False]
    assert "its columns are: 'city', 'units', 'price', 'day'" in seen[0].content
    assert "conditions.0.op" in seen[1].content and "'contains', 'isnull' or 'notnull'" in seen[1].content
    assert seen[2].content.splitlines()[-1].split() == ["Paris", "2"]


def test_a_long_answer_is_cut_by_the_agents_result_cap_and_kept_whole() -> None:
    big = pd.DataFrame({"n": np.arange(1000), "label": [f"row number {i}" for i in range(1000)]})

    def model(messages: list[Any], request: Any) -> Any:
        if messages[-1].kind == "user":
            return tool_call("big_filter", conditions=[{"column": "n", "op": ">=", "value": 0}], limit=1000)
        return "ok"

    result = Agent(FunctionModel(model, context_window=4_000), tools=dataframe_tools(big, name="big")).run_sync("?")
    received = result.messages[2]
    assert not received.is_error
    assert received.content.startswith("big: 1,000 rows x 2 columns; matching rows: 1,000, shown: 1,000\n")
    assert len(received.content) < 3_000 and "read_result" in received.content
    assert received.full_content.endswith("999  row number 999")


def test_duplicate_index_labels_and_unordered_categories() -> None:
    frame = pd.DataFrame({"k": pd.Categorical(["a", "b", "a"]), "v": [1, 2, 3]}, index=[0, 0, 1])
    tools = _tools(frame)
    assert_frame_equal(_filter(frame, {"column": "k", "op": "==", "value": "a"}), frame[frame.k == "a"])
    assert_frame_equal(_filter(frame, {"column": "v", "op": ">", "value": 1}), frame[frame.v > 1])
    with pytest.raises(ModelRetry, match="cannot compare column 'k'"):
        tools["sales_filter"](conditions=[{"column": "k", "op": "<", "value": "b"}])


def test_importing_the_notebook_edge_loads_neither_pandas_nor_pydantic() -> None:
    import subprocess
    import sys

    code = ("import sys, nbagent.notebook as nb; assert 'pandas' not in sys.modules, 'pandas';"
            "assert 'pydantic' not in sys.modules, 'pydantic'; assert 'dataframe_tools' in dir(nb);"
            "nb.dataframe_tools; assert 'pandas' in sys.modules; print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "ok", done.stderr
