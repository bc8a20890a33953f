"""The README's pictures, made by the test run: each example notebook after Run All in JupyterLab,
and the chat view of a real run with a call waiting for approval (the hero image).

What a newcomer does: a folder with the example notebooks (built from scripts/make_notebooks.py, so
without saved outputs), JupyterLab on it, no API key (the bundled local model, which the
``local_llm_base_url`` fixture has started and the kernels reuse), the default store
``./.nbagent/threads.db`` shared by all the notebooks. Each notebook is opened, run with Run All,
checked (every code cell ran, no error output, no traceback), and photographed whole:

- docs/img/notebook_0N.png (light theme, committed: the README shows them), and
- tests/browser/artifacts/notebook_0N-dark.png (the same page in JupyterLab Dark, for review).

The hero image docs/img/chat_view.png is a view in which the local model has answered one request
with a tool and waits for approval of a second one (its dark twin goes to the artifacts).
``NBAGENT_SKIP_SCREENSHOTS=1`` skips this module (the images are then left as they are).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import nbformat
import pytest

from tests.test_notebooks import MAKER

from .harness import KNOWN_CONSOLE_NOISE, BrowserHarnessError, JupyterServer, NotebookPage, write_notebook

REPO = Path(__file__).resolve().parents[2]
DOCS_IMG = REPO / "docs" / "img"
ARTIFACTS = Path(os.environ.get("NBAGENT_BROWSER_ARTIFACTS", Path(__file__).parent / "artifacts"))
RUN_TIMEOUT = 300.0  # a whole notebook with the local model, on a loaded 2-core machine
WIDTH = 1100
DARK = "JupyterLab Dark"
LIGHT = "JupyterLab Light"

WAITING_FOR_A_CLICK = {"02_approve_tools": "book_table", "06_mcp_tools": "add_note", "08_notebook_as_context": "python",
                      "11_sub_agents": "researcher → delete_file"}
"""The notebooks whose view asks for approval: after Run All its row still waits, buttons live."""

CELL_PICTURES = {"08_notebook_as_context": (5, "agent_magic.png")}
"""A cell photographed on its own after Run All (its index in the notebook, the picture in docs/img):
08's ``%%agent`` cell on a DataFrame, with the view under it (the README's notebook section)."""

pytestmark = [
    pytest.mark.local_llm,
    pytest.mark.skipif(os.environ.get("NBAGENT_SKIP_SCREENSHOTS") == "1", reason="NBAGENT_SKIP_SCREENSHOTS=1"),
]

# Where the notebook's last cell ends, measured from the top of its scroll box (scrolled to the top),
# and where that box starts in the window: the window that shows the whole notebook, and no more.
_JS_CONTENT_HEIGHT = """
() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const outer = panel.node.querySelector('.jp-WindowedPanel-outer') || panel.content.node;
  outer.scrollTop = 0;
  const cells = panel.content.widgets;
  const box = outer.getBoundingClientRect();
  const last = cells[cells.length - 1].node.getBoundingClientRect();
  return {top: Math.ceil(box.top), content: Math.ceil(last.bottom - box.top)};
}
"""
# After Run All the last cell is the active one: make the first one active, as a freshly opened notebook.
_JS_FIRST_CELL_ACTIVE = """
() => {
  const nb = window.jupyterapp.shell.currentWidget.content;
  nb.deselectAll(); nb.activeCellIndex = 0; nb.mode = 'command';
  if (document.activeElement) document.activeElement.blur();
}
"""
_JS_THEME = "() => document.body.dataset.jpThemeName"

HERO = '''\
from nbagent import Agent, tool
from nbagent.models import auto

model = auto()   # no key: the bundled local model (SmolLM2-135M)


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny, 22 °C in {city}"


@tool(requires_approval=True)
def book_table(city: str) -> str:
    """Book a restaurant table in a city."""
    return f"Table booked in {city} for 20:00"


agent = Agent(model, tools=[get_weather, book_table], settings={"max_tokens": 200})
view = agent.chat(thread="dinner")
view
'''


@pytest.fixture(scope="module")
def user_folder(tmp_path_factory: pytest.TempPathFactory, local_llm_base_url: str) -> Iterator[JupyterServer]:
    """A folder with the notebooks and JupyterLab on it, as after `make lab` with no key."""
    root = tmp_path_factory.mktemp("user-folder")
    for name in MAKER.NOTEBOOKS:
        nbformat.write(MAKER.build(name), root / name)
    write_notebook(root / "hero.ipynb", [HERO])
    # no key of any provider (auto() then picks the local model) and the default store in the folder
    env = {"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "", "OLLAMA_MODEL": "", "NBAGENT_STORE": "",
           }
    server = JupyterServer(root, app="lab", env=env, log_path=tmp_path_factory.mktemp("lab") / "server.log")
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


def _set_theme(page: NotebookPage, theme: str) -> None:
    page.command("apputils:change-theme", {"theme": theme})
    page.wait_for(lambda: page.eval(_JS_THEME) == theme, f"the {theme} theme", timeout=30)
    time.sleep(0.5)  # let the theme's CSS settle before a picture


def _simple_page(page: NotebookPage) -> None:
    """Only the notebook: simple interface, no side panels, no status bar."""
    page.command("application:set-mode", {"mode": "single-document"})
    page.eval("""() => {
      const shell = window.jupyterapp.shell;
      shell.collapseLeft(); shell.collapseRight();
      const status = document.querySelector('#jp-main-statusbar'); if (status) status.style.display = 'none';
    }""")


def _photograph(page: NotebookPage, path: Path) -> Path:
    """The whole notebook: a window tall enough that nothing scrolls, then the picture."""
    page.eval(_JS_FIRST_CELL_ACTIVE)
    sizes = page.eval(_JS_CONTENT_HEIGHT)
    page.page.set_viewport_size({"width": WIDTH, "height": min(sizes["top"] + sizes["content"] + 24, 16000)})
    time.sleep(0.5)
    sizes = page.eval(_JS_CONTENT_HEIGHT)  # once more: the layout may have moved with the new size
    page.page.set_viewport_size({"width": WIDTH, "height": min(sizes["top"] + sizes["content"] + 24, 16000)})
    time.sleep(0.3)
    page.eval(_JS_CONTENT_HEIGHT)  # scrolled to the top
    path.parent.mkdir(parents=True, exist_ok=True)
    page.page.screenshot(path=str(path), full_page=False)
    page.page.set_viewport_size({"width": WIDTH, "height": 1000})
    return path


def _run_all(page: NotebookPage) -> None:
    page.run_all()
    page.wait_idle(timeout=RUN_TIMEOUT)
    report = page.cell_report()
    assert report["errors"] == [], report["errors"]
    assert report["unexecuted"] == [], f"code cells not run: {report['unexecuted']}"
    text = page.output_text()
    assert "Traceback" not in text
    # the model auto() picked offline: the local one (notebook 07: its stand-in for a batch)
    assert "local-model" in text or "stand-in" in text, text[:500]


NOTEBOOK_NAMES = ["01_quickstart", "02_approve_tools", "03_token_costs", "04_state_and_history",
                  "05_structured_output", "06_mcp_tools", "07_batch_on_a_cluster", "08_notebook_as_context",
                  "09_evals_and_forecasts", "10_long_sessions", "11_sub_agents", "12_guardrails"]


@pytest.mark.parametrize("stem", NOTEBOOK_NAMES)
def test_notebook_after_run_all(stem: str, user_folder: JupyterServer,
                                page_factory: Callable[..., NotebookPage]) -> None:
    if "cluster" in stem and os.environ.get("NBAGENT_SKIP_CLUSTER") == "1":
        pytest.skip("NBAGENT_SKIP_CLUSTER=1 (the notebook starts a Dask cluster)")
    page = page_factory(user_folder, f"{stem}.ipynb", timeout=90.0)
    page.page.set_viewport_size({"width": WIDTH, "height": 1000})
    _simple_page(page)
    t0 = time.monotonic()
    _run_all(page)
    took = time.monotonic() - t0
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []
    if stem in WAITING_FOR_A_CLICK:  # Run All leaves the view's call waiting for the person
        page.wait_text("needs approval", timeout=60.0)
        for label in ("Approve", "Deny", "Edit"):
            button = page.output_buttons(label).first
            button.wait_for(state="visible", timeout=60_000)
            assert button.is_enabled(), label
        assert WAITING_FOR_A_CLICK[stem] in page.output_text()
    _set_theme(page, LIGHT)
    number = stem[:2]
    _photograph(page, DOCS_IMG / f"notebook_{number}.png")
    if stem in CELL_PICTURES:  # one cell of it, for the README's section on that feature
        index, picture = CELL_PICTURES[stem]
        page.page.set_viewport_size({"width": WIDTH, "height": 4000})  # the whole cell in the window
        time.sleep(0.5)
        page.eval(_JS_CONTENT_HEIGHT)  # scrolled to the top
        page.page.locator(".jp-Notebook .jp-Cell").nth(index).screenshot(path=str(DOCS_IMG / picture))
        page.page.set_viewport_size({"width": WIDTH, "height": 1000})
    _set_theme(page, DARK)
    _photograph(page, ARTIFACTS / f"notebook_{number}-dark.png")
    _set_theme(page, LIGHT)
    print(f"\n{stem}: Run All took {took:.1f}s")


def test_hero_image_is_a_real_run(user_folder: JupyterServer, page_factory: Callable[..., NotebookPage]) -> None:
    page = page_factory(user_folder, "hero.ipynb", timeout=90.0)
    page.page.set_viewport_size({"width": 900, "height": 1000})
    _simple_page(page)
    page.run_cell(0)
    page.wait_idle(timeout=RUN_TIMEOUT)
    page.wait_for(lambda: page.output_buttons("Send").count() > 0, "the Send button")
    page.type_text("Use the get_weather tool for Paris.")
    page.wait_text("2 model calls", timeout=RUN_TIMEOUT)  # the footer: the call, then the answer
    try:  # the tool's result, and the answer made from it (the footer's count can reach the page first)
        page.wait_for(lambda: page.output_text().count("22 °C in Paris") >= 2, "22 °C in Paris twice", timeout=30)
    except BrowserHarnessError:
        raise AssertionError(f"the answer does not repeat the tool's result:\n{page.output_text()}") from None
    page.type_text("Use the book_table tool for Paris.")
    page.wait_text("needs approval", timeout=RUN_TIMEOUT)
    page.output_buttons("Approve").first.wait_for(state="visible", timeout=60_000)
    time.sleep(1.0)  # the footer's totals arrive with the pause
    assert "% of 4.1k" in page.output_text(), "the footer's context gauge (the local model's window)"
    clipped = page.eval("""() => Array.from(document.querySelectorAll('.nbagent-status')).filter(pill => {
        const cell = pill.closest('td'); if (!cell) return false;
        return pill.getBoundingClientRect().right > cell.getBoundingClientRect().right + 0.5;
    }).map(pill => pill.innerText)""")
    assert clipped == [], f"status pills cut by their column: {clipped}"
    view = page.page.locator(".nbagent-chat").first
    _set_theme(page, LIGHT)
    view.screenshot(path=str(DOCS_IMG / "chat_view.png"))
    _set_theme(page, DARK)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    view.screenshot(path=str(ARTIFACTS / "chat_view-dark.png"))
    _set_theme(page, LIGHT)
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []
