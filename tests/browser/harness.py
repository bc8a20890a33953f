"""Browser-test harness: a private Jupyter server plus headless Chromium (Playwright, sync API).

Building blocks (usable without pytest; the fixtures in ``conftest.py`` wire them up):

``JupyterServer(root_dir, app="lab"|"notebook")``
    A throw-away JupyterLab / Notebook 7 server on 127.0.0.1 (random free port, random token) with
    isolated config/runtime/data/settings/workspace dirs; the venv's kernelspecs and lab extensions
    stay visible because they live under ``sys.prefix/share/jupyter``.
    ``external=True``: a server some other command starts (e.g. ``make lab``) with the port and token
    chosen here and the environment from ``env()``; ``start(watch=proc)`` only waits for it to answer
    and ``stop()`` only asks it to shut down (it never signals a process it did not start).

``Browser(executable_path=None)``
    One headless Chromium process; ``new_page(server, init_script=...)`` gives a ``NotebookPage``
    in a fresh browser context (own cookies / storage).

``NotebookPage``
    Drives one notebook: ``open``, ``run_all``, ``run_cell``, ``wait_idle``, ``click``,
    ``type_text``, ``wait_text``, ``wait_regex``, ``output_text``, ``eval``, ``screenshot``;
    collects console messages, page errors and JS dialogs in ``.console``.

``write_notebook(path, cells)``
    Writes an nbformat v4 notebook of code cells with the ``python3`` kernelspec.

Example::

    with JupyterServer(root, app="lab") as server, Browser() as browser:
        write_notebook(root / "demo.ipynb", ["import ipywidgets as w; w.Button(description='OK')"])
        page = browser.new_page(server)
        page.open("demo.ipynb")
        page.run_all()
        page.click("OK")
        page.close()
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CHROMIUM_ARGS",
    "KNOWN_CONSOLE_NOISE",
    "WS_COUNTER_JS",
    "Browser",
    "BrowserHarnessError",
    "ConsoleEntry",
    "JupyterServer",
    "NotebookPage",
    "find_chromium",
    "write_notebook",
]

CHROMIUM_CANDIDATES = ("/usr/bin/chromium",)
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)

# JupyterLab user settings (also read by Notebook 7, which is built from the same plugins).
LAB_USER_SETTINGS: dict[str, dict[str, Any]] = {
    # every cell stays attached to the DOM, so text in any cell can be found / clicked
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {
        "windowingMode": "none",
        "autoStartDefaultKernel": True,
    },
    # no news feed, no update check (no internet, no toast asking about news)
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    # never write outputs back into the notebook under test
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}

# Console errors the unmodified apps emit on their own (regexes for NotebookPage.console_errors(ignore=...)).
KNOWN_CONSOLE_NOISE: dict[str, tuple[str, ...]] = {
    "lab": (),
    # Notebook 7.6 (with JupyterLab 4.6 packages): uncaught TypeError from notebook_core.*.js on every
    # notebook page load, with or without the harness's settings; harmless for the tests
    "notebook": (r"Cannot read properties of undefined \(reading 'schema'\)",),
}

_APP_MODULE = {"lab": "jupyterlab", "notebook": "notebook"}
_APP_CLASS = {"lab": "LabApp", "notebook": "JupyterNotebookApp"}


class BrowserHarnessError(RuntimeError):
    """The server, the browser or the page did not reach the expected state in time."""


def find_chromium(explicit: str | os.PathLike[str] | None = None) -> str | None:
    """Chromium executable: ``explicit``, else ``$CHROMIUM_PATH``, else /usr/bin/chromium; None if missing."""
    candidates: list[str] = []
    if explicit:
        candidates.append(os.fspath(explicit))
    elif os.environ.get("CHROMIUM_PATH"):
        candidates.append(os.environ["CHROMIUM_PATH"])
    else:
        candidates.extend(CHROMIUM_CANDIDATES)
    for cand in candidates:
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _descendant_pids(pid: int) -> list[int]:
    """PIDs of all descendants of ``pid`` (Linux /proc; empty elsewhere)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(x) for x in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


