"""Every ```python block of README.md and docs/*.md runs, in order, in one namespace per file,
and prints what the page says it prints.

Expected output is written under the ``print`` that makes it, one ``#>`` line per printed line
(as pydantic-ai's docs do); ``...`` inside such a line matches anything (ids, timings). A block
with ``#>`` lines must print exactly those lines, in order; what a block prints is compared in
full, so a page can never show output the code does not give.

Blocks that start the bundled local model need it (skipped with NBAGENT_SKIP_LOCAL_LLM=1); blocks
naming an OpenAI model get a fake key and never reach the network (nothing is requested there).
Blocks that read ``os.environ["DATABASE_URL"]`` get a fresh database of the tests' private
PostgreSQL cluster there (skipped with NBAGENT_SKIP_POSTGRES=1).
Blocks that use Dask or start a Ray cluster (``ray.init``) run on real ones (Ray's on 127.0.0.1 with
its usage reporting off, shut down after the page); NBAGENT_SKIP_CLUSTER=1, or an engine that is
not installed, skips them.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import importlib.util
import inspect
import io
import os
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def blocks(path: Path) -> list[tuple[int, str]]:
    text = path.read_text()
    return [(text[: m.start()].count("\n") + 2, m.group(1)) for m in FENCE.finditer(text)]


def run_block(code: str, filename: str, namespace: dict) -> str:
    """Run one block; return what it printed."""
    compiled = compile(code, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if compiled.co_flags & inspect.CO_COROUTINE:
            asyncio.run(eval(compiled, namespace))
        else:
            exec(compiled, namespace)
    return out.getvalue()


def expected_output(code: str) -> list[str] | None:
    """The block's ``#>`` lines (None when it has none)."""
    lines = [line.strip() for line in code.splitlines()]
    found = [line[2:].removeprefix(" ") for line in lines if line.startswith("#>")]
    return found or None


def matches(expected: str, actual: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, actual.rstrip()) is not None


def check_output(where: str, code: str, printed: str) -> None:
    expected = expected_output(code)
    actual = printed.splitlines()
    if expected is None:
        assert not actual, f"{where} prints but the page shows no output (add #> lines):\n{printed}"
        return
    assert len(actual) == len(expected) and all(map(matches, expected, actual)), (
        f"{where} printed:\n{printed}\nbut the page says:\n" + "\n".join(expected))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_code_blocks_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         request: pytest.FixtureRequest) -> None:
    found = blocks(path)
    if not found:
        pytest.skip(f"{path.name} has no python blocks")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NBAGENT_STORE", str(tmp_path / "threads.db"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-docs-example-not-a-key")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    skip_local = os.environ.get("NBAGENT_SKIP_LOCAL_LLM") == "1"
    skip_postgres = os.environ.get("NBAGENT_SKIP_POSTGRES", "") not in ("", "0")
    if not skip_postgres and any(DATABASE_URL in code for _, code in found):
        monkeypatch.setenv("DATABASE_URL", _fresh_database(request.getfixturevalue("postgres_server")))
    skip_cluster = os.environ.get("NBAGENT_SKIP_CLUSTER") == "1" or not all(
        importlib.util.find_spec(name) for name in ("ray", "distributed"))
    module = types.ModuleType("nbagent_docs_example")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses look their module up
    namespace = module.__dict__
    with contextlib.ExitStack() as stack:
        for line, code in found:
            if (skip_local and "local()" in code) or (skip_postgres and DATABASE_URL in code):
                continue
            if skip_cluster and ("ray.init(" in code or "dask" in code):
                continue
            if "ray.init(" in code:
                stack.enter_context(_ray_cluster(monkeypatch))
            where = f"{path.name}, block at line {line}"
            try:
                printed = run_block(code, f"{path.name}:{line}", namespace)
            except Exception as exc:
                raise AssertionError(f"{where} failed: {exc!r}") from exc
            check_output(where, code, printed)


@contextlib.contextmanager
def _ray_cluster(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """For a page's Ray blocks: loopback only, no usage reporting, time to start on a busy
    machine (tests/cluster_engines.py); the cluster the page started is shut down after it."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (no wheel for this platform?)")
    from tests.cluster_engines import RAY_ENV, ray_start_patience

    for name, value in RAY_ENV.items():
        monkeypatch.setenv(name, value)
    try:
        with ray_start_patience():
            yield
    finally:
        ray.shutdown()


DATABASE_URL = 'os.environ["DATABASE_URL"]'


def _fresh_database(server: Any) -> str:
    """A new, empty database on the session's cluster; its URL."""
    import uuid

    import psycopg

    name = "docs_" + uuid.uuid4().hex[:10]
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server.url().rsplit("/", 1)[0] + "/" + name


def test_expected_output_lines_are_read_and_matched() -> None:
    code = 'print(1)\n#> 1\nprint("run_1a2b done")\n#> run_... done\n'
    assert expected_output(code) == ["1", "run_... done"]
    check_output("example", code, "1\nrun_1a2b done\n")
    with pytest.raises(AssertionError, match="but the page says"):
        check_output("example", code, "1\nsomething else\n")
    with pytest.raises(AssertionError, match="prints but the page shows no output"):
        check_output("example", "print(2)\n", "2\n")


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_output_lines_sit_inside_code_blocks(path: Path) -> None:
    """A ``#>`` line (an example's printed output) outside a fenced block is pasted text that
    reads as part of a sentence (the README's "Streaming events" had three)."""
    inside, stray = False, []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            inside = not inside
        elif not inside and line.lstrip().startswith("#>"):
            stray.append(number)
    assert stray == [], f"{path.name}: #> lines outside a code block at lines {stray}"


def test_the_readme_links_every_page_of_docs() -> None:
    """The README's documentation list is how a reader finds the pages: none may be missing."""
    readme = (ROOT / "README.md").read_text()
    listed = readme[readme.index("## Documentation"):]
    listed = listed[:listed.index("\n## ")]
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if f"(docs/{p.name})" not in listed]
    assert not missing, f"README.md's Documentation list lacks {missing}"
