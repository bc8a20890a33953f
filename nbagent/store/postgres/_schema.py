"""The database schema: DDL, the version table, migrations and the check made before any use.

Owns the table layout (see the package docstring), `SCHEMA_VERSION`, the list of migrations and
`migrate` / `check`, which take the caller's psycopg connection (nothing here opens one).
Migrations run in one transaction under a transaction-level advisory lock, so two processes
opening a new database at once (or a DBA's ``python -m nbagent.store migrate`` while kernels
start) never race, and this works through PgBouncer in transaction mode. Imports the exceptions,
the usage fields and `ERROR_KEPT` only; psycopg is only ever handed in.
"""

from __future__ import annotations

import re
from typing import Any

from ...exceptions import StoreError, StoreVersionError
from .._columnar import USAGE_FIELDS
from ..base import ERROR_KEPT

__all__ = ["SCHEMA_VERSION", "USAGE_TYPES", "check", "migrate", "quote_schema"]

SCHEMA_VERSION = 7
"""The newest schema this nbagent creates and reads (rows of ``<schema>.schema_version``).
Version 2 gives checkpoints the run's ``run_id``, ``stop_reason`` and ``error``; version 3 adds
the functions ``load_thread`` and ``begin_thread`` and drops the index on ``threads.updated``;
version 4 gives usage rows their ``purpose``; version 5 their ``context`` (the request's size by
part); version 6 their ``agent``, ``depth`` and ``parent_call_id`` (where in a tree of agents the
call was made); version 7 their ``batch`` flag (answered through a provider's batch API)."""

USAGE_TYPES = {
    "run_id": "text", "thread": "text", "step": "integer", "time": "double precision",
    "provider": "text", "model": "text", "input_tokens": "bigint", "cache_read_tokens": "bigint",
    "cache_write_tokens": "bigint", "output_tokens": "bigint", "reasoning_tokens": "bigint",
    "latency_s": "double precision", "finish_reason": "text", "tool_calls": "integer",
    "cost_input": "double precision", "cost_output": "double precision",
    "cost_total": "double precision", "currency": "text", "usage_reported": "boolean", "purpose": "text",
    "context": "text", "replayed": "boolean", "recorded_cost": "double precision", "agent": "text",
    "depth": "integer", "parent_call_id": "text", "batch": "boolean",
}
"""The usage table's columns (the same names and order as SQLite's ``usage`` table)."""
assert tuple(USAGE_TYPES) == USAGE_FIELDS

_ADDED_USAGE = ("purpose", "context", "replayed", "recorded_cost", "agent", "depth", "parent_call_id", "batch")
"""Usage columns later versions add (`_version_4` to `_version_7`): not in version 1's table."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def quote_schema(name: str) -> str:
    """The schema name, checked and quoted for SQL.

    Raises:
        UserError: not a plain identifier (letters, digits, ``_``; at most 63 characters).
    """
    from ...exceptions import UserError

    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise UserError(f"schema must be a plain identifier (letters, digits, _), got {name!r}")
    return f'"{name}"'


def _version_1(s: str) -> list[str]:
    usage = ",\n    ".join(f"{name} {kind}" for name, kind in USAGE_TYPES.items() if name not in _ADDED_USAGE)
    return [
        f"""CREATE TABLE {s}.threads (
    id text PRIMARY KEY,
    version bigint NOT NULL,
    step integer NOT NULL DEFAULT 0,
    meta jsonb NOT NULL DEFAULT '{{}}',
    created double precision NOT NULL,
    updated double precision NOT NULL,
    title text NOT NULL DEFAULT '',
    status text,
    messages integer NOT NULL DEFAULT 0,
    input_tokens bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0,
    cost_total double precision,
    lease_run text,
    lease_until timestamptz,
    last_write text
)""",
        f"CREATE INDEX threads_updated ON {s}.threads (updated)",
        f"""CREATE TABLE {s}.messages (
    thread text NOT NULL,
    seq integer NOT NULL,
    step integer NOT NULL,
    version bigint NOT NULL,
    data jsonb NOT NULL,
    PRIMARY KEY (thread, seq)
)""",
        f"CREATE TABLE {s}.usage (\n    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n    {usage}\n)",
        f"CREATE INDEX usage_thread ON {s}.usage (thread, id)",
        f"""CREATE TABLE {s}.ledger (
    thread text NOT NULL,
    call_id text NOT NULL,
    tool text NOT NULL,
    args_hash text NOT NULL,
    status text NOT NULL,
    time double precision NOT NULL,
    version bigint NOT NULL,
    PRIMARY KEY (thread, call_id)
)""",
        f"""CREATE TABLE {s}.checkpoints (
    thread text NOT NULL,
    version bigint NOT NULL,
    step integer NOT NULL,
    time double precision NOT NULL,
    messages integer NOT NULL,
    last_message text NOT NULL,
    input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL,
    cost_total double precision,
    status text,
    PRIMARY KEY (thread, version)
)""",
    ]


def _version_2(s: str) -> list[str]:
    """Checkpoints get the run id, stop reason and error of their run: unknown (NULL) in the rows
    already there, except each thread's latest run, which its meta record tells (a checkpoint at
    the thread's version, so it keeps its outcome when later runs follow), as SQLite's format 2."""
    return [
        f"ALTER TABLE {s}.checkpoints ADD COLUMN run_id text, ADD COLUMN stop_reason text, ADD COLUMN error text",
        f"""INSERT INTO {s}.checkpoints (thread, version, step, time, messages, last_message, input_tokens,
                               output_tokens, cost_total, status, run_id, stop_reason, error)
