"""`SQLiteStore`: threads kept in one SQLite file (standard library `sqlite3`, WAL mode).

Owns the on-disk format (described here) and the sizes of usage chunks; the work is split by
responsibility into private modules, each importing only the ones below it:

- `_schema`: the DDL, the file checks made before opening, the schema checks and migration;
- `_chunks`: packing usage rows into columnar chunks and reading them back;
- `_database`: the connection of this process, the lock, transactions, SQLite errors → `StoreError`;
- `_store`: the `SQLiteStore` class (the store protocol's SQL).

File format 1 (``format_version`` in the ``nbagent_meta`` table covers every JSON record below;
a record's JSON shape only gains fields with defaults, so format 1 files stay readable)::

    nbagent_meta  key, value                     format_version, created_by
    threads       id, version, step, meta JSON, created, updated, title, status,
                  messages, input_tokens, output_tokens, cost_total     (running totals)
    messages      thread, seq, step, version, data JSON (``Message.to_dict()``)
    usage         id, thread, run_id, step, time, provider, model, input_tokens, ...
                  one column per `ModelCallUsage` field, so usage reads column by column
    ledger        thread, call_id, tool, args_hash, status, time, version
    checkpoints   thread, version, step, time, messages, last_message, input_tokens,
                  output_tokens, cost_total, status
    usage_chunks  last_id, first_id, rows, data BLOB        (a columnar copy of the usage table)

Format 2 adds the checkpoints' ``run_id``, ``stop_reason`` and ``error``; format 3 the usage
rows' ``purpose`` (``'run'`` in the rows already there); format 4 their ``context`` (and the
``recordings`` table); format 5 their ``agent``, ``depth`` and ``parent_call_id``; format 6 their
``batch`` (`nbagent.store.FORMAT_VERSION`). An older file is migrated when it is opened
(`_schema`), and then refused by the nbagent that wrote it.

The ``usage`` table stays the record (one row per model call, queryable with SQL).
``usage_chunks`` is a derived, columnar copy of it for fast reads (`usage_columns`): each chunk
holds every usage row with ``first_id <= id <= last_id`` (at most `_chunks.CHUNK_ROWS` rows) as one blob
(format in `nbagent.store._columnar`). Chunks never overlap; rows above the last chunk, or in a
range whose chunk is gone, are read from the ``usage`` table. Triggers on ``usage`` delete the
chunk covering any row inserted, updated or deleted, so a chunk is never stale, even when the file
is changed by hand or by an nbagent that predates chunks; the range is packed again later. The
table and triggers are created in files that lack them (format 1 files written before chunks
existed: their rows are packed on the first `usage_columns` call), and a chunk whose format byte
is unknown is ignored, so the chunks need no format version of their own.

Durability: every `append` is one ``BEGIN IMMEDIATE`` transaction. WAL with
``synchronous=NORMAL`` means a committed append survives the process being killed (``kill -9``,
a kernel restart); a power cut may lose the last few appends but never corrupts the file. An
append's cost does not depend on the thread's length: it inserts the new rows and updates the
thread's row (version, running totals) and never reads or rewrites the history. A tool step
costs two appends (the answer with its usage row and ledger entries, then the result), so every
index is paid for twice per step: files created by this version have no index on
``threads.updated`` (listing the threads sorts them instead); older files keep theirs.
"""

from __future__ import annotations

from ._schema import USAGE_COLUMNS
from ._store import SQLiteStore

__all__ = ["USAGE_COLUMNS", "SQLiteStore"]
