"""The shape of the package: layers whose imports all point down, and no import circles.

nbagent is five layers (`LAYERS`); a module may import its own layer and the layers below it:

1. the base: plain data, the error tree, tools, decisions and guards (``exceptions``, ``messages``,
   ``context``, ``usage``, ``approvals``, ``tools``, ``retry``, ``output``, ``events``, ``pricing``,
   ``guards`` with its detectors ``_pii``) and the
   three process-wide helpers (``_sync``: sync twins and the background loop; ``_watch``: a
   thread's observers; ``_settle``: what still goes on after its cell, and the wait for it);
2. what implements a protocol the base owns, and plain renderings of base data: ``models``,
   ``store``, ``mcp``, ``display`` (sanitising and static HTML), ``result``;
3. the run: ``_run``;
4. ``agent`` and the package facade ``nbagent``;
5. the edges, which load ipywidgets, pandas, IPython or OpenTelemetry: ``widgets``,
   ``dataframe``, ``notebook``, ``evals``, ``tracing``.

Inside the edge, `EDGE_ORDER` orders the packages the same way (evals above dataframe and widgets,
which sit above notebook and tracing), and no module anywhere, edge or core, is part of an import
circle.

Imports are read with `ast`, lazy imports inside functions included, and so are
``importlib.import_module("nbagent...")`` calls (an f-string on ``__name__`` counts as the module's
own package), so neither a deferred import nor a dynamic one can hide an upward dependency or a
circle; ``if TYPE_CHECKING:`` blocks are left out (they never run: a type-only reference is not a
dependency). The facade methods that hand a user over to an upper layer when called are named
in `ALLOWED_UPWARD`, each with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "nbagent"

LAYERS: dict[str, int] = {
    **dict.fromkeys(["nbagent.exceptions", "nbagent.messages", "nbagent.usage", "nbagent.approvals",
                     "nbagent.tools", "nbagent.retry", "nbagent.output", "nbagent.events",
                     "nbagent.pricing", "nbagent.context", "nbagent.images", "nbagent._sync", "nbagent._watch",
                     "nbagent._settle", "nbagent.guards", "nbagent._pii"], 1),
    **dict.fromkeys(["nbagent.models", "nbagent.store", "nbagent.mcp", "nbagent.display",
                     "nbagent.result"], 2),
    "nbagent._run": 3,
    **dict.fromkeys(["nbagent.agent", "nbagent"], 4),
    **dict.fromkeys(["nbagent.widgets", "nbagent.dataframe", "nbagent.notebook", "nbagent.evals",
                     "nbagent.tracing"], 5),
}
EDGE_LAYER = 5

# Imports that point up, each made only when a user asks for what the upper layer gives.
ALLOWED_UPWARD = {
    ("nbagent", "__getattr__"),                     # nbagent.usage_frame & co. load the pandas edge on first use
    ("nbagent.agent", "Agent.chat"),                # agent.chat() shows the view
    ("nbagent", "load_ipython_extension"),          # %load_ext nbagent registers the notebook magics
    ("nbagent.agent", "Agent.map"),                 # agent.map() runs a batch into a DataFrame
    ("nbagent.agent", "Agent.cancel_batches"),      # cancels the provider batches of agent.map(batch_api=True)
    ("nbagent.agent", "Agent.evaluate"),            # agent.evaluate() scores a batch (nbagent.evals)
    ("nbagent.agent", "Agent.estimate"),            # agent.estimate() forecasts a batch (nbagent.evals)
    ("nbagent.result", "RunResult._repr_html_"),    # display(result) renders the static summary
}

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
"""Lines of code in one function, its docstring left out (a long docstring is welcome). Branches
and statements are ruff's C901 (15) and PLR0915 (50), in pyproject.toml. There is no class cap:
a class is as long as its concept needs, and a method belongs on its class."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imports(module: str, path: Path, known: set[str]) -> list[tuple[str, str]]:
    """(imported nbagent module, where: 'module' or 'Class.method' / 'function')."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    found: list[tuple[str, str]] = []

    def target(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    def visit(node: ast.AST, where: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, [*where, child.name])
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.startswith("nbagent") and (t := target(alias.name)):
                        found.append((t, ".".join(where) or "module"))
            elif isinstance(child, ast.Call) and _is_import_module(child):
                name = _dynamic_target(child.args[0], module, is_package)
                if name and (t := target(name)):
                    found.append((t, ".".join(where) or "module"))
            elif isinstance(child, ast.ImportFrom):
                base = _resolve(module, is_package, child)
                if not base.startswith("nbagent"):
                    continue
                for alias in child.names:
                    t = target(f"{base}.{alias.name}") or target(base)
                    if t:
                        found.append((t, ".".join(where) or "module"))
            visit(child, where)

    visit(tree, [])
    return found


def _is_import_module(call: ast.Call) -> bool:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name == "import_module" and len(call.args) >= 1


def _dynamic_target(arg: ast.expr, module: str, is_package: bool) -> str | None:
    """The nbagent module an ``import_module(...)`` call loads, as far as the source says."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value if arg.value.startswith("nbagent") else None
    if isinstance(arg, ast.JoinedStr) and arg.values:
        first = arg.values[0]
        if isinstance(first, ast.FormattedValue) and isinstance(first.value, ast.Name) and first.value.id == "__name__":
            return module if is_package else module.rpartition(".")[0]  # at least its own package
        if isinstance(first, ast.Constant) and str(first.value).startswith("nbagent"):
            return str(first.value).rstrip(".")
    return None


