"""`import nbagent` stays light, and its public names are complete, importable and sorted."""

import inspect
import json
import os
import subprocess
import sys

import nbagent

HEAVY = ("ipywidgets", "pandas", "openai", "anthropic", "anywidget", "numpy", "pyarrow", "matplotlib", "IPython",
         "psycopg", "psycopg_pool", "mcp")


def imported_after(code: str) -> list[str]:
    """The HEAVY modules loaded in a fresh interpreter after running `code`."""
    probe = f"{code}\nimport sys, json\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_nbagent_imports_no_edge_libraries() -> None:
    assert imported_after("import nbagent") == []


def test_import_nbagent_models_imports_no_provider_sdk() -> None:
    assert imported_after("import nbagent.models") == []
    assert imported_after("from nbagent.models import AnthropicModel") == ["anthropic"]


def test_import_nbagent_mcp_loads_the_sdk_only_when_a_server_is_reached() -> None:
    assert imported_after("from nbagent.mcp import MCPTools\nMCPTools.stdio('python', ['-m', 'x'])") == []


def test_defining_and_running_an_agent_stays_light() -> None:
    code = """
from nbagent import Agent, tool
from nbagent.models import TestModel
from nbagent.store import MemoryStore

@tool
def get_weather(city: str) -> str:
    \"\"\"Weather.\"\"\"
    return "sunny"

result = Agent(TestModel(), tools=[get_weather], store=MemoryStore()).run_sync("hi")
assert result.status == "completed", result
"""
    assert imported_after(code) == []


def test_all_names_are_importable_unique_and_sorted() -> None:
    names = nbagent.__all__
    assert names == sorted(names)
    assert len(names) == len(set(names))
    for name in names:
        assert getattr(nbagent, name) is not None, name
    namespace: dict[str, object] = {}
    exec("from nbagent import *", namespace)
    assert set(names) <= set(namespace)


def test_all_lists_every_public_name_the_package_defines() -> None:
    public = {
        name
        for name, value in vars(nbagent).items()
        if not name.startswith("_")
        and not inspect.ismodule(value)
        and (getattr(value, "__module__", "") or "").startswith("nbagent")
        and name != "load_ipython_extension"  # IPython's hook for %load_ext nbagent, not API to star-import
    }
    assert public <= set(nbagent.__all__), sorted(public - set(nbagent.__all__))


def test_every_public_class_and_function_has_a_docstring() -> None:
    missing = [
        name for name in nbagent.__all__
        if (inspect.isclass(getattr(nbagent, name)) or inspect.isfunction(getattr(nbagent, name)))
        and not inspect.getdoc(getattr(nbagent, name))
    ]  # type aliases (Event, Message) and __version__ are left out
    assert missing == []


def test_the_version_is_the_one_pyproject_builds() -> None:
    """`nbagent.__version__`, the installed package's metadata and pyproject.toml say the same."""
    import importlib.metadata
    import pathlib

    import tomllib

    pyproject = tomllib.loads((pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert nbagent.__version__ == pyproject["project"]["version"] == "0.2.0.dev0"
    assert importlib.metadata.version("nbagent") == nbagent.__version__
