"""Fixtures for real-browser tests (JupyterLab 4 / Notebook 7 in headless Chromium).

Everything under tests/browser is marked ``browser``; ``NBAGENT_SKIP_BROWSER=1`` skips it. A missing
Chromium is an error, not a skip (run ``make test``, which installs it, or set the variable).

Fixtures
    browser_root        session temp dir served by both servers; notebooks go here
    jupyter_lab         session JupyterServer(app="lab")        (started on first use)
    jupyter_notebook7   session JupyterServer(app="notebook")   (started on first use)
    jupyter_app         parametrized over both servers (ids "lab", "nb7")
    chromium            session harness.Browser (one Chromium process)
    make_notebook       make_notebook(cells, name=None) -> relative path of a new .ipynb in browser_root
    page_factory        page_factory(server, notebook=None, *, init_script=None, timeout=60.0)
                        -> NotebookPage (opened and kernel idle when notebook is given); on test
                        failure saves artifacts/failure-<test>.png, -server.log, -console.log

Browser tests must be plain ``def`` tests: Playwright's sync API refuses to run inside an asyncio loop.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from .harness import Browser, JupyterServer, NotebookPage, find_chromium, write_notebook

HERE = Path(__file__).resolve().parent
ARTIFACTS_DIR = Path(os.environ.get("NBAGENT_BROWSER_ARTIFACTS", HERE / "artifacts"))
_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()
_TIMINGS: list[tuple[str, dict[str, float]]] = []
_STARTUPS: dict[str, float] = {}

MISSING_CHROMIUM = (
    "Chromium is needed for the browser tests (tests/browser) but was not found at {where}.\n"
    "Run `make test` (it installs system dependencies via scripts/install_system_deps.sh), or install it\n"
    "yourself (`apt-get install -y chromium`, or set CHROMIUM_PATH=/path/to/chromium), or skip the\n"
    "browser suite with NBAGENT_SKIP_BROWSER=1."
)


def _in_this_dir(item: pytest.Item) -> bool:
    try:
        Path(str(item.path)).resolve().relative_to(HERE)
    except ValueError:
        return False
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = os.environ.get("NBAGENT_SKIP_BROWSER", "").strip() not in ("", "0")
    reason = pytest.mark.skip(reason="NBAGENT_SKIP_BROWSER=1")
    for item in items:
        if not _in_this_dir(item):
            continue
        item.add_marker(pytest.mark.browser)
        if skip:
            item.add_marker(reason)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report = yield
    if _in_this_dir(item):
        item.stash.setdefault(_REPORTS, {})[report.when] = report
    return report


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not _TIMINGS or not (config.get_verbosity() > 0 or os.environ.get("NBAGENT_BROWSER_TIMINGS")):
        return
    tr = terminalreporter
    tr.write_sep("-", "browser timings (s)")
    for what, secs in sorted(_STARTUPS.items()):
        tr.write_line(f"startup {what}: {secs:.2f}")
    for name, t in _TIMINGS:
        parts = ", ".join(f"{k}={v:.2f}" for k, v in t.items())
        tr.write_line(f"{name}: {parts}")


# ------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def browser_artifacts_dir() -> Path:
    ARTIFACTS_DIR.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS_DIR


@pytest.fixture(scope="session")
def browser_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder served by the Jupyter servers; notebooks are written here."""
    return tmp_path_factory.mktemp("nb-root")