def layer(module: str) -> int:
    """The layer of a module: that of the longest `LAYERS` prefix naming it."""
    name = module
    while name not in LAYERS:
        if "." not in name:
            raise AssertionError(f"{module} is in no layer: add it to LAYERS in tests/test_architecture.py")
        name = name.rpartition(".")[0]
    return LAYERS[name]


def _is_edge(module: str) -> bool:
    return layer(module) == EDGE_LAYER


def _graph() -> dict[str, list[tuple[str, str]]]:
    modules = _modules()
    known = set(modules)
    return {m: _imports(m, p, known) for m, p in modules.items()}


def test_every_module_is_in_a_layer() -> None:
    for module in _modules():
        layer(module)


def test_every_import_points_down() -> None:
    bad = []
    for module, imports in _graph().items():
        for target, where in imports:
            if layer(target) > layer(module) and (module, where) not in ALLOWED_UPWARD:
                bad.append(f"{module} ({where}, layer {layer(module)}) imports {target} (layer {layer(target)})")
    assert bad == []


def test_the_core_never_imports_the_edge() -> None:
    bad = []
    for module, imports in _graph().items():
        if _is_edge(module):
            continue
        for target, where in imports:
            if _is_edge(target) and (module, where) not in ALLOWED_UPWARD:
                bad.append(f"{module} ({where}) imports {target}")
    assert bad == []


def test_the_layer_test_sees_lazy_and_dynamic_imports(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "import importlib\n"
        "def f():\n    from .widgets import ChatView\n"
        "def g():\n    return importlib.import_module('nbagent.dataframe')\n"
    )
    known = set(_modules())
    found = _imports("nbagent.fake", source, known)
    assert ("nbagent.widgets", "f") in found and ("nbagent.dataframe", "g") in found


