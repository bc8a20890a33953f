"""`ModelCallUsage.purpose`: what each model call was for ("run", "compaction", "eval", ...),
on the dataclass, in its dicts, in every usage frame and through the columnar chunks."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pandas as pd

import nbagent
from nbagent import Agent
from nbagent.dataframe import USAGE_SCHEMA, usage_from_columns
from nbagent.dataframe._frames import SUMMARY_COLUMNS
from nbagent.models import FunctionModel
from nbagent.store import MemoryStore, SQLiteStore
from nbagent.store._columnar import USAGE_FIELDS, decode_chunk, encode_chunk, encode_rows
from nbagent.usage import ModelCallUsage, Usage


def call(step: int, purpose: str = "run", cost: float = 0.01) -> ModelCallUsage:
    return ModelCallUsage("run_1", "t", step, 1_700_000_000.0 + step, "openai", "gpt-4o-mini",
                          input_tokens=100, output_tokens=10, cost_total=cost, purpose=purpose)


# ------------------------------------------------------------------------------------ the dataclass
def test_purpose_defaults_to_run_and_comes_after_the_older_fields() -> None:
    row = ModelCallUsage("r", "t", 1, 0.0, "openai", "m")
    assert (row.purpose, row.context) == ("run", None)
    # Each field added later comes after the older ones, so positional callers keep working.
    tail = USAGE_FIELDS[USAGE_FIELDS.index("usage_reported") + 1:]
    assert tail == ("purpose", "context", "replayed", "recorded_cost", "agent", "depth", "parent_call_id", "batch")
    # Positional construction of the earlier fields is unchanged.
    old = ModelCallUsage("r", "t", 1, 0.0, "openai", "m", 1, 0, 0, 2, 0, 0.5, "stop", 0, None, None, None,
                         "USD", False)
    assert (old.usage_reported, old.purpose) == (False, "run")


def test_dicts_carry_purpose_and_old_dicts_read_as_run() -> None:
    row = call(1, "compaction")
    data = row.to_dict()
    assert data["purpose"] == "compaction"
    assert ModelCallUsage.from_dict(data) == row
    del data["purpose"]  # a row saved before the field existed
    assert ModelCallUsage.from_dict(data).purpose == "run"
    assert ModelCallUsage.from_dict({**row.to_dict(), "purpose": "my-judge v2"}).purpose == "my-judge v2"
    assert [r["purpose"] for r in Usage.of([call(1), call(2, "eval")]).rows()] == ["run", "eval"]


def test_an_agents_own_calls_are_run() -> None:
    result = Agent(FunctionModel(lambda m, i: "ok")).run_sync("hi")
    assert [c.purpose for c in result.usage.calls] == ["run"]
    assert nbagent.usage_frame(result)["purpose"].tolist() == ["run"]


# ------------------------------------------------------------------------------------ the frame
def test_usage_frame_has_a_purpose_category_to_group_costs_by() -> None:
    rows = [call(1), call(1, "compaction", 0.002), call(2), call(3, "eval", 0.005)]
    df = nbagent.usage_frame(rows)
    assert USAGE_SCHEMA["purpose"] == "category" and list(df.columns)[-7:] == [
        "purpose", "replayed", "recorded_cost", "agent", "depth", "parent_call_id", "batch"]
    assert isinstance(df["purpose"].dtype, pd.CategoricalDtype)
    assert df["purpose"].tolist() == ["run", "compaction", "run", "eval"]
    by_purpose = df.groupby("purpose", observed=True)["cost_total"].sum()
    assert by_purpose.to_dict() == {"compaction": 0.002, "eval": 0.005, "run": 0.02}
    assert nbagent.usage_frame(rows, columns=["step", "purpose"]).columns.tolist() == ["step", "purpose"]
    assert "purpose" not in SUMMARY_COLUMNS and "purpose" not in nbagent.usage_frame(rows, columns="summary")


def test_columns_without_purpose_read_as_run() -> None:
    df = usage_from_columns({"run_id": ["r", "r"], "step": [1, 2], "model": ["m", "m"]})
    assert df["purpose"].tolist() == ["run", "run"] and isinstance(df["purpose"].dtype, pd.CategoricalDtype)
    # A store's columns read without the purpose column: the frame fills it in too.
    store = MemoryStore()
    asyncio.run(store.append("t", version=0, step=1, usage=[call(1, "compaction")]))
    cols = asyncio.run(store.usage_columns(columns=["step", "model"]))
    assert usage_from_columns(cols)["purpose"].tolist() == ["run"]


def test_usage_frame_of_stores_keeps_each_purpose(tmp_path: Path) -> None:
    rows = [call(1), call(1, "compaction"), call(2, "eval")]
    for store in (MemoryStore(), SQLiteStore(tmp_path / "threads.db")):
        asyncio.run(store.append("t", version=0, step=2, usage=rows))
        assert nbagent.usage_frame(store)["purpose"].tolist() == ["run", "compaction", "eval"]
        assert nbagent.usage_frame(store, thread="t")["purpose"].tolist() == ["run", "compaction", "eval"]
        asyncio.run(store.close())


def test_a_chunk_packed_before_purpose_existed_reads_as_run() -> None:
    rows = [call(1), call(2)]
    old_names = [n for n in USAGE_FIELDS if n != "purpose"]
    blob = encode_chunk(encode_rows([tuple(getattr(r, n) for n in old_names) for r in rows], old_names))
    block = decode_chunk(blob, USAGE_FIELDS)
    assert block is not None, "the chunk is read, not dropped (its rows need no second read)"
    assert block.values("purpose") == ["run", "run"]
    assert decode_chunk(blob, ["purpose"]) is not None
    # A current chunk keeps every purpose.
    rows[1].purpose = "eval"
    blob = encode_chunk(encode_rows([tuple(getattr(r, n) for n in USAGE_FIELDS) for r in rows]))
    block = decode_chunk(blob, USAGE_FIELDS)
    assert block is not None and block.values("purpose") == ["run", "eval"]
