from tests.conftest_local_llm import *  # noqa


import pytest as _pytest  # noqa: E402


@_pytest.fixture(scope="session", autouse=True)
def _nbagent_store_in_tmp(tmp_path_factory):  # type: ignore[no-untyped-def]
    """Agents built without a store write to a temporary SQLite file, never ./.nbagent/threads.db."""
    import os

    path = tmp_path_factory.mktemp("nbagent-store") / "threads.db"
    old = os.environ.get("NBAGENT_STORE")
    os.environ["NBAGENT_STORE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("NBAGENT_STORE", None)
    else:
        os.environ["NBAGENT_STORE"] = old
