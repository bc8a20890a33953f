"""`PostgresStore`: threads kept in a PostgreSQL database (psycopg 3).

For teams and clusters: every kernel and machine that reaches the database shares the threads,
pending approvals, the tool-call ledger and usage, with the guarantees `SQLiteStore` gives on one
machine. ``pip install "nbagent[postgres]"``; the driver is imported on first use only, so
``import nbagent`` stays light.

The work is split by responsibility into private modules, each importing only the ones below it:

- `_conninfo`: the URL or ``key=value`` string, split into what can be shown and the password;
- `_schema`: the DDL, the functions, the version table, migrations;
- `_sql`: the statements (one per store call wherever possible);
- `_records`: the JSON an append sends and a load decodes;
- `_copy`: the rows of a fork (`PostgresStore.copy`);
- `_leases`: the leases of the runs going on here, and their heartbeat thread;
- `_libpq`: the calls every run makes (a load, an append, a run's start), one statement each,
  through psycopg's execute or (``direct=True``) to libpq directly;
- `_database`: the connections of each event loop (psycopg's asyncio connection, no worker
  thread), retries, errors;
- `_store`: the `PostgresStore` class.

Schema version 7 (table ``<schema>.schema_version`` holds one row per migration applied; every
JSON record has the same shape as in SQLite, so threads copy across as they are). Version 2 gave
checkpoints ``run_id``, ``stop_reason`` and ``error``; version 3 added the functions
``load_thread`` and ``begin_thread`` beside ``append_step`` and dropped the index on
``threads.updated`` (so an append updates the thread's row in place); versions 4 to 7 gave the
usage rows ``purpose``, ``context`` (with ``replayed``, ``recorded_cost`` and the ``recordings``
table), ``agent``, ``depth`` and ``parent_call_id``, then ``batch`` (`SCHEMA_VERSION`)::

    schema_version  version, applied_at, applied_by
    threads         id, version, step, meta JSONB, created, updated, title, status, messages,
                    input_tokens, output_tokens, cost_total           (running totals)
                    lease_run, lease_until                            (the running run's lease)
                    last_write                                        (the last append's mark)
    messages        thread, seq, step, version, data JSONB (``Message.to_dict()``)
    usage           id, run_id, thread, step, time, provider, model, input_tokens, ...
                    one column per `ModelCallUsage` field
    ledger          thread, call_id, tool, args_hash, status, time, version
    checkpoints     thread, version, step, time, messages, last_message, input_tokens,
                    output_tokens, cost_total, status, run_id, stop_reason, error

Times are seconds since the epoch (``double precision``), as in SQLite; leases use the server's
clock, so the machines' clocks need not agree.
"""

from __future__ import annotations

from ._schema import SCHEMA_VERSION
from ._store import PostgresStore

__all__ = ["SCHEMA_VERSION", "PostgresStore", "migrate"]


async def migrate(url: str, *, schema: str = "nbagent") -> tuple[int, int]:
    """Create or upgrade nbagent's tables in a database; returns (version before, version after).

    What ``python -m nbagent.store migrate URL`` runs, for teams whose DBA runs migrations (and
    whose kernels use ``PostgresStore(url, migrate=False)``). Safe to run while kernels use the
    database: migrations take an advisory lock and run in one transaction.
    """
    from . import _schema

    store = PostgresStore(url, schema=schema, migrate=False)
    db = store._db

    def work(conn: object, _: int) -> tuple[int, int]:
        return _schema.migrate(conn, schema, "python -m nbagent.store migrate")

    try:
        return await db.run_direct(work)
    finally:
        await store.close()
