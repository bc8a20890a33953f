"""What a tool's return value becomes: the text the model reads (`content`), the images it is sent
(`images`) and what only the view shows (`display`) — `nbagent._run.execute.tool_output` — and how
those are stored and sent to OpenAI-compatible and Anthropic servers over real HTTP (loopback)."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest

from nbagent import Agent, Image, Tool, tool
from nbagent._run.execute import MAX_RESULT_CHARS, tool_output
from nbagent.messages import ToolResultMessage, message_from_dict
from nbagent.models import FunctionModel, ScriptedModel, tool_call
from nbagent.models.anthropic import AnthropicModel
from nbagent.models.openai import OpenAIModel
from nbagent.store import MemoryStore, SQLiteStore
from tests.wire.replay_server import ReplayServer

pd = pytest.importorskip("pandas")


def png(size: int = 4, colour: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    from PIL import Image as PILImage

    buf = io.BytesIO()
    PILImage.new("RGB", (size, size), colour).save(buf, format="PNG")
    return buf.getvalue()


def frame(rows: int = 3) -> Any:
    return pd.DataFrame({"city": [f"city{i}" for i in range(rows)], "temp": [20 + i for i in range(rows)]})


# ---------------------------------------------------------------------------- tool_output
def test_a_dataframe_is_text_for_the_model_and_a_table_for_the_view() -> None:
    content, images, display = tool_output(frame())
    # the model reads the frame as a table of text, not a quoted JSON string with literal \n
    assert content == frame().to_string() + "\n\n[3 rows x 2 columns]"
    assert not content.startswith('"') and "\\n" not in content
    assert images == []
    assert display is not None
    html = display["text/html"]
    assert "<table>" in html and "<td>city2</td>" in html
    for gone in ("<style", "class=", "border=", "scoped"):
        assert gone not in html  # pandas' own styling is dropped: the view styles the table


def test_a_big_dataframe_is_sent_compact_with_its_shape() -> None:
    content, _, display = tool_output(frame(1000))
    lines = content.splitlines()
    assert lines[-1] == "[1000 rows x 2 columns]"
    assert "city0 " in content and "city999 " in content and "city500 " not in content
    assert len(lines) < 40
    assert display is not None  # pandas bounds its own HTML (display.max_rows)


def test_a_series_is_text_too() -> None:
    content, _, _ = tool_output(pd.Series([1, 2, 3], name="n"))
    assert content.startswith("0    1\n1    2\n2    3")
    assert "Name: n" in content


def test_the_size_limit_is_documented_and_kept() -> None:
    class Huge:
        def __str__(self) -> str:
            return "x" * (MAX_RESULT_CHARS * 3)

    content, _, _ = tool_output(Huge())
    assert len(content) < MAX_RESULT_CHARS + 200
    assert content.endswith(
        f"(16,000 more characters not shown: the result was cut to {MAX_RESULT_CHARS:,} characters)")
    # a string or a JSON value is sent whole, as before
    assert tool_output("y" * (MAX_RESULT_CHARS * 2)).content == "y" * (MAX_RESULT_CHARS * 2)
    assert tool_output(["a", "b"]).content == '["a", "b"]'
    assert tool_output({"n": 1}).content == '{"n": 1}'


def test_images_and_lists_of_text_and_images() -> None:
    data = png()
    content, images, display = tool_output(Image(data))
    assert images == [Image(data)] and display is None
    assert content == f"[image: {Image(data).describe()}]"

    from PIL import Image as PILImage

    content, images, _ = tool_output(["The chart:", PILImage.new("RGB", (3, 3)), "and a note"])
    assert content == "The chart:\n\nand a note"
    assert [i.media_type for i in images] == ["image/png"]

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([1, 3, 2])
    try:
        _, images, _ = tool_output(fig)
    finally:
        plt.close(fig)
    assert len(images) == 1 and images[0].media_type == "image/png"
    # bytes are data, not a picture: unchanged JSON / text
    assert tool_output([b"\x89PNG"]).images == []


def test_rich_html_is_sanitized() -> None:
    class Evil:
        def _repr_html_(self) -> str:
            return ('<table onclick="window.__pwned=1"><tr><td style="position:fixed">cell</td>'
                    '<td><img src=x onerror="window.__pwned=1"><a href="javascript:alert(1)">link</a>'
                    '<script>window.__pwned=1</script></td></tr></table><style>body{display:none}</style>')

        def __str__(self) -> str:
            return "Evil table"

    content, _, display = tool_output(Evil())
    assert content == "Evil table"
    assert display is not None
    html = display["text/html"]
    assert "cell" in html and "link" in html
    for bad in ("onclick", "onerror", "style", "<img", "javascript", "<script", "__pwned", "display:none"):
        assert bad not in html

    class OnlyScript:
        def _repr_html_(self) -> str:
            return "<script>alert(1)</script><div></div>"

    assert tool_output(OnlyScript()).display is None  # nothing visible is left: shown as text

    class Broken:
        def _repr_html_(self) -> str:
            raise RuntimeError("no HTML today")

    assert tool_output(Broken()).display is None  # the tool still succeeded


# ---------------------------------------------------------------------------- through a run
async def test_a_tool_returning_a_dataframe_and_an_image_in_a_run(tmp_path: Path) -> None:
    seen: list[ToolResultMessage] = []
    data = png()

    @tool
    def weather() -> Any:
        """Weather table."""
        return frame()

    @tool
    def chart() -> Any:
        """A chart."""
        return ["the chart", Image(data)]

    def model(messages: list[Any], request: Any) -> Any:
        if messages[-1].kind == "user":
            return [tool_call("weather"), tool_call("chart")]
        seen.extend(m for m in messages if m.kind == "tool-result")
        return "done"

    store = SQLiteStore(tmp_path / "t.db")
    agent = Agent(FunctionModel(model), tools=[weather, chart], store=store)
    result = await agent.run("go", thread="rich")
    assert result.status == "completed"
    by_name = {m.name: m for m in seen}
    assert by_name["weather"].content == frame().to_string(show_dimensions=True)
    assert by_name["weather"].display is not None and "<table>" in by_name["weather"].display["text/html"]
    assert by_name["chart"].content == "the chart" and by_name["chart"].images == [Image(data)]

    # persisted with the thread: the view re-renders the table and the image after a restart
    loaded = await SQLiteStore(tmp_path / "t.db").load("rich")
    assert loaded is not None
    stored = {m.name: m for m in loaded.messages if m.kind == "tool-result"}
    assert stored["weather"].display == by_name["weather"].display
    assert stored["chart"].images == [Image(data)]


def test_old_tool_results_read_unchanged_and_new_fields_round_trip() -> None:
    old = {"kind": "tool-result", "call_id": "c1", "name": "t", "content": "x", "is_error": False,
           "status": "done"}
    message = message_from_dict(old)
    assert isinstance(message, ToolResultMessage)
    assert message.images == [] and message.display is None
    assert message.to_dict() == old  # nothing new is written for a plain result
    rich = ToolResultMessage("c2", "t", "text", images=[Image(png())], display={"text/html": "<b>x</b>"})
    again = message_from_dict(json.loads(json.dumps(rich.to_dict())))
    assert again == rich


async def test_a_client_tool_answered_with_a_dataframe() -> None:
    question = Tool.client("pick_rows", "pick rows")
    agent = Agent(ScriptedModel([tool_call("pick_rows", id="q1"), "thanks"]), tools=[question],
                  store=MemoryStore())
    paused = await agent.run("go")
    assert paused.status == "paused"
    done = await agent.resume(paused, results={"q1": frame()})
    answer = next(m for m in done.messages if m.kind == "tool-result")
    assert answer.content == frame().to_string(show_dimensions=True) and answer.display is not None


# ---------------------------------------------------------------------------- over real HTTP
@pytest.fixture(scope="module")
def server() -> Any:
    with ReplayServer() as srv:
        yield srv


def _tools(returned: Any) -> list[Tool]:
    def get_temperature(city: str) -> Any:  # the recorded calls' names
        return returned

    def get_weather(location: str, units: str) -> Any:
        return returned

    return [Tool.from_function(get_temperature), Tool.from_function(get_weather)]


@pytest.mark.parametrize("tool_images", [True, False])
async def test_openai_tool_images_follow_as_a_user_message(server: ReplayServer, tool_images: bool) -> None:
    """Chat Completions ``tool`` messages take text only: the tool message says images follow, and
    one user message after the answer's tool results carries them; the view's table is never sent."""
    data = png()
    base = server.fault_base_url("then", "openai_single_tool_call", arg="openai_single_tool_result_answer")
    model = OpenAIModel("gpt-4o-mini", base_url=base, api_key="sk-test", tool_images=tool_images)
    agent = Agent(model, tools=_tools(["22 °C", Image(data)]), store=MemoryStore())
    server.reset()  # the conversation's answers start again from its first one
    before = 0
    try:
        result = await agent.run("go")
    finally:
        await model.aclose()
    assert result.status == "completed", result.error
    second = server.chat_requests()[before:][1]["body"]
    wire = json.dumps(second)
    roles = [m["role"] for m in second["messages"]]
    tool_message = second["messages"][roles.index("tool")]
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    if tool_images:
        assert roles[-2:] == ["tool", "user"]
        assert tool_message["content"] == "22 °C\n\n[the image this tool returned follows in the next user message]"
        images = second["messages"][-1]["content"]
        assert images[0]["type"] == "text" and "get_temperature" in images[0]["text"]
        assert images[1] == {"type": "image_url", "image_url": {"url": url}}
    else:  # a text-only model: no image part anywhere
        assert roles[-1] == "tool" and tool_message["content"] == "22 °C"
        assert "image_url" not in wire


async def test_a_dataframe_reaches_the_model_as_text_and_its_table_never(server: ReplayServer) -> None:
    base = server.fault_base_url("then", "openai_single_tool_call", arg="openai_single_tool_result_answer")
    model = OpenAIModel("gpt-4o-mini", base_url=base, api_key="sk-test")
    agent = Agent(model, tools=_tools(frame()), store=MemoryStore())
    server.reset()  # the conversation's answers start again from its first one
    before = 0
    try:
        result = await agent.run("go")
    finally:
        await model.aclose()
    assert result.status == "completed", result.error
    second = server.chat_requests()[before:][1]["body"]
    assert "<table" not in json.dumps(second)  # display is for the view only
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": second["messages"][-2]["tool_calls"][0]["id"],
                                      "content": frame().to_string(show_dimensions=True)}


async def test_anthropic_tool_images_go_inside_the_tool_result(server: ReplayServer) -> None:
    data = png()
    base = server.anthropic_fault_base_url("then", "anthropic_single_tool_use", arg="anthropic_tool_result_is_error")
    model = AnthropicModel("claude-haiku-4-5", base_url=base, api_key="sk-ant-test-0123456789abcdef", cache=False)
    agent = Agent(model, tools=_tools(["sunny", Image(data)]), store=MemoryStore())
    server.reset()
    before = 0
    try:
        result = await agent.run("go")
    finally:
        await model.aclose()
    assert result.status == "completed", result.error
    second = server.messages_requests()[before:][1]["body"]
    (block,) = second["messages"][-1]["content"]
    assert block["type"] == "tool_result"
    assert block["content"][0]["type"] == "text" and block["content"][0]["text"] == "sunny"
    assert block["content"][1] == {"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": base64.b64encode(data).decode()}}


def test_the_bundled_text_only_model_is_sent_no_tool_images(monkeypatch: pytest.MonkeyPatch) -> None:
    from nbagent.models import _local

    class Server:
        base_url = "http://127.0.0.1:9/v1"

    monkeypatch.setattr(_local, "_local_server", lambda key, timeout: Server())
    assert _local.local_model().tool_images is False  # llama.cpp answers image parts with HTTP 500
    assert _local.local_model(tool_images=True).tool_images is True
    assert OpenAIModel("gpt-4o-mini", api_key="sk-test").tool_images is True
