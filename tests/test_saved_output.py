"""What a saved notebook shows: styles that survive an untrusted notebook's sanitizer (each themed
declaration after a plain one, `nbagent.display.theme`), and a file without live widgets' outputs
(`clean_outputs`).

The real-browser side (an untrusted notebook in JupyterLab, light and dark) is
tests/browser/test_saved_view.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nbagent import Agent, UserError, tool
from nbagent.display import theme
from nbagent.display.html import render_result_html
from nbagent.messages import UserMessage
from nbagent.models import ScriptedModel, tool_call
from nbagent.notebook import clean_outputs
from nbagent.store import MemoryStore
from nbagent.widgets._transcript import transcript_bundle

# What JupyterLab's sanitizer keeps of a value (apputils' Sanitizer: lengths, numbers, names, and
# colours as #hex of any length, rgb(), rgba() or a name); it drops var() and color-mix().
_PLAIN_WORD = re.compile(r"#[0-9a-f]+|rgba?\([\d\s,.]+\)|[a-z-]+|[\d.]+(px|em|%)?", re.I)
_THEMED = ("var(", "color-mix(")
_INHERITED = {theme.TEXT.themed, theme.UI_FONT.themed, theme.CONTENT_FONT.themed}
"""Themed values with no plain one: the theme's text colour and fonts (untrusted, the page's own)."""
ROOT = Path(__file__).resolve().parent.parent / "nbagent"


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
            for style in re.findall(r"""\sstyle=["']([^"']*)["']""", html)]


def _themed(value: str) -> bool:
    return any(t in value for t in _THEMED)


def _check_every_themed_declaration_has_a_plain_one_before_it(html: str) -> int:
    themed = 0
    for decls in _declarations(html):
        for i, (prop, value) in enumerate(decls):
            if not _themed(value):
                continue
            themed += 1
            if value in _INHERITED:
                assert prop in ("color", "font-family"), (prop, value)
                continue
            assert i > 0 and decls[i - 1][0] == prop, (decls[i - 1 : i + 1])
            plain = decls[i - 1][1]
            assert not _themed(plain) and all(_PLAIN_WORD.fullmatch(w) for w in plain.split()), (prop, plain)
    return themed


def _without_plain_fallbacks(html: str) -> str:
    """`html` with every plain declaration that precedes a themed one taken out."""
    def strip(match: re.Match[str]) -> str:
        decls = match.group(2).split(";")
        kept = [d for d, after in zip(decls, [*decls[1:], ""], strict=True)
                if not (after.split(":")[0] == d.split(":")[0] and _themed(after) and not _themed(d))]
        return match.group(1) + ";".join(kept) + match.group(3)
    return re.sub(r"""(\sstyle=["'])([^"']*)(["'])""", strip, html)


def test_a_paused_runs_summary_keeps_a_plain_style_for_every_themed_one():
    _, result = _paused_run()
    html = render_result_html(result)
    assert _check_every_themed_declaration_has_a_plain_one_before_it(html) > 20
    # the "needs approval" label: its tint, plain, is the label colour at low alpha (reads on light and dark)
    assert "background:#e67e0038;background:color-mix(in srgb,var(--jp-warn-color1,#e67e00) 22%," in html


def test_the_saved_copy_of_a_view_keeps_its_look_untrusted():
    _, result = _paused_run()
    html = transcript_bundle("t-saved", result.messages)["text/html"]
    assert _check_every_themed_declaration_has_a_plain_one_before_it(html) > 10
    # its border and the user's bubble: a grey with alpha, not a light-theme grey
    assert "border:1px solid #7f7f7f59;border:1px solid var(--jp-border-color2,#ddd)" in html
    assert "background:#7f7f7f1f;background:var(--jp-layout-color2,#eef3fb)" in html


@tool
def weather(city: str, day: int) -> str:
    """The weather in a city."""
    return f"{city}, day {day}: sunny, 21 C, wind 3 m/s"


def test_the_plain_fallbacks_cost_a_long_saved_copy_under_a_tenth_of_its_bytes():
    script: list = []
    for day in range(12):
        answer = f"Day {day}: **sunny**.\n\n| day | C |\n|---|---|\n| {day} | 21 |"
        script += [tool_call("weather", city="Paris", day=day), answer]
    agent = Agent(ScriptedModel(script), tools=[weather], store=MemoryStore())
    for day in range(12):
        messages = agent.run_sync(f"The weather in Paris on day {day}?", thread="t-long").messages
    html = transcript_bundle("t-long", messages)["text/html"]
    assert _check_every_themed_declaration_has_a_plain_one_before_it(html) > 100
    themed_only = _without_plain_fallbacks(html)
    assert len(html) < 1.10 * len(themed_only), (len(html), len(themed_only))  # 11.3 % when patched in afterwards


def test_every_theme_token_has_a_plain_value_the_sanitizer_keeps():
    tokens = {name: value for name, value in vars(theme).items() if isinstance(value, theme.Token)}
    assert len(tokens) > 15
    for name, token in tokens.items():
        assert _themed(token.themed) or token.plain == token.themed, name
        if token.plain is None:  # the page's own text colour and fonts
            assert token.themed in _INHERITED, name
            continue
        assert not _themed(token.plain) and _PLAIN_WORD.fullmatch(token.plain.split()[-1]), (name, token.plain)
    # a tint, plain, is its colour at low alpha; a light-theme grey or white would vanish or glare on a dark page
    assert theme.tint(theme.GREY).plain == "#7f7f7f38" and theme.tint(theme.PURPLE, 50).plain == "#8e24aa80"
    with pytest.raises(ValueError, match="#rrggbb"):
        theme.tint(theme.TEXT)


def test_only_the_theme_table_writes_a_theme_variable():
    """Every themed value comes from `nbagent.display.theme` and is written with its fallback
    (`theme.css`): no module spells a theme variable or a color-mix of its own."""
    spelled = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
               if p.name != "theme.py" and ("var(--jp" in p.read_text() or "color-mix(" in p.read_text())]
    assert spelled == []


def test_model_text_that_reads_like_a_style_stays_text():
    text = 'look: <span style="color:var(--jp-warn-color1,#e67e00)">x</span>'
    html = transcript_bundle("t", [UserMessage(text)])["text/html"]
    assert "&lt;span style=&quot;color:var(--jp-warn-color1,#e67e00)&quot;&gt;x&lt;/span&gt;" in html


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