SELECT t.id, t.version, t.step, t.updated, t.messages,
       coalesce((SELECT c.last_message FROM {s}.checkpoints c WHERE c.thread = t.id
                 ORDER BY c.version DESC LIMIT 1), ''),
       t.input_tokens, t.output_tokens, t.cost_total, t.status, t.meta->>'run_id', t.meta->>'stop_reason',
       left(t.meta->>'error', {ERROR_KEPT})
FROM {s}.threads t WHERE t.meta->>'run_id' IS NOT NULL
ON CONFLICT (thread, version) DO UPDATE SET
    run_id = EXCLUDED.run_id, stop_reason = EXCLUDED.stop_reason, error = EXCLUDED.error""",
    ]


def _usage_values() -> str:
    return ", ".join(
        "p_thread" if name == "thread" else f"(u.e->>{i})::{kind}" for i, (name, kind) in enumerate(USAGE_TYPES.items())
    )


def _append_function(s: str) -> str:  # Size: the text of one PL/pgSQL function, read as SQL
    """``<schema>.append_step(...)``: one append, version-checked, as one call.

    A PL/pgSQL function keeps its statements' plans for the session on the server side, so an
    append costs one short statement to parse instead of a long one, without client-side
    prepared statements (which PgBouncer in transaction mode breaks). Returns the new version,
    or NULL when the version check fails (nothing written).

    An append that writes messages or a meta record writes a checkpoint, with the run id, stop
    reason and error (its first `ERROR_KEPT` characters) of the meta record the thread then
    holds; one without messages takes its last message from the previous checkpoint. The
    function is code, not schema: `migrate` creates it again whenever it migrates, for the
    newest schema.
    """
    lease = "CASE WHEN {run} IS NULL THEN NULL ELSE clock_timestamp() + make_interval(secs => p_lease_s) END"
    returning = ("version, messages, input_tokens, output_tokens, cost_total, status, meta->>'run_id', "
                 f"meta->>'stop_reason', left(meta->>'error', {ERROR_KEPT})")
    return f"""CREATE OR REPLACE FUNCTION {s}.append_step(
    p_thread text, p_version bigint, p_step integer, p_now double precision, p_n integer,
    p_tin bigint, p_tout bigint, p_cost double precision, p_meta jsonb, p_status text, p_title text,
    p_lease_run text, p_lease_s double precision, p_write_id text, p_msgs jsonb, p_summary text,
    p_usage jsonb, p_ledger jsonb
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    h_version bigint; h_messages integer; h_in bigint; h_out bigint; h_cost double precision; h_status text;
    h_run text; h_stop text; h_error text;
BEGIN
    IF p_version = 0 THEN
        INSERT INTO {s}.threads (id, version, step, meta, created, updated, title, status, messages,
                                 input_tokens, output_tokens, cost_total, lease_run, lease_until, last_write)
        VALUES (p_thread, 1, p_step, coalesce(p_meta, '{{}}'::jsonb), p_now, p_now, p_title,
                CASE WHEN p_meta IS NULL THEN NULL ELSE p_status END, p_n, p_tin, p_tout, p_cost,
                p_lease_run, {lease.format(run="p_lease_run")}, p_write_id)
        ON CONFLICT (id) DO NOTHING
        RETURNING {returning}
        INTO h_version, h_messages, h_in, h_out, h_cost, h_status, h_run, h_stop, h_error;
    ELSE
        UPDATE {s}.threads SET
            version = version + 1, step = p_step, updated = p_now, messages = messages + p_n,
            input_tokens = input_tokens + p_tin, output_tokens = output_tokens + p_tout,
            cost_total = CASE WHEN p_cost IS NULL THEN cost_total ELSE coalesce(cost_total, 0) + p_cost END,
            meta = coalesce(p_meta, meta),
            status = CASE WHEN p_meta IS NULL THEN status ELSE p_status END,
            title = CASE WHEN title = '' THEN p_title ELSE title END,
            lease_run = CASE WHEN p_meta IS NULL THEN lease_run ELSE p_lease_run END,
            lease_until = {lease.format(run="CASE WHEN p_meta IS NULL THEN lease_run ELSE p_lease_run END")},
            last_write = p_write_id
        WHERE id = p_thread AND version = p_version
        RETURNING {returning}
        INTO h_version, h_messages, h_in, h_out, h_cost, h_status, h_run, h_stop, h_error;
    END IF;
    IF h_version IS NULL THEN
        RETURN NULL;
    END IF;
    IF p_n > 0 THEN
        INSERT INTO {s}.messages (thread, seq, step, version, data)
        SELECT p_thread, h_messages - p_n + m.ord::integer - 1, p_step, h_version, m.data
        FROM jsonb_array_elements(p_msgs) WITH ORDINALITY AS m(data, ord);
    END IF;
    IF p_n > 0 OR p_meta IS NOT NULL THEN
        INSERT INTO {s}.checkpoints (thread, version, step, time, messages, last_message, input_tokens,
                                     output_tokens, cost_total, status, run_id, stop_reason, error)
        VALUES (p_thread, h_version, p_step, p_now, h_messages,
                CASE WHEN p_n > 0 THEN p_summary ELSE coalesce((SELECT c.last_message FROM {s}.checkpoints c
                     WHERE c.thread = p_thread ORDER BY c.version DESC LIMIT 1), '') END,
                h_in, h_out, h_cost, h_status, h_run, h_stop, h_error);
    END IF;
    IF p_usage IS NOT NULL THEN
        INSERT INTO {s}.usage ({", ".join(USAGE_TYPES)})
        SELECT {_usage_values()}
        FROM jsonb_array_elements(p_usage) WITH ORDINALITY AS u(e, ord) ORDER BY u.ord;
    END IF;
    IF p_ledger IS NOT NULL THEN
        INSERT INTO {s}.ledger (thread, call_id, tool, args_hash, status, time, version)
        SELECT p_thread, l.e->>0, l.e->>1, l.e->>2, l.e->>3, (l.e->>4)::double precision, h_version
        FROM jsonb_array_elements(p_ledger) AS l(e)
        ON CONFLICT (thread, call_id) DO UPDATE SET tool = EXCLUDED.tool, args_hash = EXCLUDED.args_hash,
            status = EXCLUDED.status, time = EXCLUDED.time, version = EXCLUDED.version;
    END IF;
    RETURN h_version;
END
$fn$"""


def _version_3(s: str) -> list[str]:
    """The functions ``load_thread`` and ``begin_thread`` (`_functions`: every migration creates
    the functions again). And no index on ``threads.updated``, as in SQLite: every append changes
    that column, so the index made each append write a new index entry and kept PostgreSQL from
    updating the thread's row in place (a HOT update, for which the table keeps free room in its
    pages); listing the threads sorts them, and `prune` reads the table, instead."""
    return [f"DROP INDEX IF EXISTS {s}.threads_updated", f"ALTER TABLE {s}.threads SET (fillfactor = 80)"]


def _load_function(s: str) -> str:
    """``<schema>.load_thread(id)``: the whole thread as one snapshot, as the text of one JSON
    array ``[version, meta, leased, [[step, message], ...], [usage row, ...], [ledger row, ...]]``
    (NULL when the thread does not exist).

    In a PL/pgSQL function its query is planned once per session: as a plain statement it was
    planned again on every call (no prepared statements, for PgBouncer), which cost more than
    running it. One text value is the cheapest result to send and to decode."""
    usage = ", ".join("u." + n for n in USAGE_TYPES)
    return f"""CREATE OR REPLACE FUNCTION {s}.load_thread(p_thread text)
