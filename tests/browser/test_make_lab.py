"""The front door: `make lab` opens JupyterLab with the quickstart, and the quickstart answers.

What a newcomer does, checked end to end: the real ``make lab`` runs (as a subprocess, in its own
process group, from the repository root), JupyterLab asks the web browser to open the quickstart,
headless Chromium opens that very page, runs all cells, and the agent's answer arrives from the
bundled local model: the ``get_time`` row of the view's tool table is ``done``, the finished run's
static summary says ``completed``, and no output holds a traceback.

How it differs from a user's session, and why:

- ``VENV`` is the venv running these tests (``sys.prefix``), so nothing is downloaded. When its
  stamp ``$(VENV)/.installed`` is missing or older than pyproject.toml (a dev venv set up by hand),
  make would reinstall; the test then passes ``-o $(VENV)/.installed`` ("treat it as old, do not
  remake it"), which skips only the install step, and only because nbagent is already importable
  from this very checkout in that venv (asserted). The stamp is never created or touched: a later
  ``make test`` must still see that the venv may be out of date.
- ``BROWSER`` is a tiny script that records the URL it is given instead of starting a browser.
- ``LAB_ARGS`` (a Makefile variable appended to the ``jupyter lab`` command) sets a free port, a
  random token, checkpoints in a temp dir (nothing written into notebooks/), no news / update
  checks, ``window.jupyterapp`` for the harness, and ``--allow-root`` when running as root.
- Jupyter's config/runtime/data/settings/workspace dirs are temporary (``JupyterServer.env()``, with
  the harness's lab settings: windowing mode "none", no autosave, so the notebook file is never
  written); ``NBAGENT_STORE`` is a temp SQLite file; ``OPENAI_API_KEY`` is removed, so ``auto()``
  is the local model, which the ``local_llm_base_url`` fixture has already started (and the
  kernel's ``local()`` reuses).

At the end: ``POST /api/shutdown``, then the process group this test started is killed by its id.
A screenshot of the quickstart's chat view goes to tests/browser/artifacts/quickstart.png; the window
as first opened (before running) goes to tests/browser/artifacts/quickstart-lab.png. (The README's
pictures are made by tests/browser/test_screenshots.py.)
"""

from __future__ import annotations

import contextlib
import html
import importlib.util
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .harness import KNOWN_CONSOLE_NOISE, JupyterServer, NotebookPage

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = "01_quickstart.ipynb"
ARTIFACTS = Path(os.environ.get("NBAGENT_BROWSER_ARTIFACTS", Path(__file__).parent / "artifacts"))
ANSWER_TIMEOUT = 180.0  # the whole notebook, with the local model, on a loaded 2-core machine
STARTUP_TIMEOUT = 180.0

pytestmark = [pytest.mark.local_llm]

RECORD_BROWSER = """#!/bin/sh
# Stands in for the web browser `jupyter lab` opens: records the URL it was given.
printf '%s\\n' "$1" >> "{out}"
"""

_JS_TOOL_ROWS = """
() => Array.from(document.querySelectorAll('.nbagent-chat .nbagent-tool-row')).map(e => e.innerText)
"""
_JS_RESULT_SUMMARY = """
() => Array.from(document.querySelectorAll('.jp-OutputArea-output .nbagent-result'))
           .map(e => e.innerText).join('\\n')
"""


def _make_venv_flags() -> tuple[Path, list[str]]:
    """(VENV for make, extra make flags): the venv running the tests, without reinstalling it."""
    venv = Path(sys.prefix)
    jupyter = venv / "bin" / "jupyter"
    if not jupyter.exists():
        pytest.fail(f"{jupyter} is missing: run the tests from the project venv (make test)", pytrace=False)
    stamp = venv / ".installed"
    pyproject = REPO / "pyproject.toml"
    if stamp.exists() and stamp.stat().st_mtime >= pyproject.stat().st_mtime:
        return venv, []  # exactly what a user's second `make lab` does
    spec = importlib.util.find_spec("nbagent")
    origin = Path(spec.origin).resolve() if spec and spec.origin else None
    assert origin is not None and origin.is_relative_to(REPO), (
        f"stamp {stamp} missing or stale and nbagent in {venv} is not this checkout ({origin})"
    )
    return venv, ["-o", str(stamp)]


def _redirect_target(open_file_url: str) -> str:
    """The http URL inside the redirect page `jupyter lab FILE` hands to the browser."""
    path = Path(urllib.parse.unquote(urllib.parse.urlparse(open_file_url).path))
    m = re.search(r'content="\d+;url=([^"]+)"', path.read_text(encoding="utf-8"))
    assert m, f"no redirect in {path}"
    return html.unescape(m.group(1))


