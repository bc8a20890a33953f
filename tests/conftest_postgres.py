"""Session fixtures for tests against a real PostgreSQL server (and PgBouncer in front of it).

A plain module: ``tests/conftest.py`` does ``from tests.conftest_postgres import *``.

- ``postgres_server``: a private cluster made for this test session (``initdb`` + ``pg_ctl`` from
  Debian's ``postgresql`` package, ``/usr/lib/postgresql/<version>/bin``) in a temporary folder,
  listening on a free 127.0.0.1 port with password authentication, stopped and removed at the end
  (only this cluster: its own data folder and PID). ``initdb`` refuses to run as root, so as root
  the server runs as the unprivileged ``postgres`` user the package creates.
- ``postgres_url``: the cluster's URL (password included), ``postgresql://nbagent:...@127.0.0.1:<port>/nbagent``.
- ``pgbouncer_url``: the same database through a PgBouncer in transaction mode (started on first
  use, stopped at the end).
- ``pg_schema``: a fresh schema name per test, so each test gets empty tables
  (``PostgresStore(postgres_url, schema=pg_schema)``).

Tests using them are marked ``@pytest.mark.postgres``. ``NBAGENT_SKIP_POSTGRES=1`` skips them;
when the binaries are missing they fail with the command that installs them
(``scripts/install_system_deps.sh``, run by ``make test``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

__all__ = ["pg_schema", "pgbouncer_url", "postgres_server", "postgres_url", "skip_without_postgres"]

from tests.pgcluster import INSTALL_HINT, PgCluster, bin_dir


def skip_without_postgres() -> None:
    """Skip when NBAGENT_SKIP_POSTGRES=1."""
    if os.environ.get("NBAGENT_SKIP_POSTGRES", "") not in ("", "0"):
        pytest.skip("NBAGENT_SKIP_POSTGRES=1")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PgCluster]:
    skip_without_postgres()
    found = bin_dir()
    if found is None:
        pytest.fail(f"PostgreSQL is not installed (no /usr/lib/postgresql/<version>/bin/initdb); run "
                    f"{INSTALL_HINT}, or set NBAGENT_SKIP_POSTGRES=1 to skip these tests", pytrace=False)
    try:
        cluster = PgCluster.create(found)
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PgCluster) -> str:
    return postgres_server.url()


@pytest.fixture(scope="session")
def pgbouncer_url(postgres_server: PgCluster) -> str:
    try:
        return postgres_server.url(postgres_server.start_bouncer())
    except RuntimeError as exc:
        pytest.fail(f"{exc}; or set NBAGENT_SKIP_POSTGRES=1", pytrace=False)


@pytest.fixture
def pg_schema() -> str:
    return "t_" + uuid.uuid4().hex[:12]
