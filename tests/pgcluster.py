"""A private PostgreSQL cluster (and PgBouncer) for the tests and the benchmark.

`PgCluster.create()` runs ``initdb`` + ``pg_ctl`` from Debian's ``postgresql`` package
(``/usr/lib/postgresql/<version>/bin``) in a new temporary folder, on a free 127.0.0.1 port, with
password authentication; `PgCluster.stop()` stops that cluster only (its own data folder) and
removes the folder. ``initdb`` refuses to run as root, so as root the server runs as the
unprivileged ``postgres`` user the package creates. No pytest here: bench/bench_postgres.py uses
it too (tests/conftest_postgres.py wraps it in fixtures).
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["INSTALL_HINT", "PgCluster", "bench_cluster", "bin_dir", "free_port"]

USER, DATABASE = "nbagent", "nbagent"
INSTALL_HINT = "bash scripts/install_system_deps.sh (as root; installs Debian's postgresql and pgbouncer)"


def bin_dir() -> Path | None:
    found = [Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin") if os.access(Path(p) / "initdb", os.X_OK)]
    return max(found, key=lambda p: int(p.parent.name)) if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgCluster:
    """One private cluster (and optionally its PgBouncer)."""

    bin: Path
    folder: Path
    port: int
    password: str = field(repr=False)
    as_user: dict[str, Any] = field(default_factory=dict)
    """``user=`` / ``group=`` for subprocess when running as root (else empty)."""
    bouncer: subprocess.Popen[bytes] | None = None
    bouncer_port: int = 0

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def url(self, port: int | None = None) -> str:
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{port or self.port}/{DATABASE}"

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=120,
                              cwd=self.folder, **self.as_user)

    def start(self, durable: bool = False, tls: bool = False) -> None:
        pwfile = self.folder / "pw"
        pwfile.write_text(self.password + "\n")
        self._own(pwfile)
        self.run(str(self.bin / "initdb"), "-D", str(self.data), "-U", USER, "--pwfile", str(pwfile),
                 "-A", "scram-sha-256", "-E", "UTF8", "--no-locale", "--no-sync")
        pwfile.unlink()
        # Tests never crash the server (only clients): fsync off makes their many commits cheap.
        fast = "" if durable else "-c fsync=off -c full_page_writes=off "
        if tls:  # a self-signed certificate for 127.0.0.1 (clients connect with sslmode=require)
            self.run("openssl", "req", "-new", "-x509", "-days", "2", "-nodes", "-subj", "/CN=127.0.0.1",
                     "-keyout", str(self.data / "server.key"), "-out", str(self.data / "server.crt"))
            (self.data / "server.key").chmod(0o600)
            fast += "-c ssl=on "
        options = (f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 {fast}"
                   "-c max_connections=200 -c shared_buffers=32MB")
        self.run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.folder / "server.log"),
                 "-w", "-t", "60", "-o", options, "start")
        self._createdb()

    def _createdb(self) -> None:
        env = {**os.environ, "PGPASSWORD": self.password}
        subprocess.run([str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", USER, DATABASE],
                       check=True, capture_output=True, timeout=60, env=env)

    def _own(self, path: Path) -> None:
        if self.as_user:
            shutil.chown(path, self.as_user["user"], self.as_user["group"])

    def start_bouncer(self) -> int:
        """PgBouncer in transaction mode in front of the cluster; returns its port."""
        if self.bouncer is not None:
            return self.bouncer_port
        exe = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not os.access(exe, os.X_OK):
            raise RuntimeError(f"pgbouncer is not installed; run {INSTALL_HINT}")
        self.bouncer_port = free_port()
        userlist = self.folder / "userlist.txt"
        userlist.write_text(f'"{USER}" "{self.password}"\n')
        ini = self.folder / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"{DATABASE} = host=127.0.0.1 port={self.port} dbname={DATABASE}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.bouncer_port}\nunix_socket_dir =\n"
            f"auth_type = scram-sha-256\nauth_file = {userlist}\npool_mode = transaction\n"
            f"max_client_conn = 200\ndefault_pool_size = 10\nlogfile = {self.folder / 'pgbouncer.log'}\n"
        )
        for path in (userlist, ini):
            self._own(path)
            path.chmod(0o600)
        self.bouncer = subprocess.Popen([exe, str(ini)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        cwd=self.folder, **self.as_user)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.bouncer_port), timeout=1).close()
                return self.bouncer_port
            except OSError:
                if self.bouncer.poll() is not None:
                    break
                time.sleep(0.05)
        log = (self.folder / "pgbouncer.log").read_text() if (self.folder / "pgbouncer.log").exists() else ""
        raise RuntimeError(f"pgbouncer did not start: {log[-1000:]}")

    @classmethod
    def create(cls, binaries: Path, durable: bool = False, tls: bool = False) -> PgCluster:
        """A new cluster in a new temporary folder, started (as ``postgres`` when root); `durable`
        keeps the server's default fsync settings (the benchmark), else fsync is off (tests);
        `tls` turns SSL on with a new self-signed certificate (``openssl`` makes it).

        Raises:
            RuntimeError: it did not start (with the server's log).
        """
        folder = Path(tempfile.mkdtemp(prefix="nbagent-pg-"))
        as_user: dict[str, Any] = {}
        if os.geteuid() == 0:
            as_user = {"user": "postgres", "group": "postgres"}
            shutil.chown(folder, "postgres", "postgres")
        folder.chmod(0o700)
        cluster = cls(binaries, folder, free_port(), "pw-" + secrets.token_hex(8), as_user)
        try:
            cluster.start(durable, tls)
        except subprocess.CalledProcessError as exc:
            log = cluster.folder / "server.log"
            detail = (exc.stderr or "") + (log.read_text()[-2000:] if log.exists() else "")
            cluster.stop()
            raise RuntimeError(f"the private PostgreSQL cluster did not start: {detail}") from None
        return cluster

    def stop(self) -> None:
        if self.bouncer is not None and self.bouncer.poll() is None:
            self.bouncer.terminate()
            try:
                self.bouncer.wait(10)
            except subprocess.TimeoutExpired:
                self.bouncer.kill()
        if (self.data / "postmaster.pid").exists():
            self.run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.folder, ignore_errors=True)


@contextlib.contextmanager
def bench_cluster() -> Iterator[PgCluster | None]:
    """A benchmark's cluster: durable (the server's default fsync settings), stopped at the end;
    None, with a line saying so, when PostgreSQL is not installed."""
    binaries = bin_dir()
    if binaries is None:
        print(f"PostgreSQL is not installed ({INSTALL_HINT}): skipped")
        yield None
        return
    cluster = PgCluster.create(binaries, durable=True)
    try:
        yield cluster
    finally:
        cluster.stop()
