"""The SQL of `PostgresStore`, one statement per store call wherever that is possible.

Owns the statements (templates with ``{s}`` for the quoted schema) and `Statements`, which fills
them in once per store. Imports nothing of nbagent.

Why single statements: in autocommit mode one statement is one transaction, which costs one
round trip, sees one snapshot (a `load` is consistent without ``BEGIN``), and is what PgBouncer's
transaction mode needs. A load, an append and a run's start are calls of the schema's functions
``load_thread``, ``append_step`` and ``begin_thread`` (`_schema`), whose statements the server
plans once per session (a plain statement is planned again on every call).
"""

from __future__ import annotations

__all__ = ["APPEND_ARGS", "BEGIN_ARGS", "CHECKPOINT_NAMES", "LAST_CHECKPOINTS", "Statements"]

CHECKPOINT_NAMES = ("thread, version, step, time, messages, last_message, input_tokens, output_tokens, cost_total, "
                    "status, run_id, stop_reason, error")
"""The checkpoints table's columns, in `Checkpoint` field order."""

LAST_CHECKPOINTS = f"""
SELECT * FROM (SELECT DISTINCT ON (run_id) {CHECKPOINT_NAMES} FROM {{s}}.checkpoints
               WHERE thread = %s AND run_id IS NOT NULL ORDER BY run_id, version DESC) AS last
ORDER BY version"""
"""The last checkpoint of each run of a thread, in the order they were written."""

_DELETE = """
WITH t AS (DELETE FROM {s}.threads WHERE {where} RETURNING id),
m AS (DELETE FROM {s}.messages WHERE thread IN (SELECT id FROM t)),
u AS (DELETE FROM {s}.usage WHERE thread IN (SELECT id FROM t)),
l AS (DELETE FROM {s}.ledger WHERE thread IN (SELECT id FROM t)),
c AS (DELETE FROM {s}.checkpoints WHERE thread IN (SELECT id FROM t)),
r AS (DELETE FROM {s}.recordings WHERE thread IN (SELECT id FROM t))
SELECT id FROM t ORDER BY id"""

_RENEW = """
UPDATE {s}.threads AS t SET lease_until = clock_timestamp() + make_interval(secs => %s)
FROM unnest(%s::text[], %s::text[]) AS l(id, run)
WHERE t.id = l.id AND t.lease_run = l.run"""


APPEND_ARGS = (
    ("thread", "text"), ("version", "bigint"), ("step", "integer"), ("now", "double precision"),
    ("n", "integer"), ("tin", "bigint"), ("tout", "bigint"), ("cost", "double precision"), ("meta", "jsonb"),
    ("status", "text"), ("title", "text"), ("lease_run", "text"), ("lease_s", "double precision"),
    ("write_id", "text"), ("msgs", "jsonb"), ("summary", "text"), ("usage", "jsonb"), ("ledger", "jsonb"),
)
"""The parameters of the schema's ``append_step`` function, in order, with their types (its
``p_<name>`` arguments, see `_schema`); ``begin_thread`` takes the same but the version."""
BEGIN_ARGS = tuple(arg for arg in APPEND_ARGS if arg[0] != "version")
"""The parameters of ``begin_thread``: those of ``append_step`` but the version."""


def _call(schema: str, function: str, args: tuple[tuple[str, str], ...]) -> bytes:
    """``SELECT <schema>.<function>($1::type, ...)``, each parameter typed (as text from libpq)."""
    placeholders = ", ".join(f"${i}::{kind}" for i, (_, kind) in enumerate(args, 1))
    return f"SELECT {schema}.{function}({placeholders})".encode()


class Statements:
    """The statements of one store, for its schema."""

    def __init__(self, schema: str) -> None:
        def fill(template: str) -> str:
            return template.replace("{s}", schema)

        self.schema = schema
        self.delete = fill(_DELETE.replace("{where}", "id = %s"))
        self.prune = fill(_DELETE.replace(
            "{where}",
            "updated < %s AND NOT coalesce(lease_run IS NOT NULL AND lease_until > clock_timestamp(), false)",
        ))
        self.renew = fill(_RENEW)
        self.threads = fill("SELECT id, messages, updated, status, title FROM {s}.threads ORDER BY updated DESC")
        self.checkpoints = fill(f"SELECT {CHECKPOINT_NAMES} FROM {{s}}.checkpoints WHERE thread = %s ORDER BY version")
        self.last_checkpoints = fill(LAST_CHECKPOINTS)
        self.head = fill("SELECT version, last_write FROM {s}.threads WHERE id = %s")
        # The three calls every run makes go through `_libpq` (either way): $n placeholders, bytes.
        self.load_call = fill("SELECT {s}.load_thread($1::text)").encode()
        self.append_call = _call(schema, "append_step", APPEND_ARGS)
        self.begin_call = _call(schema, "begin_thread", BEGIN_ARGS)

    def usage_columns(self, names: tuple[str, ...], one_thread: bool) -> str:
        where = " WHERE thread = %s" if one_thread else ""
        return f"SELECT {', '.join(names)} FROM {self.schema}.usage{where} ORDER BY id"