def _parent_packages(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _circles(graph: dict[str, list[tuple[str, str]]]) -> list[list[str]]:
    """The import circles of `graph`, the facade methods of `ALLOWED_UPWARD` left out.

    A package's __init__ importing its own submodules is its facade, not a dependency: a circle
    made only of package facades is allowed. A module's explicit import of its own package
    (``from .. import sqlite`` to read a setting at call time) is a real dependency, and so part
    of a circle with the package's own imports.
    """
    edges = {m: sorted({t for t, where in graph[m] if t != m and (m, where) not in ALLOWED_UPWARD})
             for m in graph}
    facades = {m for m in graph if (ROOT.parent / m.replace(".", "/") / "__init__.py").exists()}
    circles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in edges[m]:
            if state.get(t) == 1:
                circle = [*stack[stack.index(t):], t]
                if not set(circle) <= facades:
                    circles.append(circle)
            elif t not in state:
                walk(t)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            walk(m)
    return circles


def test_no_import_circle_anywhere() -> None:
    """Every module of every layer, the edges among themselves included, lazy imports counted."""
    assert _circles(_graph()) == []


def test_the_circle_test_sees_a_circle_through_a_lazy_import() -> None:
    graph = {"nbagent.dataframe._a": [("nbagent.evals._b", "batch")],      # a lazy import in a function
             "nbagent.evals._b": [("nbagent.dataframe._a", "module")]}
    assert _circles(graph) == [["nbagent.dataframe._a", "nbagent.evals._b", "nbagent.dataframe._a"]]
    facade = {"nbagent.agent": [("nbagent.evals", "Agent.map")], "nbagent.evals": [("nbagent.agent", "module")]}
    assert _circles(facade) == []  # Agent.map is a named facade (ALLOWED_UPWARD)


EDGE_ORDER: dict[str, int] = {
    "nbagent.tracing": 1,    # OpenTelemetry spans and their index: reads the core only
    "nbagent.notebook": 1,   # IPython: magics, variables as summaries, saved-notebook cleaning
    "nbagent.widgets": 2,    # the views: the message box's @-variables are the notebook's summaries
    "nbagent.dataframe": 2,  # pandas: frames (of stored spans too: tracing) and the batch
    "nbagent.evals": 3,      # scores and forecasts batches (dataframe), asks with Run / Cancel (widgets)
}
"""The order inside the edge (layer 5): an edge package may import the core, its own level and
the levels below it. What runs batches and shows boxes (evals) sits on what it uses, so the
batch never calls back up into forecasts (the circle of #41)."""


def _edge_level(module: str) -> int:
    name = module
    while name not in EDGE_ORDER:
        name = name.rpartition(".")[0]
    return EDGE_ORDER[name]


def test_every_edge_package_is_in_the_edge_order() -> None:
    edges = {".".join(m.split(".")[:2]) for m in _modules() if _is_edge(m)}
    assert edges == set(EDGE_ORDER)


def test_the_edges_import_down_their_order() -> None:
    bad = []
    for module, imports in _graph().items():
        if not _is_edge(module):
            continue
        for target, where in imports:
            if _is_edge(target) and _edge_level(target) > _edge_level(module):
                bad.append(f"{module} ({where}, edge level {_edge_level(module)}) imports {target} "
                           f"(edge level {_edge_level(target)})")
    assert bad == []


def _reasoned(path: Path) -> bool:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return "Size:" in doc


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_stay_small(path: Path) -> None:
    """No module over 600 lines, unless its docstring says why (a line starting with ``Size:``)."""
    if _reasoned(path):
        return
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.name} has {lines} lines"


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    size = (node.end_lineno or node.lineno) - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        size -= (first.end_lineno or first.lineno) - first.lineno + 1
    return size


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_functions_stay_short(path: Path) -> None:
    """No function over `MAX_FUNCTION_LINES` lines of code, unless a ``# Size:`` comment on its
    first line of code says why."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    long = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _code_lines(node) > MAX_FUNCTION_LINES:
            signature = "\n".join(lines[node.lineno - 1 : node.body[0].lineno - 1])
            if "# Size:" not in signature:
                long.append(f"{node.name} ({_code_lines(node)} lines)")
    assert long == []



def test_no_ctypes_anywhere() -> None:
    """No module reaches into the interpreter with ctypes (the python tool once stopped threads with
    ``PyThreadState_SetAsyncExc``; it runs code the way the kernel runs a cell now)."""
    users = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "ctypes" or n.startswith("ctypes.") for n in names):
                users.append(str(path.relative_to(ROOT)))
    assert users == []


def _private_names(module: str, path: Path, known: set[str]) -> list[str]:
    """The ``_name``s `module` imports from another nbagent module (a private module itself,
    ``from . import _chunks``, is not a name: a package's modules share its private modules)."""
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (base := _resolve(module, is_package, node)).startswith("nbagent"):
            found += [f"{module} imports {base}.{a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__") and f"{base}.{a.name}" not in known]
    return found


def test_no_module_imports_another_modules_private_name() -> None:
    """A leading underscore means "this module's own": a name two modules share has none (it may
    still live in a private module, which its package's modules import)."""
    modules = _modules()
    known = set(modules)
    assert [bad for m, p in sorted(modules.items()) for bad in _private_names(m, p, known)] == []


def test_the_private_name_test_sees_one(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text("from ..models._keys import _hidden, scrub\nfrom .sqlite import _chunks\n")
    found = _private_names("nbagent.store.fake", source, set(_modules()))
    assert found == ["nbagent.store.fake imports nbagent.models._keys._hidden"]

NOT_LOADED_BY_IMPORT = (
    # the stores' backends and the providers load when first used
    "nbagent.store.sqlite", "nbagent.store.postgres", "nbagent.models.openai", "nbagent.models.anthropic",
    "nbagent.mcp", "sqlite3", "psycopg", "openai", "anthropic", "mcp",
    # the run's machinery loads with the first run: asyncio, and what asyncio brings
    "asyncio", "ssl", "socket", "concurrent.futures", "logging", "selectors", "subprocess",
    # and a few more a plain import does not need
    "uuid", "hashlib", "pydantic",
    # the edges
    "nbagent.widgets", "nbagent.dataframe", "ipywidgets", "pandas", "numpy", "IPython",
)
"""Modules that ``import nbagent`` must not load (bench/run.py's S4 measures what it costs)."""


def test_import_nbagent_loads_no_backend_no_provider_and_no_asyncio() -> None:
    import json
    import os
    import subprocess
    import sys

    probe = ("import sys, json\nimport nbagent\n"
             f"print(json.dumps([m for m in {NOT_LOADED_BY_IMPORT!r} if m in sys.modules]))")
    env = {**os.environ, "PYTHONPATH": str(ROOT.parent)}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
