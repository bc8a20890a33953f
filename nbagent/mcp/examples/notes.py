"""A notes MCP server on SQLite: the example server of docs/mcp.md and notebook 06.

    python -m nbagent.mcp.examples.notes            # stdio (what MCPTools.stdio starts)
    python -m nbagent.mcp.examples.notes --http 8000  # streamable HTTP on 127.0.0.1:8000/mcp

The notes live in the SQLite file named by ``NOTES_DB`` (default ``notes.db`` in the working
directory). Its tools carry MCP annotations, so nbagent's approval rule applies without any
setting: ``list_notes`` and ``read_note`` are read-only (they run at once), ``add_note`` writes
(it waits for approval) and ``delete_note`` is destructive (it waits for approval).

Written with the ``mcp`` SDK's server class (``MCPServer``); imports the SDK and the standard
library only (not nbagent).
"""

from __future__ import annotations

import os
import sqlite3
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("notes", instructions="A small notebook of notes kept in SQLite.")


def _db() -> sqlite3.Connection:
    db = sqlite3.connect(os.environ.get("NOTES_DB", "notes.db"))
    db.execute("CREATE TABLE IF NOT EXISTS notes (title TEXT PRIMARY KEY, text TEXT NOT NULL)")
    return db


@server.tool(annotations=ToolAnnotations(read_only_hint=True), structured_output=False)
def list_notes() -> str:
    """List the titles of all notes."""
    with _db() as db:
        titles = [row[0] for row in db.execute("SELECT title FROM notes ORDER BY title")]
    return "\n".join(titles) if titles else "(no notes yet)"


@server.tool(annotations=ToolAnnotations(read_only_hint=True), structured_output=False)
def read_note(title: str) -> str:
    """Read the note with this title."""
    with _db() as db:
        row = db.execute("SELECT text FROM notes WHERE title = ?", (title,)).fetchone()
    if row is None:
        raise ToolError(f"there is no note titled {title!r}; list_notes gives the titles")
    return str(row[0])


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False), structured_output=False)
def add_note(title: str, text: str) -> str:
    """Add a note (or replace the note with the same title)."""
    with _db() as db:
        db.execute("INSERT OR REPLACE INTO notes (title, text) VALUES (?, ?)", (title, text))
    return f"saved note {title!r}"


@server.tool(annotations=ToolAnnotations(destructive_hint=True), structured_output=False)
def delete_note(title: str) -> str:
    """Delete the note with this title."""
    with _db() as db:
        deleted = db.execute("DELETE FROM notes WHERE title = ?", (title,)).rowcount
    if not deleted:
        raise ToolError(f"there is no note titled {title!r}")
    return f"deleted note {title!r}"


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        import anyio

        anyio.run(lambda: server.run_streamable_http_async(host="127.0.0.1", port=int(sys.argv[2])))
    else:
        server.run()


if __name__ == "__main__":
    main()