RETURNS text LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    found text;
BEGIN
    SELECT json_build_array(
        t.version, t.meta, coalesce(t.lease_run IS NOT NULL AND t.lease_until > clock_timestamp(), false),
        (SELECT coalesce(json_agg(json_build_array(m.step, m.data) ORDER BY m.seq), '[]')
         FROM {s}.messages m WHERE m.thread = t.id),
        (SELECT coalesce(json_agg(json_build_array({usage}) ORDER BY u.id), '[]')
         FROM {s}.usage u WHERE u.thread = t.id),
        (SELECT coalesce(json_agg(json_build_array(l.call_id, l.tool, l.args_hash, l.status, l.time)
                                  ORDER BY l.version, l.time), '[]')
         FROM {s}.ledger l WHERE l.thread = t.id))::text
    INTO found
    FROM {s}.threads t WHERE t.id = p_thread;
    RETURN found;
END
$fn$"""


def _begin_function(s: str) -> str:
    """``<schema>.begin_thread(...)``: `PostgresStore.create_or_load` in one call.

    Appends the first checkpoint of a new thread (``append_step`` at version 0) and returns its
    version as text; when the thread exists, writes nothing and returns ``load_thread``'s JSON
    array (read after the attempt, so a thread another writer has just started is seen), or
    NULL if it was deleted since."""
    return f"""CREATE OR REPLACE FUNCTION {s}.begin_thread(
    p_thread text, p_step integer, p_now double precision, p_n integer,
    p_tin bigint, p_tout bigint, p_cost double precision, p_meta jsonb, p_status text, p_title text,
    p_lease_run text, p_lease_s double precision, p_write_id text, p_msgs jsonb, p_summary text,
    p_usage jsonb, p_ledger jsonb
) RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
    created bigint;
