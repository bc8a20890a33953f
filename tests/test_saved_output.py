"""What a saved notebook shows: styles that survive an untrusted notebook's sanitizer
(`with_plain_fallbacks`), and a file without live widgets' outputs (`clean_outputs`).

The real-browser side (an untrusted notebook in JupyterLab, light and dark) is
tests/browser/test_saved_view.py.
"""

from __future__ import annotations

import json
import re

import pytest

from nbagent import Agent, UserError, tool
from nbagent.display.html import render_result_html
from nbagent.display.plain_css import plain_value, with_plain_fallbacks
from nbagent.models import ScriptedModel, tool_call
from nbagent.notebook import clean_outputs
from nbagent.store import MemoryStore
from nbagent.widgets._transcript import transcript_bundle

# What JupyterLab's sanitizer keeps of a colour (apputils' Sanitizer: hex, rgb(), rgba(), names)
_PLAIN_COLOUR = re.compile(r"#[0-9a-f]+|rgba?\([\d\s,.]+\)|[a-z]+", re.I)


@tool(requires_approval=True)
def refund(order_id: str) -> str:
    """Refund an order."""
    return f"refunded {order_id}"


def _paused_run():
    agent = Agent(ScriptedModel([tool_call("refund", order_id="42"), "Refunded."]), tools=[refund],
                  store=MemoryStore())
    return agent, agent.run_sync("Refund order 42", thread="t-saved")


def _declarations(html: str) -> list[list[tuple[str, str]]]:
    return [[tuple(d.split(":", 1)) for d in style.split(";") if ":" in d]  # type: ignore[misc]
            for style in re.findall(r'\sstyle="([^"]*)"', html)]


def _check_every_themed_declaration_has_a_plain_one_before_it(html: str) -> int:
    themed = 0
    for decls in _declarations(html):
        for i, (prop, value) in enumerate(decls):
            if "var(" not in value and "color-mix(" not in value:
                continue
            themed += 1
            plain = plain_value(value)
            if plain is None:  # the theme's own text colour: inherited instead
                assert prop == "color", (prop, value)
                continue
            assert decls[i - 1] == (prop, plain), (decls[i - 1], prop, value)
            assert "var(" not in plain and "color-mix(" not in plain
    return themed


def test_a_paused_runs_summary_keeps_a_plain_style_for_every_themed_one():
    _, result = _paused_run()
    html = render_result_html(result)
    assert _check_every_themed_declaration_has_a_plain_one_before_it(html) > 20
    # the "needs approval" label: its tint, plain, is the label colour at low alpha (reads on light and dark)
    assert "background:rgba(230,126,0,.22);background:color-mix(" in html


def test_the_saved_copy_of_a_view_keeps_its_look_untrusted():
    _, result = _paused_run()
    html = transcript_bundle("t-saved", result.messages)["text/html"]
    assert _check_every_themed_declaration_has_a_plain_one_before_it(html) > 10
    # its border and the user's bubble: a grey with alpha, not a light-theme grey
    assert "border:1px solid rgba(127,127,127,.35);border:1px solid var(--jp-border-color2" in html


def test_plain_values_are_what_the_sanitizer_keeps():
    for value in ["var(--jp-warn-color1,#e67e00)", "1px solid var(--jp-border-color2,#ddd)",
                  "color-mix(in srgb,var(--jp-border-color1,#9e9e9e) 22%,var(--jp-layout-color1,#fff))",
                  "color-mix(in srgb,#8e24aa 22%,var(--jp-layout-color1,#fff))",
                  "var(--jp-layout-color2,#eef3fb)", "var(--jp-ui-font-color2,#666)"]:
        plain = plain_value(value)
        assert plain is not None, value
        assert _PLAIN_COLOUR.fullmatch(plain.split()[-1]), (value, plain)
    # a light-theme grey or white would vanish or glare on a dark page: none is used
    assert plain_value("var(--jp-layout-color1,#fff)") == "transparent"
    assert plain_value("var(--jp-ui-font-color1,#222)") is None


def test_fallbacks_are_written_once():
    html = '<span style="color:var(--jp-warn-color1,#e67e00);padding:1px">x</span>'
    once = with_plain_fallbacks(html)
    assert once == '<span style="color:#e67e00;color:var(--jp-warn-color1,#e67e00);padding:1px">x</span>'
    assert with_plain_fallbacks(once) == once
    # text is not touched, even when it reads like a style
    text = "<p>style=&quot;color:var(--x,#fff)&quot;</p>"
    assert with_plain_fallbacks(text) == text


# ------------------------------------------------------------------------------- clean_outputs
VIEW = "application/vnd.jupyter.widget-view+json"


def _saved_notebook(tmp_path, outputs):
    path = tmp_path / "saved.ipynb"
    cells = [{"cell_type": "markdown", "id": "m", "metadata": {}, "source": "# Title"},
             {"cell_type": "code", "id": "c", "metadata": {}, "execution_count": 1, "source": "view",
              "outputs": outputs}]
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {}}, "cells": cells}))
    return path


def test_clean_outputs_removes_the_live_views_and_keeps_the_rest(tmp_path):
    view = {"output_type": "display_data", "metadata": {},
            "data": {VIEW: {"model_id": "abc", "version_major": 2, "version_minor": 0}, "text/plain": "view"}}
    both = {"output_type": "execute_result", "execution_count": 1, "metadata": {},
            "data": {VIEW: {"model_id": "def"}, "text/plain": "x", "text/html": "<b>kept</b>"}}
    copy = {"output_type": "display_data", "metadata": {},
            "data": {"text/html": "<div>copy</div>", "text/plain": "copy"}}
    stream = {"output_type": "stream", "name": "stdout", "text": "printed\n"}
    path = _saved_notebook(tmp_path, [view, stream, both, copy])
    assert clean_outputs(path) == 2
    text = path.read_text()
    outputs = json.loads(text)["cells"][1]["outputs"]
    assert outputs == [stream, {**both, "data": {"text/html": "<b>kept</b>"}}, copy]
    assert text.endswith("}\n") and '\n "cells"' in text  # written as JupyterLab writes it
    assert clean_outputs(path) == 0 and path.read_text() == text  # nothing left to remove


def test_clean_outputs_refuses_what_is_not_a_notebook(tmp_path):
    with pytest.raises(UserError, match="no notebook at"):
        clean_outputs(tmp_path / "missing.ipynb")
    (tmp_path / "notes.ipynb").write_text("not json")
    with pytest.raises(UserError, match="not a notebook file"):
        clean_outputs(tmp_path / "notes.ipynb")
    (tmp_path / "old.ipynb").write_text(json.dumps({"nbformat": 3, "worksheets": []}))
    with pytest.raises(UserError, match="not an nbformat 4 notebook"):
        clean_outputs(tmp_path / "old.ipynb")
