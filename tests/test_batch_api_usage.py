"""The ``batch`` usage column: a model call answered through a provider's batch API is marked and
priced at the batch price, in every store and every frame (docs/batch_api.md)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

import nbagent
from nbagent.exceptions import StoreVersionError
from nbagent.pricing import BATCH_DISCOUNT, price_row
from nbagent.store import MemoryStore, PostgresStore, SQLiteStore, Store
from nbagent.store._columnar import USAGE_FIELDS
from nbagent.usage import ModelCallUsage

NOW = time.time()


def call(step: int, model: str = "gpt-4o-mini", provider: str = "openai", batch: bool = False,
         prices: Any = None) -> ModelCallUsage:
    row = ModelCallUsage("run_1", "t", step, NOW, provider, model, input_tokens=1_000_000,
                         output_tokens=200_000, batch=batch)
    price_row(row, prices)
    return row


# ------------------------------------------------------------------------------------ prices
@pytest.mark.parametrize(("model", "provider"), [("gpt-4o-mini", "openai"), ("claude-sonnet-4-5", "anthropic")])
def test_a_batch_row_costs_half_at_genai_prices_batch_price(model: str, provider: str) -> None:
    live, batch = call(1, model, provider), call(1, model, provider, batch=True)
    assert live.cost_total and batch.batch and not live.batch
    assert batch.cost_total == pytest.approx(live.cost_total / 2)
    assert (batch.cost_input, batch.cost_output) == pytest.approx((live.cost_input / 2, live.cost_output / 2))


def test_a_model_without_a_batch_price_and_your_own_prices_pay_the_documented_half() -> None:
    live, batch = call(1, "deepseek-chat", "deepseek"), call(1, "deepseek-chat", "deepseek", batch=True)
    assert live.cost_total and batch.cost_total == pytest.approx(live.cost_total * BATCH_DISCOUNT)
    mine = {"mine": {"input": 1.0, "output": 2.0}}
    assert call(1, "mine", "x", prices=mine).cost_total == pytest.approx(1.4)
    assert call(1, "mine", "x", batch=True, prices=mine).cost_total == pytest.approx(0.7)
    assert call(1, "m", "local", batch=True).cost_total == 0.0


def test_batch_is_the_last_usage_field_and_old_dicts_read_false() -> None:
    assert USAGE_FIELDS[-1] == "batch"
    data = call(1, batch=True).to_dict()
    assert ModelCallUsage.from_dict(data).batch is True
    del data["batch"]
    assert ModelCallUsage.from_dict(data).batch is False


# ------------------------------------------------------------------------------------ stores
KINDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    made: Store
    if request.param == "memory":
        made = MemoryStore()
    elif request.param == "sqlite":
        made = SQLiteStore(tmp_path / "threads.db")
    else:
        made = PostgresStore(request.getfixturevalue("postgres_url"), schema=request.getfixturevalue("pg_schema"))
    yield made
    await made.close()


async def test_every_store_keeps_the_batch_flag(store: Store) -> None:
    rows = [call(1), call(2, batch=True)]
    await store.append("t", version=0, step=2, usage=rows, meta={"status": "completed"})
    loaded = await store.load("t")
    assert loaded is not None and [r.batch for r in loaded.usage] == [False, True]
    assert (await store.usage_columns("t"))["batch"] == [False, True]
    frame = nbagent.usage_frame(store)
    assert frame["batch"].dtype == bool and frame["batch"].tolist() == [False, True]
    assert frame.groupby("batch")["cost_total"].sum()[True] == pytest.approx(frame["cost_total"][0] / 2)


async def test_a_format_5_file_gains_the_column_and_keeps_its_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A format 5 file (before usage rows had ``batch``) is made format 6 on opening: its rows, and
    the chunks packed without the column, read False; new rows keep their flag; an nbagent that
    reads format 5 then refuses the file (it would copy and pack rows without the flag)."""
    import nbagent.store.sqlite._chunks as chunks
    from nbagent.store._columnar import decode_chunk, encode_chunk
    from nbagent.store.sqlite._schema import USAGE_COLUMNS

    monkeypatch.setattr(chunks, "CHUNK_ROWS", 8)
    monkeypatch.setattr(chunks, "_SMALL_THREAD", 4)
    path = tmp_path / "old.db"
    store = SQLiteStore(path)
    rows = [call(step) for step in range(1, 21)]
    await store.append("t", version=0, step=20, usage=rows, meta={"status": "completed"})
    assert len((await store.usage_columns())["batch"]) == 20  # packs the rows into chunks
    await store.close()
    old_names = [n for n in USAGE_COLUMNS if n != "batch"]
    with sqlite3.connect(path) as conn:  # as an nbagent of format 5 wrote it
        conn.execute("ALTER TABLE usage DROP COLUMN batch")
        packed = conn.execute("SELECT last_id, data FROM usage_chunks").fetchall()
        assert len(packed) == 2
        for last, data in packed:
            block = decode_chunk(data, old_names)
            assert block is not None
            conn.execute("UPDATE usage_chunks SET data = ? WHERE last_id = ?", (encode_chunk(block), last))
        conn.execute("UPDATE nbagent_meta SET value = '5' WHERE key = 'format_version'")
    store = SQLiteStore(path)
    loaded = await store.load("t")
    assert loaded is not None and {r.batch for r in loaded.usage} == {False}
    await store.append("t", version=loaded.version, step=21, usage=[call(21, batch=True)])
    assert (await store.usage_columns("t"))["batch"] == [False] * 20 + [True]
    assert (await store.usage_columns())["batch"] == [False] * 20 + [True]
    await store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM nbagent_meta WHERE key = 'format_version'").fetchone() == ("6",)
        assert conn.execute("SELECT batch FROM usage ORDER BY id").fetchall() == [(0,)] * 20 + [(1,)]
        blobs = [d for (d,) in conn.execute("SELECT data FROM usage_chunks")]
    assert len(blobs) == 2 and all(b"batch" not in d for d in blobs), "the old chunks are kept"
    for blob in blobs:  # and read as they are (not from the rows): every row of them False
        block = decode_chunk(blob, USAGE_COLUMNS)
        assert block is not None and list(block.parts["batch"]) == [0] * block.length
    import nbagent.store.sqlite._schema as schema

    monkeypatch.setattr(schema, "FORMAT_VERSION", 5)
    with pytest.raises(StoreVersionError, match="written by a newer nbagent"):
        await SQLiteStore(path).load("t")