@contextlib.contextmanager
def _make_lab(tmp_path: Path) -> Iterator[tuple[JupyterServer, subprocess.Popen[bytes], Path]]:
    """Run `make lab` against an external-mode JupyterServer; yields (server, make process, url file)."""
    log_path = tmp_path / "make-lab.log"
    server = JupyterServer(
        REPO / "notebooks", app="lab", external=True, log_path=log_path, startup_timeout=STARTUP_TIMEOUT
    )
    urls = tmp_path / "browser-urls.txt"
    fake_browser = tmp_path / "record-browser"
    fake_browser.write_text(RECORD_BROWSER.format(out=urls), encoding="utf-8")
    fake_browser.chmod(0o755)

    env = server.env()
    for var in ("OPENAI_API_KEY", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"):
        env.pop(var, None)  # a fresh shell: no key, and no settings from an outer `make test`
    env.update(NBAGENT_STORE=str(tmp_path / "threads.db"), BROWSER=str(fake_browser))
    lab_args = [
        f"--ServerApp.port={server.port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={server.token}",
        f"--FileCheckpoints.checkpoint_dir={server.tmp_dir / 'checkpoints'}",
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        lab_args.append("--ServerApp.allow_root=True")
    venv, flags = _make_venv_flags()
    make = shutil.which("make")
    if make is None:
        pytest.fail("`make` is not installed (apt-get install -y make)", pytrace=False)
    cmd = [make, "--no-print-directory", "lab", f"VENV={venv}", f"LAB_ARGS={shlex.join(lab_args)}", *flags]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: make, sh, jupyter, the kernel
        )
    try:
        server.start(watch=proc)
        yield server, proc, urls
    finally:
        server.stop(timeout=30)  # POST /api/shutdown: stops the kernel, then the server exits
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # the group this test started, by its id; nothing else
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        server.cleanup()


def test_make_lab_opens_the_quickstart_and_the_agent_answers(
    local_llm_base_url: str,
    tmp_path: Path,
    page_factory: Callable[..., NotebookPage],
) -> None:
    t0 = time.monotonic()
    with _make_lab(tmp_path) as (server, proc, urls):
        t_server = time.monotonic() - t0

        # `make lab` asked the browser to open the quickstart (a local redirect page, as Jupyter does)
        deadline = time.monotonic() + 30
        while not (urls.exists() and urls.read_text().strip()) and time.monotonic() < deadline:
            assert proc.poll() is None, server.log_text()[-3000:]
            time.sleep(0.2)
        assert urls.exists(), f"`make lab` did not open a browser; log:\n{server.log_text()[-3000:]}"
        opened = urls.read_text().split()[0]
        lab_url = _redirect_target(opened) if opened.startswith("file:") else opened
        parts = urllib.parse.urlparse(lab_url)
        assert (parts.hostname, parts.port) == ("127.0.0.1", server.port), lab_url
        assert parts.path == f"/lab/tree/{NOTEBOOK}", lab_url

        # that page, in Chromium: the quickstart is the notebook shown, with its kernel up
        page = page_factory(server, timeout=90.0)
        page.open(NOTEBOOK, url=lab_url)
        state = page.state()
        assert state["path"] == NOTEBOOK, state
        assert state["cells"] >= 10, state
        t_open = time.monotonic() - t0
        page.screenshot(ARTIFACTS / "quickstart-lab.png", full_page=False)  # what `make lab` shows first

        page.run_all()
        page.wait_for(
            lambda: any("get_time" in r and "done" in r for r in page.eval(_JS_TOOL_ROWS)),
            "the view's get_time row to be done",
            ANSWER_TIMEOUT,
            interval=0.5,
        )
        summary = page.wait_for(
            lambda: (s := page.eval(_JS_RESULT_SUMMARY)) and "completed" in s and s,
            "the finished run's static summary",
            ANSWER_TIMEOUT,
            interval=0.5,
        )
        page.wait_idle(timeout=ANSWER_TIMEOUT)
        t_answer = time.monotonic() - t0

        report = page.cell_report()
        text = page.output_text()
        assert report["errors"] == [], report["errors"]
        assert report["unexecuted"] == [], f"code cells not run: {report['unexecuted']}"
        assert "Traceback" not in text
        assert "get_time" in summary and "Tokyo" in summary, summary
        assert "local-model" in text, f"not the bundled local model (no key set):\n{text[:1000]}"
        assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []

        view = page.page.locator(".jp-Cell", has=page.page.locator(".nbagent-chat")).first
        view.scroll_into_view_if_needed()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        view.screenshot(path=str(ARTIFACTS / "quickstart.png"))
        print(
            f"\nmake lab: server up {t_server:.1f}s, notebook open + kernel idle {t_open:.1f}s,"
            f" all cells done {t_answer:.1f}s (since `make lab`)\n--- outputs ---\n{text}"
        )
    assert proc.poll() is not None, "`make lab` still running after shutdown"
