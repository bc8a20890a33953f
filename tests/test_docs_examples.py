"""Every ```python block of README.md and docs/*.md runs, in order, in one namespace per file.

Blocks that start the bundled local model need it (skipped with NBAGENT_SKIP_LOCAL_LLM=1); blocks
naming an OpenAI model get a fake key and never reach the network (nothing is requested there).
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import os
import re
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def blocks(path: Path) -> list[tuple[int, str]]:
    text = path.read_text()
    return [(text[: m.start()].count("\n") + 2, m.group(1)) for m in FENCE.finditer(text)]


def run_block(code: str, filename: str, namespace: dict) -> None:
    compiled = compile(code, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if compiled.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(compiled, namespace))
    else:
        exec(compiled, namespace)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_code_blocks_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found = blocks(path)
    if not found:
        pytest.skip(f"{path.name} has no python blocks")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NBAGENT_STORE", str(tmp_path / "threads.db"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-docs-example-not-a-key")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    skip_local = os.environ.get("NBAGENT_SKIP_LOCAL_LLM") == "1"
    module = types.ModuleType("nbagent_docs_example")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses look their module up
    namespace = module.__dict__
    for line, code in found:
        if skip_local and "local()" in code:
            continue
        try:
            run_block(code, f"{path.name}:{line}", namespace)
        except Exception as exc:
            raise AssertionError(f"{path.name}, block at line {line} failed: {exc!r}") from exc