def write_notebook(
    path: str | os.PathLike[str],
    cells: Sequence[str],
    *,
    kernel_name: str = "python3",
    display_name: str = "Python 3 (ipykernel)",
) -> Path:
    """Write an nbformat v4 notebook with one code cell per source string; returns the path."""
    import nbformat
    from nbformat import v4

    nb = v4.new_notebook()
    nb.cells = [v4.new_code_cell(src) for src in cells]
    nb.metadata["kernelspec"] = {"name": kernel_name, "display_name": display_name, "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    nbformat.validate(nb)
    p.write_text(nbformat.writes(nb), encoding="utf-8")
    return p


# ----------------------------------------------------------------------------------------- server
class JupyterServer:
    """A private JupyterLab (``app="lab"``) or Notebook 7 (``app="notebook"``) server.

    root_dir      folder served (notebook paths are relative to it)
    python        interpreter that runs ``-m jupyterlab`` / ``-m notebook`` (default: sys.executable,
                  i.e. the venv; its ``python3`` kernelspec then also resolves to that interpreter)
    extra_args    extra server command-line options
    log_path      server stdout+stderr (default: <temp dir>/server-<app>.log)
    """

    def __init__(
        self,
        root_dir: str | os.PathLike[str],
        app: str = "lab",
        *,
        python: str | None = None,
        extra_args: Iterable[str] = (),
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = 90.0,
        env: dict[str, str] | None = None,
        external: bool = False,
    ) -> None:
        if app not in _APP_MODULE:
            raise ValueError("app must be 'lab' or 'notebook'")
        self.root_dir = Path(root_dir).resolve()
        self.app = app
        self.python = python or sys.executable
        self.extra_args = list(extra_args)
        self.startup_timeout = startup_timeout
        self.extra_env = dict(env or {})
        self.port = _free_port()
        self.token = secrets.token_hex(24)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._tmp = tempfile.TemporaryDirectory(prefix=f"nbagent-jupyter-{app}-")
        self.tmp_dir = Path(self._tmp.name)
        self.log_path = Path(log_path) if log_path else self.tmp_dir / f"server-{app}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_fh: Any = None
        self.startup_seconds: float | None = None
        self.external = external
        self._external_up = False

    # -- lifecycle
    def env(self) -> dict[str, str]:
        """Environment for the server process: os.environ with isolated Jupyter dirs (config, runtime,
        data, lab settings with ``LAB_USER_SETTINGS``, workspaces, IPython) under ``tmp_dir``, no
        JUPYTER_TOKEN / JUPYTER_PASSWORD, plus the ``env`` given to the constructor."""
        return self._env()

    def _env(self) -> dict[str, str]:
        settings = self.tmp_dir / "lab-user-settings"
        for rel, value in LAB_USER_SETTINGS.items():
            p = settings / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps(value), encoding="utf-8")
        env = dict(os.environ)
        for var in ("JUPYTER_TOKEN", "JUPYTER_PASSWORD"):
            env.pop(var, None)
        env.update(
            JUPYTER_CONFIG_DIR=str(self.tmp_dir / "config"),
            JUPYTER_RUNTIME_DIR=str(self.tmp_dir / "runtime"),
            # user data dir is throw-away; sys.prefix/share/jupyter (venv kernelspec, ipywidgets
            # lab extension) is still on jupyter_path() because the server runs from the venv
            JUPYTER_DATA_DIR=str(self.tmp_dir / "data"),
            JUPYTERLAB_SETTINGS_DIR=str(settings),
            JUPYTERLAB_WORKSPACES_DIR=str(self.tmp_dir / "workspaces"),
            IPYTHONDIR=str(self.tmp_dir / "ipython"),  # no user startup files in the kernel
            JUPYTER_PLATFORM_DIRS="1",
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        return env

    def command(self) -> list[str]:
        cls = _APP_CLASS[self.app]
        cmd = [
            self.python,
            "-m",
            _APP_MODULE[self.app],
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root_dir}",
            "--ServerApp.open_browser=False",
            f"--{cls}.expose_app_in_browser=True",
            f"--FileCheckpoints.checkpoint_dir={self.tmp_dir / 'checkpoints'}",
        ]
        if self.app == "lab":
            cmd += [
                "--LabApp.news_url=None",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--ServerApp.allow_root=True")
        return cmd + self.extra_args

    def start(self, *, watch: subprocess.Popen[Any] | None = None) -> JupyterServer:
        """Start the server and wait until ``/api/status`` answers (``startup_timeout``).

        For an ``external`` server nothing is started: wait for it to answer, failing early if the
        ``watch`` process (the command that starts it) exits first.
        """
        if self.external:
            if not self._external_up:
                self._wait_ready(watch, time.monotonic())
                self._external_up = True
            return self
        if self.proc is not None:
            return self
        t0 = time.monotonic()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_fh = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            self.command(),
            env=self._env(),
            cwd=str(self.root_dir),
            stdin=subprocess.DEVNULL,
            stdout=self._log_fh,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready(self.proc, t0)
        return self

    def _wait_ready(self, proc: subprocess.Popen[Any] | None, t0: float) -> None:
        deadline = t0 + self.startup_timeout
        while True:
            if proc is not None and proc.poll() is not None:
                rc = proc.returncode
                if not self.external:
                    self.stop()
                raise BrowserHarnessError(
                    f"jupyter {self.app} server exited early (rc={rc}); log:\n{self.log_text()[-3000:]}"
                )
            try:
                status = self.api("GET", "/api/status", timeout=2)
                if isinstance(status, dict):
                    break
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                if not self.external:
                    self.stop()
                raise BrowserHarnessError(
                    f"jupyter {self.app} server did not answer /api/status within {self.startup_timeout}s;"
                    f" log:\n{self.log_text()[-3000:]}"
                )
            time.sleep(0.15)
        self.startup_seconds = time.monotonic() - t0

    def stop(self, timeout: float = 15.0) -> None:
        """POST /api/shutdown (stops kernels too), then SIGTERM/SIGKILL by PID if still alive.

        An ``external`` server only gets the POST; then wait up to ``timeout`` until it stops answering.
        """
        if self.external:
            if self._external_up:
                self._external_up = False
                with contextlib.suppress(OSError, ValueError):
                    self.api("POST", "/api/shutdown", timeout=5)
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    try:
                        self.api("GET", "/api/status", timeout=2)
                    except (OSError, ValueError):
                        break
                    time.sleep(0.2)
            return
        proc = self.proc
        if proc is not None:
            kids: list[int] = []
            if proc.poll() is None:
                kids = _descendant_pids(proc.pid)
                with contextlib.suppress(OSError, ValueError):
                    self.api("POST", "/api/shutdown", timeout=5)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    kids = sorted(set(kids) | set(_descendant_pids(proc.pid)))
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
            # kernels the server started but did not stop (only after a forced kill)
            for pid in kids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            self.proc = None
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None

    def cleanup(self) -> None:
        """stop() and remove the temp dir (the log too, unless log_path was given elsewhere)."""
        self.stop()
        self._tmp.cleanup()

    def __enter__(self) -> JupyterServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def running(self) -> bool:
        if self.external:
            return self._external_up
        return self.proc is not None and self.proc.poll() is None

    # -- urls / REST
    def url_for(self, notebook_relpath: str | os.PathLike[str] = "", *, with_token: bool = True) -> str:
        """Page URL of a notebook: ``/lab/tree/X`` (lab) or ``/notebooks/X`` (Notebook 7).

        Lab URLs carry ``reset`` so a workspace saved by an earlier page of this shared server is not
        restored (restoring would reopen old notebooks and start their kernels).
        """
        rel = Path(notebook_relpath).as_posix() if notebook_relpath else ""
        if rel and Path(rel).is_absolute():
            rel = Path(rel).resolve().relative_to(self.root_dir).as_posix()
        quoted = urllib.parse.quote(rel)
        path = f"/lab/tree/{quoted}" if self.app == "lab" else (f"/notebooks/{quoted}" if rel else "/tree")
        query: list[str] = []
        if with_token:
            query.append(f"token={self.token}")
        if self.app == "lab":
            query.append("reset")
        return self.base_url + path + ("?" + "&".join(query) if query else "")

    def api(self, method: str, path: str, body: Any = None, *, timeout: float = 10.0) -> Any:
        """Call the server's REST API (token auth); returns decoded JSON or None."""
        data = None if body is None else json.dumps(body).encode()
        if method.upper() in ("POST", "PUT", "PATCH") and data is None:
            data = b""
        req = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method.upper(),
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
        return json.loads(raw) if raw.strip() else None

    def sessions(self) -> list[dict[str, Any]]:
        return list(self.api("GET", "/api/sessions") or [])

    def shutdown_kernels_for(self, notebook_relpath: str | os.PathLike[str]) -> int:
        """Stop the kernel(s) of sessions on this notebook path; returns how many."""
        rel = Path(notebook_relpath).as_posix()
        n = 0
        for s in self.sessions():
            if s.get("path") == rel and s.get("kernel"):
                with contextlib.suppress(urllib.error.HTTPError):
                    self.api("DELETE", f"/api/kernels/{s['kernel']['id']}")
                    n += 1
        return n

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""


# ---------------------------------------------------------------------------------------- browser
# Count kernel-websocket traffic in the page itself (cheap; no DevTools round trips).
# Results: ``page.ws_stats()`` / ``window.__nbagentWs``; ``window.__nbagentWs.reset()`` zeroes them.
WS_COUNTER_JS = r"""
(() => {
  if (window.__nbagentWs) return;
  const Orig = window.WebSocket;
  const enc = new TextEncoder();
  const size = (d) => typeof d === 'string' ? enc.encode(d).length
                    : (d && (d.byteLength ?? d.size)) || 0;
  const stats = window.__nbagentWs = {
    sent: {messages: 0, bytes: 0}, recv: {messages: 0, bytes: 0}, sockets: 0, t0: performance.now(),
    reset() { this.sent = {messages: 0, bytes: 0}; this.recv = {messages: 0, bytes: 0};
              this.t0 = performance.now(); },
  };
  const isKernel = (url) => /\/api\/kernels\/[^/]+\/channels/.test(String(url));
  class CountingWebSocket extends Orig {
    constructor(url, protocols) {
      super(url, protocols);
      this.__nbagentKernel = isKernel(url);
      if (this.__nbagentKernel) {
        stats.sockets += 1;
        this.addEventListener('message', (ev) => {
          stats.recv.messages += 1; stats.recv.bytes += size(ev.data);
        });
      }
    }
    send(data) {
      if (this.__nbagentKernel) { stats.sent.messages += 1; stats.sent.bytes += size(data); }
      return super.send(data);
    }
  }
  window.WebSocket = CountingWebSocket;
})();
"""

_JS_NOTEBOOK_STATE = """
() => {
  const app = window.jupyterapp;
  if (!app) return {phase: 'no-app'};
  const w = app.shell.currentWidget;
  if (!w || !w.sessionContext || !w.content) return {phase: 'no-notebook'};
  if (!w.context.isReady) return {phase: 'loading'};
  const dlg = document.querySelector('.jp-Dialog');
  const k = w.sessionContext.session && w.sessionContext.session.kernel;
  const prompts = Array.from(w.node.querySelectorAll('.jp-InputPrompt')).map(e => e.textContent.trim());
  return {phase: k ? 'kernel' : 'no-kernel', status: k ? k.status : 'none',
          connection: k ? k.connectionStatus : 'none', dialog: !!dlg,
          pending: prompts.filter(p => p.includes('*')).length, cells: w.content.widgets.length,
          path: w.context.path};
}
"""

# Error outputs and unexecuted code cells (JupyterLab), read from the notebook model in the page.
_JS_CELL_REPORT = """
() => {
  const nb = window.jupyterapp.shell.currentWidget.content;
  const errors = [], unexecuted = [];
  nb.widgets.forEach((cell, i) => {
    if (cell.model.type !== 'code') return;
    if (cell.model.executionCount === null) unexecuted.push(i);
    const outs = cell.model.outputs;
    for (let k = 0; k < outs.length; k++) {
      const o = outs.get(k).toJSON();
      if (o.output_type === 'error') errors.push(`cell ${i}: ${o.ename}: ${o.evalue}`);
    }
  });
  return {errors, unexecuted};
}
"""

_JS_OUTPUT_TEXT = """
(cell) => {
  const app = window.jupyterapp;
  const w = app && app.shell.currentWidget;
  const root = (w && w.content && w.node) || document;
  let areas;
  if (cell === null || cell === undefined) {
    areas = Array.from(root.querySelectorAll('.jp-Cell .jp-OutputArea-output'));
  } else {
    const c = w.content.widgets[cell];
    areas = c ? Array.from(c.node.querySelectorAll('.jp-OutputArea-output')) : [];
  }
  return areas.map(e => e.innerText).join('\\n');
}
"""

_OUTPUT = ".jp-Cell .jp-OutputArea-output"


@dataclass(frozen=True)
class ConsoleEntry:
    """A browser console message (type = log/info/warning/error/...), a ``pageerror`` or a ``dialog``."""

    type: str
    text: str
    time: float

    def __str__(self) -> str:
        return f"{self.type}: {self.text}"


class Browser:
    """One headless Chromium (Playwright sync API); each ``new_page`` gets a fresh context."""

    def __init__(self, executable_path: str | None = None, *, extra_args: Iterable[str] = ()) -> None:
        exe = find_chromium(executable_path)
        if exe is None:
            where = executable_path or os.environ.get("CHROMIUM_PATH") or "/usr/bin/chromium"
            raise BrowserHarnessError(f"Chromium not found at {where}")
        self.executable_path = exe
        self.args = [*CHROMIUM_ARGS, *extra_args]
        self._pw: Any = None
        self.browser: Any = None
        self.pages: list[NotebookPage] = []
        self.startup_seconds: float | None = None

    def start(self) -> Browser:
        if self.browser is not None:
            return self
        from playwright.sync_api import sync_playwright

        t0 = time.monotonic()
        self._pw = sync_playwright().start()
        try:
            self.browser = self._pw.chromium.launch(
                executable_path=self.executable_path, headless=True, args=self.args
            )
        except BaseException:
            self._pw.stop()
            self._pw = None
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    @property
    def version(self) -> str:
        return str(self.start().browser.version)

    def new_page(
        self,
        server: JupyterServer,
        *,
        init_script: str | Sequence[str] | None = None,
        viewport: tuple[int, int] = (1280, 1000),
        timeout: float = 60.0,
    ) -> NotebookPage:
        """A page in a fresh context for ``server``; ``init_script`` JS runs before the app's scripts."""
        self.start()
        page = NotebookPage(self, server, init_script=init_script, viewport=viewport, timeout=timeout)
        self.pages.append(page)
        return page

    def close(self) -> None:
        for p in list(self.pages):
            p.close(shutdown_kernel=False)
        if self.browser is not None:
            with contextlib.suppress(Exception):
                self.browser.close()
            self.browser = None
        if self._pw is not None:
            self._pw.stop()
            self._pw = None

    def __enter__(self) -> Browser:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class NotebookPage:
    """One notebook in one browser tab. All waits raise ``BrowserHarnessError`` on timeout."""

    def __init__(
        self,
        browser: Browser,
        server: JupyterServer,
        *,
        init_script: str | Sequence[str] | None = None,
        viewport: tuple[int, int] = (1280, 1000),
        timeout: float = 60.0,
    ) -> None:
        self.browser = browser
        self.server = server
        self.timeout = timeout
        self.console: list[ConsoleEntry] = []
        self.notebook: str | None = None
        self.timings: dict[str, float] = {}
        self._t0 = time.monotonic()
        self.context = browser.browser.new_context(
            viewport={"width": viewport[0], "height": viewport[1]}, accept_downloads=False
        )
        scripts = [init_script] if isinstance(init_script, str) else list(init_script or [])
        for js in scripts:
            self.context.add_init_script(script=js)
        self.page = self.context.new_page()
        self.page.set_default_timeout(timeout * 1000)
        self.page.on("console", self._on_console)
        self.page.on("pageerror", self._on_pageerror)
        self.page.on("dialog", self._on_dialog)
        self.closed = False

    # -- event collection
    def _log(self, kind: str, text: str) -> None:
        self.console.append(ConsoleEntry(kind, text, time.time()))

    def _on_console(self, msg: Any) -> None:
        self._log(msg.type, msg.text)

    def _on_pageerror(self, error: Any) -> None:
        stack = (getattr(error, "stack", None) or "").strip().splitlines()
        where = " | ".join(line.strip() for line in stack[1:4])
        self._log("pageerror", f"{error}" + (f"  [{where}]" if where else ""))

    def _on_dialog(self, dialog: Any) -> None:
        self._log("dialog", f"{dialog.type}: {dialog.message}")
        with contextlib.suppress(Exception):
            if dialog.type == "beforeunload":
                dialog.accept()
            else:
                dialog.dismiss()

    def console_errors(self, ignore: Iterable[str] = ()) -> list[ConsoleEntry]:
        """Console errors, page errors and dialogs, minus entries matching any ``ignore`` regex."""
        pats = [re.compile(p) for p in ignore]
        return [
            e
            for e in self.console
            if e.type in ("error", "pageerror", "dialog") and not any(p.search(e.text) for p in pats)
        ]

    def _mark(self, name: str) -> None:
        key, n = name, 1
        while key in self.timings:
            n += 1
            key = f"{name}#{n}"
        self.timings[key] = round(time.monotonic() - self._t0, 3)

    # -- waiting helper
    def wait_for(
        self, predicate: Callable[[], Any], what: str, timeout: float | None = None, interval: float = 0.1
    ) -> Any:
        """Poll ``predicate`` until truthy (returned); raise BrowserHarnessError after ``timeout``."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                secs = self.timeout if timeout is None else timeout
                raise BrowserHarnessError(f"timed out after {secs:g}s waiting for {what}")
            time.sleep(interval)

    # -- notebook lifecycle
    def open(
        self, notebook: str | os.PathLike[str], *, wait_kernel: bool = True, url: str | None = None
    ) -> NotebookPage:
        """Navigate to the notebook (path relative to the server root) and wait for an idle kernel.

        ``url``: the page to load instead of ``server.url_for(notebook)`` (e.g. the URL that
        ``jupyter lab FILE`` hands to the web browser); ``notebook`` still names what it shows.
        """
        rel = Path(notebook)
        if rel.is_absolute():
            rel = rel.resolve().relative_to(self.server.root_dir)
        self.notebook = rel.as_posix()
        self.page.goto(url or self.server.url_for(self.notebook), wait_until="domcontentloaded")
        self.page.wait_for_function("() => window.jupyterapp !== undefined")
        self._mark("app_loaded")
        if wait_kernel:
            self.wait_kernel_idle()
        return self

    def state(self) -> dict[str, Any]:
        return dict(self.page.evaluate(_JS_NOTEBOOK_STATE))

    def wait_kernel_idle(self, timeout: float | None = None) -> None:
        """Wait until the notebook's kernel is connected and idle (accepting a kernel dialog if shown)."""

        def ready() -> bool:
            st = self.state()
            if st.get("dialog"):
                acc = self.page.locator(".jp-Dialog .jp-mod-accept")
                if acc.count():
                    self._log("harness", "accepted a dialog while waiting for the kernel")
                    acc.first.click()
                return False
            return st.get("status") == "idle" and st.get("connection") == "connected"

        self.wait_for(ready, f"kernel idle in {self.notebook}", timeout, interval=0.2)
        self._mark("kernel_idle")

    def wait_idle(self, timeout: float | None = None, settle: float = 0.4) -> None:
        """Wait until the kernel is idle and no cell shows ``[*]`` for ``settle`` seconds."""
        since: list[float] = []

        def quiet() -> bool:
            st = self.state()
            if st.get("status") == "idle" and st.get("pending") == 0:
                since.append(time.monotonic())
                return since[-1] - since[0] >= settle
            since.clear()
            return False

        self.wait_for(quiet, "all cells finished", timeout)
        self._mark("idle")

    def command(self, command_id: str, args: dict[str, Any] | None = None) -> None:
        """Fire a JupyterLab command (``window.jupyterapp.commands``) without awaiting its promise."""
        self.page.evaluate(
            "([id, args]) => { window.jupyterapp.commands.execute(id, args || {}); }", [command_id, args]
        )

    def run_all(self) -> None:
        """Run all cells (``notebook:run-all-cells``); returns at once, cells may still be running."""
        self.command("notebook:run-all-cells")
        self._mark("run_all")

    def run_cell(self, index: int) -> None:
        """Select cell ``index`` and run it (``notebook:run-cell``, selection does not advance)."""
        n = self.page.evaluate(
            """(i) => { const nb = window.jupyterapp.shell.currentWidget.content;
                        if (i < 0 || i >= nb.widgets.length) return -1;
                        nb.deselectAll(); nb.activeCellIndex = i; return nb.activeCellIndex; }""",
            index,
        )
        if n != index:
            raise BrowserHarnessError(f"no cell {index} in {self.notebook}")
        self.command("notebook:run-cell")
        self._mark(f"run_cell:{index}")

    @property
    def cell_count(self) -> int:
        return int(self.state().get("cells", 0))

    # -- interacting with outputs
    def output_buttons(self, label: str) -> Any:
        """Locator of ``<button>`` elements inside cell outputs whose text is exactly ``label``."""
        exact = re.compile(rf"^\s*{re.escape(label)}\s*$")
        return self.page.locator(f"{_OUTPUT} button").filter(has_text=exact)

    def click(self, label: str, nth: int = 0, timeout: float | None = None) -> None:
        """Click the ``nth`` visible, enabled output button labelled ``label`` (e.g. ipywidgets Button)."""
        loc = self.output_buttons(label)

        def usable() -> list[Any]:
            found = []
            for i in range(loc.count()):
                b = loc.nth(i)
                with contextlib.suppress(Exception):
                    if b.is_visible() and b.is_enabled():
                        found.append(b)
            return found if len(found) > nth else []

        buttons = self.wait_for(usable, f"{nth + 1} visible enabled button(s) {label!r}", timeout)
        buttons[nth].click()
        self._mark(f"click:{label}")

    def text_inputs(self) -> Any:
        return self.page.locator(
            f"{_OUTPUT} input[type=text], {_OUTPUT} input:not([type]), {_OUTPUT} textarea"
        )

    def type_text(self, text: str, press_enter: bool = True, timeout: float | None = None) -> None:
        """Fill the last visible text box (input/textarea) in the outputs with ``text``; Enter optional."""
        loc = self.text_inputs()

        def visible() -> list[Any]:
            return [loc.nth(i) for i in range(loc.count()) if loc.nth(i).is_visible()]

        box = self.wait_for(visible, "a visible text box in the outputs", timeout)[-1]
        box.click()
        box.fill(text)
        if press_enter:
            box.press("Enter")
        self._mark("type_text")

    def output_text(self, cell: int | None = None) -> str:
        """innerText of all cell outputs (or of cell ``cell``); cell sources are not included."""
        return str(self.page.evaluate(_JS_OUTPUT_TEXT, cell))

    def wait_text(self, text: str, timeout: float | None = None, cell: int | None = None) -> str:
        """Wait until ``text`` appears in the outputs; returns the output text."""
        found = self.wait_for(
            lambda: (t := self.output_text(cell)) and text in t and t, f"text {text!r} in outputs", timeout
        )
        self._mark(f"text:{text[:30]}")
        return str(found)

    def wait_regex(
        self, pattern: str | re.Pattern[str], timeout: float | None = None, cell: int | None = None
    ) -> re.Match[str]:
        """Wait until ``pattern`` matches the outputs' text; returns the match."""
        pat = re.compile(pattern) if isinstance(pattern, str) else pattern
        m = self.wait_for(lambda: pat.search(self.output_text(cell)), f"regex {pat.pattern!r}", timeout)
        self._mark(f"regex:{pat.pattern[:30]}")
        return m  # type: ignore[no-any-return]

    def cell_report(self) -> dict[str, list[Any]]:
        """What Run All left (JupyterLab): ``{"errors": ["cell i: Name: value", ...],
        "unexecuted": [indexes of code cells that never ran]}``."""
        return dict(self.page.evaluate(_JS_CELL_REPORT))

    def eval(self, js: str, arg: Any = None) -> Any:
        """``page.evaluate(js, arg)``: js is an expression or a function source."""
        return self.page.evaluate(js, arg)

    def ws_stats(self) -> dict[str, Any] | None:
        """Kernel websocket counters when the page was created with ``init_script=WS_COUNTER_JS``."""
        return self.page.evaluate(
            "() => window.__nbagentWs ? JSON.parse(JSON.stringify(window.__nbagentWs)) : null"
        )

    def screenshot(self, path: str | os.PathLike[str], full_page: bool = True) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(p), full_page=full_page)
        return p

    def close(self, shutdown_kernel: bool = True) -> None:
        """Close the tab and its context; by default also stop the notebook's kernel on the server."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):
            self.context.close()
        if shutdown_kernel and self.notebook and self.server.running:
            with contextlib.suppress(OSError, ValueError):
                self.server.shutdown_kernels_for(self.notebook)
        if self in self.browser.pages:
            self.browser.pages.remove(self)
