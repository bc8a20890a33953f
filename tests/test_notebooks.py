"""The example notebooks run top to bottom, headless, offline (the local model), as a user would.

Marked ``notebooks`` (skip with NBAGENT_SKIP_NOTEBOOKS=1); they use the bundled local model, so
they also need it (NBAGENT_SKIP_LOCAL_LLM=1 skips them too). The cluster notebook starts a Dask
LocalCluster (NBAGENT_SKIP_CLUSTER=1 skips it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

pytestmark = [
    pytest.mark.notebooks,
    pytest.mark.local_llm,
    pytest.mark.skipif(os.environ.get("NBAGENT_SKIP_NOTEBOOKS") == "1", reason="NBAGENT_SKIP_NOTEBOOKS=1"),
    pytest.mark.skipif(os.environ.get("NBAGENT_SKIP_LOCAL_LLM") == "1", reason="NBAGENT_SKIP_LOCAL_LLM=1"),
]


def test_the_notebooks_are_there() -> None:
    assert [p.name for p in NOTEBOOKS] == [
        "01_quickstart.ipynb",
        "02_approve_tools.ipynb",
        "03_token_costs.ipynb",
        "04_state_and_history.ipynb",
        "05_structured_output.ipynb",
        "06_mcp_tools.ipynb",
        "07_batch_on_a_cluster.ipynb",
    ]


@pytest.mark.timeout(600)  # a notebook of several local-model runs can pass 300 s on 2 busy cores
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_offline(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               local_llm_base_url: str) -> None:
    if "cluster" in path.name:  # a Dask LocalCluster: the cluster tests' switch and package
        if os.environ.get("NBAGENT_SKIP_CLUSTER") == "1":
            pytest.skip("NBAGENT_SKIP_CLUSTER=1")
        pytest.importorskip("distributed", reason="dask.distributed is not installed")
    work = tmp_path / "nb"
    work.mkdir()
    shutil.copy(path, work / path.name)
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OLLAMA_MODEL"):  # offline: auto() picks the local model
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NBAGENT_STORE", str(work / "threads.db"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(work / path.name, as_version=4)
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(work)}})
    client.execute()
    errors = [
        out for cell in nb.cells if cell.cell_type == "code"
        for out in cell.get("outputs", []) if out.get("output_type") == "error"
    ]
    assert not errors, errors
    text = "\n".join(
        str(out.get("text", "")) + str(out.get("data", {}).get("text/plain", ""))
        for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
    )
    assert "Traceback" not in text
    assert "sk-" not in text  # no key ever printed
