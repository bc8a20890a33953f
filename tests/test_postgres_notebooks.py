"""Two notebooks, two kernels, one PostgreSQL thread: a run paused in one is approved in the
other's chat view (its Approve button) and completes there; the first kernel then sees it done.

Real Jupyter kernels driven by nbclient (as a team on JupyterHub would have them), against the
private cluster of tests/conftest_postgres.py. Marked ``postgres`` and ``notebooks``.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.notebooks,
    pytest.mark.skipif(os.environ.get("NBAGENT_SKIP_NOTEBOOKS") == "1", reason="NBAGENT_SKIP_NOTEBOOKS=1"),
]

SETUP = """
import os
from nbagent import Agent, tool
from nbagent.models import FunctionModel, tool_call
from nbagent.store import PostgresStore

@tool(requires_approval=True)
def refund(order: int) -> str:
    \"\"\"Refund an order.\"\"\"
    with open(os.environ["NB_MARKER"], "a") as f:
        f.write(f"refund {order} in kernel {os.getpid()}\\n")
    return f"refunded order {order}"

def model(messages, info):
    return tool_call("refund", order=42) if messages[-1].kind == "user" else "Order 42 is refunded."

store = PostgresStore(os.environ["DATABASE_URL"], schema=os.environ["NB_SCHEMA"])
agent = Agent(FunctionModel(model), tools=[refund], store=store)
"""

KERNEL_A = [
    SETUP,
    'paused = await agent.run("Please refund order 42", thread="team-42")\n'
    'print(paused.status, [(p.name, p.args) for p in paused.pending])',
    # run after kernel B approved: the same thread, read again from the database
    'done = await store.load("team-42")\n'
    'print(done.meta.status, done.meta.output, [m.kind for m in done.messages])',
]

KERNEL_B = [
    SETUP,
    'view = agent.chat(thread="team-42")\n'
    "display(view)\n"
    "await view.wait_loaded()\n"
    "[row] = [r for r in view.rows.values() if r.status == 'needs approval']\n"
    'print(row.status, "Approve" in row.buttons)',
    "import asyncio\n"
    'row.buttons["Approve"].click()  # its handler hands the decision to the loop\n'
    "result = None\n"
    "for _ in range(200):\n"
    "    await asyncio.sleep(0.02)\n"
    "    result = await view.wait()\n"
    "    if result is not None:\n"
    "        break\n"
    "print(result.status, result.output)",
]


def _notebook(cells: list[str]) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    return nb


def _printed(cell: nbformat.NotebookNode) -> str:
    errors = [o for o in cell.outputs if o.output_type == "error"]
    assert not errors, "\n".join(errors[0].traceback)
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream").strip()


def test_a_run_paused_in_one_kernel_is_approved_and_completed_from_another(
    tmp_path: Path, postgres_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "refunds.txt"
    monkeypatch.setenv("DATABASE_URL", postgres_url)
    monkeypatch.setenv("NB_SCHEMA", pg_schema)
    monkeypatch.setenv("NB_MARKER", str(marker))
    a_nb, b_nb = _notebook(KERNEL_A), _notebook(KERNEL_B)
    resources = {"metadata": {"path": str(tmp_path)}}
    a = NotebookClient(a_nb, timeout=120, kernel_name="python3", resources=resources)
    b = NotebookClient(b_nb, timeout=120, kernel_name="python3", resources=resources)
    with a.setup_kernel(), b.setup_kernel():  # both kernels live at once
        for i in (0, 1):
            a.execute_cell(a_nb.cells[i], i)
        assert _printed(a_nb.cells[1]) == "paused [('refund', {'order': 42})]"
        for i in (0, 1, 2):
            b.execute_cell(b_nb.cells[i], i)
        assert _printed(b_nb.cells[1]) == "needs approval True"
        assert _printed(b_nb.cells[2]) == "completed Order 42 is refunded."
        a.execute_cell(a_nb.cells[2], 2)
        assert _printed(a_nb.cells[2]) == (
            "completed Order 42 is refunded. ['user', 'assistant', 'tool-result', 'assistant']")
    refunds = marker.read_text().splitlines()
    assert len(refunds) == 1, refunds  # the tool ran once, in kernel B
