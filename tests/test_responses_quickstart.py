"""The quickstart notebook runs unchanged on OpenAI's Responses API when ``OPENAI_API_KEY`` is set.

Its cells (scripts/make_notebooks.py, the notebook's single source) run in order in this process,
as a kernel runs them (top-level ``await``, the last expression displayed), with
``OPENAI_API_KEY`` set and no ``OPENAI_BASE_URL``: `auto()` picks `OpenAIResponsesModel`, whose
requests the test sends to a scripted Responses server on loopback (a reasoning model that calls
the tool the prompt names) instead of api.openai.com. Nothing else is changed. What the prose
says shows: the tool calls and their results, the answers made from them, the view's rows and its
Thinking sections, the usage frame; and on the wire every request is ``store: false`` and carries
each reasoning item back byte-identical.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import inspect
from pathlib import Path
from typing import Any

import pytest

from nbagent.messages import AssistantMessage
from nbagent.models import OpenAIResponsesModel
from tests.wire.responses_scripted_server import ResponsesScriptedServer

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-quickstart-responses-0123456789abcdef"


def quickstart_cells() -> list[str]:
    spec = importlib.util.spec_from_file_location("make_notebooks", ROOT / "scripts" / "make_notebooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [source for kind, source in module.NOTEBOOKS["01_quickstart.ipynb"] if kind == "code"]


async def run_cell(source: str, namespace: dict[str, Any]) -> str:
    """Run one cell as IPython does (top-level ``await``); the text its last expression displays."""
    tree = ast.parse(source)
    shown = isinstance(tree.body[-1], ast.Expr) if tree.body else False
    if shown:
        last = tree.body[-1]
        assert isinstance(last, ast.Expr)
        tree.body[-1] = ast.copy_location(ast.Assign([ast.Name("_shown", ast.Store())], last.value), last)
        ast.fix_missing_locations(tree)
    done = eval(compile(tree, "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT), namespace)
    if inspect.iscoroutine(done):
        await done
    if not shown:
        return ""
    value = namespace["_shown"]
    html = getattr(value, "_repr_html_", None)
    return str(html()) if html is not None else repr(value)


@pytest.fixture
def server() -> Any:
    with ResponsesScriptedServer() as srv:
        yield srv


async def test_the_quickstart_runs_unchanged_on_the_responses_api(
    server: ResponsesScriptedServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from nbagent.widgets.stream import ThinkingText

    for name in ("ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "NBAGENT_REPLAY", "OLLAMA_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("NBAGENT_STORE", str(tmp_path / "threads.db"))
    monkeypatch.chdir(tmp_path)
    setup, *cells = quickstart_cells()
    ns: dict[str, Any] = {}
    await run_cell(setup, ns)
    model = ns["model"]
    assert type(model) is OpenAIResponsesModel and model.model_name == "gpt-5.4" and model.base_url is None
    model.base_url = server.base_url  # the network: loopback in place of api.openai.com
    shown = []
    for cell in cells:
        shown.append(await run_cell(cell, ns))
        await asyncio.sleep(0)  # between two cells a kernel's loop runs on: a view made loads its thread
        if "view" in ns:
            await ns["view"].wait_loaded()
    out = capsys.readouterr().out
    assert "OpenAIResponsesModel('gpt-5.4', provider='openai')" in out and KEY not in out

    # streaming in code: get_weather(Paris), its result, the answer made from it
    assert "[get_weather({'city': 'Paris'})]" in out and "[-> Sunny, 22 °C in Paris]" in out
    assert "Sunny, 22 °C in Paris (from get_weather)." in out
    # the view: get_time for Tokyo, then the follow-up's get_weather for Rome, each with its Thinking
    result, followup, view = ns["result"], ns["followup"], ns["view"]
    assert result.status == followup.status == "completed"
    assert followup.output == "Sunny, 22 °C in Rome (from get_weather)."
    assert result.thread == followup.thread
    calls = [(c.name, c.args) for m in followup.messages if isinstance(m, AssistantMessage) for c in m.tool_calls]
    assert calls == [("get_time", {"city": "Tokyo"}), ("get_weather", {"city": "Rome"})]
    thinking = [w.text for w in view.run_log.children if isinstance(w, ThinkingText)]
    assert thinking == ["**Calling get_time**\n\nThe user names it.", "**Calling get_weather**\n\nThe user names it."]
    assert "completed" in shown[-3] and "get_time" in shown[-3]  # `result`'s static summary
    usage = shown[-1]
    assert usage.count("gpt-5.4") == 2  # the call, then the answer (the summary columns: model, tokens, cost)
    assert all(c.provider == "openai" for c in followup.usage.calls)

    # the wire: store false, the settings' max_tokens as max_output_tokens, the reasoning carried back
    assert len(server.requests) == 6  # three tool loops of two requests
    for body in server.requests:
        assert body["store"] is False and "previous_response_id" not in body
        assert body["include"] == ["reasoning.encrypted_content"] and body["max_output_tokens"] == 200
    carried = [i for body in server.requests for i in body["input"] if i.get("type") == "reasoning"]
    assert carried and all(item == server.reasoning[item["id"]] for item in carried)
    assert {i["id"] for i in carried} == set(server.reasoning)  # every one went back
    await model.aclose()