def _server(root: Path, app: str, tmp: Path) -> Iterator[JupyterServer]:
    server = JupyterServer(root, app=app, log_path=tmp / f"server-{app}.log")
    server.start()
    _STARTUPS[f"jupyter {app} server"] = server.startup_seconds or 0.0
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def jupyter_lab(browser_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    """A private JupyterLab server (session-scoped) rooted at ``browser_root``."""
    yield from _server(browser_root, "lab", tmp_path_factory.mktemp("lab-server"))


@pytest.fixture(scope="session")
def jupyter_notebook7(
    browser_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JupyterServer]:
    """A private Notebook 7 server (session-scoped) rooted at ``browser_root``."""
    yield from _server(browser_root, "notebook", tmp_path_factory.mktemp("nb7-server"))


@pytest.fixture(params=["lab", "nb7"])
def jupyter_app(request: pytest.FixtureRequest) -> JupyterServer:
    """Runs the test once against JupyterLab and once against Notebook 7."""
    name = "jupyter_lab" if request.param == "lab" else "jupyter_notebook7"
    server: JupyterServer = request.getfixturevalue(name)
    return server


@pytest.fixture(scope="session")
def chromium_path() -> str:
    exe = find_chromium()
    if exe is None:
        where = os.environ.get("CHROMIUM_PATH") or "/usr/bin/chromium"
        pytest.fail(MISSING_CHROMIUM.format(where=where), pytrace=False)
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as e:  # pragma: no cover - environment problem
        pytest.fail(f"playwright is not installed ({e}); pip install -e '.[test]'", pytrace=False)
    return exe


@pytest.fixture(scope="session")
def chromium(chromium_path: str) -> Iterator[Browser]:
    """One headless Chromium for the session (each page gets its own context)."""
    browser = Browser(chromium_path)
    browser.start()
    _STARTUPS["chromium"] = browser.startup_seconds or 0.0
    try:
        yield browser
    finally:
        browser.close()


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "test"


@pytest.fixture
def make_notebook(browser_root: Path, request: pytest.FixtureRequest) -> Callable[..., str]:
    """``make_notebook(cells, name=None) -> relpath``: code cells -> .ipynb (kernelspec python3)."""
    counter = [0]

    def make(cells: Sequence[str], name: str | None = None) -> str:
        if name is None:
            counter[0] += 1
            suffix = "" if counter[0] == 1 else f"-{counter[0]}"
            name = f"{_safe_name(request.node.name)}{suffix}.ipynb"
        elif not name.endswith(".ipynb"):
            name += ".ipynb"
        write_notebook(browser_root / name, cells)
        return name

    return make


def _save_failure_artifacts(pages: list[NotebookPage], test_name: str, out: Path) -> list[Path]:
    saved: list[Path] = []
    base = f"failure-{_safe_name(test_name)}"
    servers: list[JupyterServer] = []
    for i, page in enumerate(pages):
        stem = base if i == 0 else f"{base}-{i}"
        if not page.closed:
            try:
                saved.append(page.screenshot(out / f"{stem}.png"))
            except Exception as e:
                (out / f"{stem}.png.error.txt").write_text(f"screenshot failed: {e!r}\n")
        lines = [f"notebook: {page.notebook}", f"timings: {page.timings}", *map(str, page.console)]
        (out / f"{stem}-console.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
        saved.append(out / f"{stem}-console.log")
        if page.server not in servers:
            servers.append(page.server)
    for server in servers:
        dest = out / f"{base}-server-{server.app}.log" if len(servers) > 1 else out / f"{base}-server.log"
        if server.log_path.exists():
            shutil.copyfile(server.log_path, dest)
            saved.append(dest)
    return saved


@pytest.fixture
def page_factory(
    chromium: Browser, request: pytest.FixtureRequest, browser_artifacts_dir: Path
) -> Iterator[Callable[..., NotebookPage]]:
    """``page_factory(server, notebook=None, *, init_script=None, timeout=60.0) -> NotebookPage``."""
    pages: list[NotebookPage] = []
    t0 = time.monotonic()

    def factory(
        server: JupyterServer,
        notebook: str | None = None,
        *,
        init_script: str | Sequence[str] | None = None,
        timeout: float = 60.0,
    ) -> NotebookPage:
        page = chromium.new_page(server, init_script=init_script, timeout=timeout)
        pages.append(page)
        if notebook is not None:
            page.open(notebook)
        return page

    yield factory

    reports = request.node.stash.get(_REPORTS, {})
    failed = any(r.failed for r in reports.values())
    try:
        if failed and pages:
            saved = _save_failure_artifacts(pages, request.node.name, browser_artifacts_dir)
            request.node.add_report_section("teardown", "browser artifacts", "\n".join(str(p) for p in saved))
    finally:
        for page in pages:
            _TIMINGS.append((f"{request.node.name} ({page.server.app})", dict(page.timings)))
            page.close()
        if pages:
            _TIMINGS.append((f"{request.node.name} total", {"test": time.monotonic() - t0}))
