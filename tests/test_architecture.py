"""The shape of the package: the core never imports the edge, and has no import circles.

The core is everything in `nbagent` outside `nbagent.widgets` and `nbagent.dataframe` (the edge,
which loads ipywidgets and pandas). Imports are read with `ast`, lazy imports inside functions
included, so a circle cannot hide behind a deferred import; ``if TYPE_CHECKING:`` blocks are left
out (they never run: a type-only reference is not a dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "nbagent"
EDGE = ("nbagent.widgets", "nbagent.dataframe")

# Facade methods that hand a user over to the edge, imported only when called.
ALLOWED_EDGE_IMPORTS = {
    ("nbagent", "__getattr__"),          # nbagent.usage_frame & co. load the pandas edge on first use
    ("nbagent.agent", "Agent.chat"),     # agent.chat() shows the view
    ("nbagent.agent", "Agent.map"),      # agent.map() runs a batch into a DataFrame
}

MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 300


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


def _is_edge(module: str) -> bool:
    return any(module == e or module.startswith(e + ".") for e in EDGE)


def _graph() -> dict[str, list[tuple[str, str]]]:
    modules = _modules()
    known = set(modules)
    return {m: _imports(m, p, known) for m, p in modules.items()}


def test_the_core_never_imports_the_edge() -> None:
    bad = []
    for module, imports in _graph().items():
        if _is_edge(module):
            continue
        for target, where in imports:
            if _is_edge(target) and (module, where) not in ALLOWED_EDGE_IMPORTS:
                bad.append(f"{module} ({where}) imports {target}")
    assert bad == []


def _parent_packages(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def test_no_import_circle_in_the_core() -> None:
    graph = _graph()
    core = {m for m in graph if not _is_edge(m)}
    # Importing a submodule runs its packages' __init__ first: those are not edges of the graph
    # (nbagent/__init__ importing nbagent.agent is the package facade, not a dependency).
    edges = {
        m: sorted({t for t, _ in graph[m] if t in core and t != m and t not in _parent_packages(m)})
        for m in core
    }
    facades = {m for m in core if (ROOT.parent / m.replace(".", "/") / "__init__.py").exists()}
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
    assert circles == []


def _reasoned(path: Path) -> bool:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return "Size:" in doc


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_and_classes_stay_small(path: Path) -> None:
    """No module over 600 lines, no class over 300, unless the module docstring says why
    (a line starting with ``Size:``)."""
    if _reasoned(path):
        return
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_MODULE_LINES, f"{path.name} has {len(text.splitlines())} lines"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            assert size <= MAX_CLASS_LINES, f"class {node.name} in {path.name} has {size} lines"
