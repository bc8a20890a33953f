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

__all__ = ["CHECKPOINT_NAMES", "LAST_CHECKPOINTS", "Statements"]

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
c AS (DELETE FROM {s}.checkpoints WHERE thread IN (SELECT id FROM t))
SELECT id FROM t ORDER BY id"""

_RENEW = """
UPDATE {s}.threads AS t SET lease_until = clock_timestamp() + make_interval(secs => %s)
FROM unnest(%s::text[], %s::text[]) AS l(id, run)
WHERE t.id = l.id AND t.lease_run = l.run"""


class Statements:
    """The statements of one store, for its schema."""

    def __init__(self, schema: str) -> None:
        def fill(template: str) -> str:
            return template.replace("{s}", schema)

        self.schema = schema
        self.load = fill("SELECT {s}.load_thread(%s)")
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

    def append_call(self) -> str:
        """The call of the schema's ``append_step`` function (see `_schema`)."""
        return (f"SELECT {self.schema}.append_step(%(thread)s, %(version)s, %(step)s, %(now)s, %(n)s, "
                "%(tin)s, %(tout)s, %(cost)s, %(meta)s::jsonb, %(status)s, %(title)s, %(lease_run)s, "
                "%(lease_s)s, %(write_id)s, %(msgs)s::jsonb, %(summary)s, %(usage)s::jsonb, %(ledger)s::jsonb)")

    def begin_call(self) -> str:
        """The call of the schema's ``begin_thread`` function (`PostgresStore.create_or_load`)."""
        return (f"SELECT {self.schema}.begin_thread(%(thread)s, %(step)s, %(now)s, %(n)s, %(tin)s, "
                "%(tout)s, %(cost)s, %(meta)s::jsonb, %(status)s, %(title)s, %(lease_run)s, %(lease_s)s, "
                "%(write_id)s, %(msgs)s::jsonb, %(summary)s, %(usage)s::jsonb, %(ledger)s::jsonb)")

    def usage_columns(self, names: tuple[str, ...], one_thread: bool) -> str:
        where = " WHERE thread = %s" if one_thread else ""
        return f"SELECT {', '.join(names)} FROM {self.schema}.usage{where} ORDER BY id"
