"""The leases of the runs going on in this process, and the heartbeat thread that renews them.

A run keeps a lease on its thread (the ``lease_run`` / ``lease_until`` columns), so a kernel on
another machine refuses to resume a thread that is being run right now; the lease lapses
``lease_s`` after the running process dies. Owns `Leases`: which threads this process holds, and
the daemon thread that renews them every third of ``lease_s`` on a blocking connection of its
own (not the event loops' connections: a loop blocked by a long cell must not let its leases
lapse). Imports the exceptions and the store's ``live_runs``; the statement and the blocking
call come from the store and `_database`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ...exceptions import StoreError
from ..meta import live_runs

__all__ = ["Leases"]


class Leases:
    """The threads whose lease this process renews, with the run holding each."""

    def __init__(self, call: Callable[..., tuple[Any, Any]], lease_s: float) -> None:
        self.call = call
        """`Database.call`: ``call(work, conn) -> (result, conn)`` on a blocking connection."""
        self.lease_s = lease_s
        self.renew_sql = ""
        """The heartbeat's statement (set by the store: it owns the SQL)."""
        self.lock = threading.Lock()
        self.held: dict[str, str] = {}
        self._beater: threading.Thread | None = None

    def hold(self, thread: str, run_id: str) -> None:
        """Renew the lease of `thread` while `run_id` goes on in this process."""
        with self.lock:
            self.held[thread] = run_id
            if self._beater is None or not self._beater.is_alive():
                self._beater = threading.Thread(target=self._beat, name="nbagent-pg-lease", daemon=True)
                self._beater.start()

    def release(self, thread: str) -> None:
        with self.lock:
            self.held.pop(thread, None)

    def forget(self) -> None:
        """Hold nothing (the store closed, or this is a forked child: its parent's heartbeat
        thread does not run here)."""
        with self.lock:
            self.held.clear()
            self._beater = None

    def _beat(self) -> None:
        """The heartbeat thread: renews this process's leases every third of `lease_s`, and ends
        (closing its connection) when no run holds a lease."""
        pid, conn = os.getpid(), None
        try:
            while True:
                time.sleep(self.lease_s / 3)
                with self.lock:
                    if os.getpid() != pid:
                        conn = None  # a forked child: the parent's connection is not ours
                        return
                    for thread, run in list(self.held.items()):
                        if run not in live_runs:  # the run ended without saying so (an error, a kill)
                            del self.held[thread]
                    pairs = list(self.held.items())
                    if not pairs:
                        self._beater = None
                        return
                params = (self.lease_s, [p[0] for p in pairs], [p[1] for p in pairs])

                def renew(c: Any, _: int, params: tuple[Any, ...] = params) -> None:
                    c.execute(self.renew_sql, params)

                try:
                    _, conn = self.call(renew, conn)
                except StoreError:
                    conn = None  # the next beat tries again; a lapsed lease only lets others take over
        finally:
            if conn is not None and not conn.closed:
                conn.close()