BEGIN
    created := {s}.append_step(p_thread, 0, p_step, p_now, p_n, p_tin, p_tout, p_cost, p_meta, p_status,
                               p_title, p_lease_run, p_lease_s, p_write_id, p_msgs, p_summary, p_usage, p_ledger);
    IF created IS NOT NULL THEN
        RETURN created::text;
    END IF;
    RETURN {s}.load_thread(p_thread);
END
$fn$"""


def _functions(s: str) -> list[str]:
    """The functions of the newest schema, created again by every migration (code, not data)."""
    return [_append_function(s), _load_function(s), _begin_function(s)]


def _version_4(s: str) -> list[str]:
    """Usage rows get their ``purpose`` (`ModelCallUsage.purpose`): ``'run'`` in the rows already
    there, the column's default (PostgreSQL 11 and later add such a column without rewriting the
    table)."""
    return [f"ALTER TABLE {s}.usage ADD COLUMN purpose text DEFAULT 'run'"]


def _version_5(s: str) -> list[str]:
    """Usage rows get their ``context`` (`ModelCallUsage.context`): NULL in the rows already
    there (not measured)."""
    return [f"ALTER TABLE {s}.usage ADD COLUMN context text", *_replay_columns(s)]


def _replay_columns(s: str) -> list[str]:
    """Part of version 5: usage rows get ``replayed`` and ``recorded_cost``
    (`ModelCallUsage.replayed`), and the ``recordings`` table keeps recorded model calls
    (`nbagent.models.record`), one JSON entry per call, in the order recorded."""
    return [
        f"ALTER TABLE {s}.usage ADD COLUMN replayed boolean DEFAULT false",
        f"ALTER TABLE {s}.usage ADD COLUMN recorded_cost double precision",
        f"CREATE TABLE {s}.recordings (\n    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n"
        "    thread text NOT NULL,\n    data text NOT NULL\n)",
        f"CREATE INDEX recordings_thread ON {s}.recordings (thread, id)",
    ]


def _version_6(s: str) -> list[str]:
    """Usage rows get ``agent``, ``depth`` and ``parent_call_id`` (`ModelCallUsage.agent`): NULL,
    0 (the column's default) and NULL in the rows already there, made by agents run directly."""
    return [f"ALTER TABLE {s}.usage ADD COLUMN agent text", f"ALTER TABLE {s}.usage ADD COLUMN depth integer DEFAULT 0",
            f"ALTER TABLE {s}.usage ADD COLUMN parent_call_id text"]


def _version_7(s: str) -> list[str]:
    """Usage rows get ``batch`` (`ModelCallUsage.batch`: answered through a provider's batch API,
    priced at the batch price): false in the rows already there."""
    return [f"ALTER TABLE {s}.usage ADD COLUMN batch boolean DEFAULT false"]


MIGRATIONS = [_version_1, _version_2, _version_3, _version_4, _version_5, _version_6, _version_7]
"""Migration *i* (0-based) brings a schema from version *i* to *i + 1*; each returns its
statements for a quoted schema name. A new one is appended here and `SCHEMA_VERSION` raised.
The functions (`_functions`, for the newest schema) are created after them."""
assert len(MIGRATIONS) == SCHEMA_VERSION


def _lock_key(schema: str) -> int:
    # A stable 63-bit key per schema name for pg_advisory_xact_lock.
    value = 0
    for byte in f"nbagent:{schema}".encode():
        value = (value * 131 + byte) % (2**63 - 1)
    return value


def current_version(conn: Any, schema: str) -> int | None:
    """The schema's version: None when the schema has no nbagent tables, 0 when the version table
    exists but is empty."""
    row = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL, to_regclass(%s) IS NOT NULL",
        (f'"{schema}".schema_version', f'"{schema}".threads'),
    ).fetchone()
    if not row[0]:
        if row[1]:
            raise StoreError(f"the schema {schema!r} has a threads table but no nbagent schema_version table; "
                             "it is not an nbagent store (nothing was changed): pass another schema=")
        return None
    found = conn.execute(f'SELECT max(version) FROM "{schema}".schema_version').fetchone()[0]
    return int(found or 0)


