"""Binder cannot be reached from here, so build what it would build: a fresh virtual environment
from exactly the files in binder/ (requirements.txt, then postBuild from the repository root), and
execute every notebook in it, offline.

Slow (a fresh install): marked ``notebooks`` and ``slow``; skipped with NBAGENT_SKIP_BINDER=1 or
NBAGENT_SKIP_NOTEBOOKS=1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.notebooks,
    pytest.mark.slow,
    pytest.mark.local_llm,
    pytest.mark.skipif(
        os.environ.get("NBAGENT_SKIP_BINDER") == "1" or os.environ.get("NBAGENT_SKIP_NOTEBOOKS") == "1"
        or os.environ.get("NBAGENT_SKIP_LOCAL_LLM") == "1",
        reason="binder environment test skipped by environment variable",
    ),
]

RUNNER = textwrap.dedent("""
    import sys, nbformat
    from nbclient import NotebookClient
    for path in sys.argv[1:]:
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=300, kernel_name="python3").execute()
        print("ok", path, flush=True)
""")


@pytest.mark.timeout(1800)  # a fresh install of JupyterLab and the extras, then every notebook
def test_binder_environment_runs_the_notebooks(tmp_path: Path, local_llm_base_url: str) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns(
        ".venv", ".git", "bench", "tests", ".nbagent", "*.egg-info", "__pycache__", "build"))
    # Binder clones the whole repository: notebook 07 starts the loopback batch server of the tests.
    for name in ("__init__.py", "wire/__init__.py", "wire/batch_server.py", "wire/batch_answers.py",
                 "wire/scripted_server.py"):
        (repo / "tests" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "tests" / name, repo / "tests" / name)
    venv = tmp_path / "binder-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bin_dir = venv / "bin"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv)}
    env.pop("PYTHONPATH", None)
    env.pop("OPENAI_API_KEY", None)
    subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-q", "-r", "binder/requirements.txt"],
                   cwd=repo, env=env, check=True, timeout=900)
    subprocess.run(["bash", "binder/postBuild"], cwd=repo, env=env, check=True, timeout=900)
    notebooks = sorted(str(p) for p in (repo / "notebooks").glob("*.ipynb"))
    assert len(notebooks) == len(list((ROOT / "notebooks").glob("*.ipynb"))) >= 7
    env["NBAGENT_STORE"] = str(tmp_path / "threads.db")
    env["MPLBACKEND"] = "Agg"
    done = subprocess.run([str(bin_dir / "python"), "-c", RUNNER, *notebooks], cwd=repo / "notebooks",
                          env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert done.stdout.count("ok ") == len(notebooks)
