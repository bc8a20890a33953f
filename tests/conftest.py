"""Shared fixtures: the local model server (tests/conftest_local_llm.py), a private PostgreSQL
cluster (tests/conftest_postgres.py), a temporary default store, and the test order."""

import os
from pathlib import Path

import pytest

from tests.conftest_local_llm import *  # noqa: F403
from tests.conftest_postgres import *  # noqa: F403


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With ``--doctest-modules`` (pyproject.toml, for nbagent/display's docstring examples), the
    helper modules here are not imported as doctest modules: some start a server on import (an
    MCP server reading stdin). Test modules and conftests are collected as always."""
    name = collection_path.name
    helper = name.endswith(".py") and not name.startswith(("test_", "conftest"))
    return True if helper and config.getoption("doctestmodules", False) else None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the real-browser tests last.

    Playwright's sync API keeps an event loop running in the main thread while its (session-scoped)
    browser is open; any test after it would see "a running event loop" (asyncio.run and
    pytest-asyncio fail). Browser tests last, their fixtures close at the end of the session.
    """
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None
               or item.nodeid.startswith("tests/browser/"))
    if os.environ.get("NBAGENT_PERF") != "1":
        skip = pytest.mark.skip(reason="a wall-clock check: NBAGENT_PERF=1 runs it (on a quiet machine)")
        for item in items:
            if item.get_closest_marker("perf") is not None:
                item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _nbagent_store_in_tmp(tmp_path_factory):  # type: ignore[no-untyped-def]
    """Agents built without a store write to a temporary SQLite file, never ./.nbagent/threads.db."""
    path = tmp_path_factory.mktemp("nbagent-store") / "threads.db"
    old = os.environ.get("NBAGENT_STORE")
    os.environ["NBAGENT_STORE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("NBAGENT_STORE", None)
    else:
        os.environ["NBAGENT_STORE"] = old