def migrate(conn: Any, schema: str, who: str) -> tuple[int, int]:
    """Create or upgrade the schema in one transaction; returns (version before, version after).

    Raises:
        StoreVersionError: the schema was made by a newer nbagent.
    """
    s = quote_schema(schema)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(schema),))
        before = current_version(conn, schema) or 0
        _refuse_newer(before, schema)
        if before == SCHEMA_VERSION:
            return before, before
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {s}.schema_version (version integer PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now(), applied_by text NOT NULL)"
        )
        for number in range(before, SCHEMA_VERSION):
            for statement in MIGRATIONS[number](s):
                conn.execute(statement)
            conn.execute(f"INSERT INTO {s}.schema_version (version, applied_by) VALUES (%s, %s)",
                         (number + 1, who))
        for function in _functions(s):
            conn.execute(function)
    return before, SCHEMA_VERSION


def check(conn: Any, schema: str) -> int | None:
    """The schema's version if this nbagent can use it as it is, else None (it needs migrating).

    Raises:
        StoreVersionError: the schema was made by a newer nbagent.
    """
    version = current_version(conn, schema)
    if version is None:
        return None
    _refuse_newer(version, schema)
    return version if version == SCHEMA_VERSION else None


def _refuse_newer(version: int, schema: str) -> None:
    if version > SCHEMA_VERSION:
        raise StoreVersionError(
            f"the nbagent schema {schema!r} was made by a newer nbagent (schema version {version}; this "
            f"nbagent reads up to {SCHEMA_VERSION}). Upgrade nbagent to use it; nothing was changed."
        )
