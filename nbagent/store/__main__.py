"""``python -m nbagent.store``: migrate a PostgreSQL database, copy threads between stores.

    python -m nbagent.store migrate postgresql://admin@db/agents [--schema nbagent]
    python -m nbagent.store copy threads.db postgresql://alice@db/agents [--thread support-42 ...] [--replace]

Keep the password out of the command line (and shell history): libpq reads ``PGPASSWORD`` and
``~/.pgpass``. Imports the store package only.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from ..exceptions import NbagentError
from . import copy
from .postgres import migrate
from .postgres._conninfo import split_password


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbagent.store", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("migrate", help="create or upgrade nbagent's tables in a PostgreSQL database")
    up.add_argument("url", help="postgresql://user@host:port/database")
    up.add_argument("--schema", default="nbagent", help="the PostgreSQL schema (default: nbagent)")
    cp = commands.add_parser("copy", help="copy threads from one store to another (a file path, a URL)")
    cp.add_argument("source")
    cp.add_argument("target")
    cp.add_argument("--thread", action="append", dest="threads", help="a thread id (repeat; default: all)")
    cp.add_argument("--replace", action="store_true", help="replace threads the target already has")
    args = parser.parse_args(argv)
    try:
        if args.command == "migrate":
            before, after = asyncio.run(migrate(args.url, schema=args.schema))
            where = split_password(args.url)[0]
            change = "already up to date" if before == after else f"migrated from version {before}"
            print(f"{where} schema {args.schema!r}: version {after} ({change})")
        else:
            copied = asyncio.run(copy(args.source, args.target, args.threads, replace=args.replace))
            print(f"copied {len(copied)} thread{'s' if len(copied) != 1 else ''}: {', '.join(copied)}")
    except NbagentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
