"""Variables as context in the chat view: ``@`` completes from the notebook's variables, ``@df``
attaches a capped summary shown as a chip, the chip shows the exact text sent, and the thread
keeps it. Headless (ipywidgets without a browser), with scripted models."""

from __future__ import annotations

import re
from typing import Any

import ipywidgets as widgets
import pandas as pd
import pytest

import nbagent
from nbagent import Agent
from nbagent.models import FunctionModel
from nbagent.store.memory import MemoryStore
from nbagent.widgets._attach import variable_kind

from .test_widgets import ask, click, press_enter, settle


def _last_user(messages: list[Any], request: Any) -> str:
    return [m for m in messages if m.kind == "user"][-1].content


@pytest.fixture
def namespace() -> dict[str, Any]:
    return {
        "df": pd.DataFrame({"city": ["Paris", "Lyon", None], "sales": [10.5, 3.0, 7.25]}),
        "dfx": [1, 2, 3],
        "answer": 42,
        "_hidden": 1,
        "pd": pd,
        "helper": _last_user,
    }


def _view(namespace: dict[str, Any], **kwargs: Any) -> Any:
    agent = Agent(FunctionModel(_last_user), store=MemoryStore(), **kwargs)
    return agent.chat(thread="t-attach", namespace=namespace)


async def test_typing_at_offers_the_notebooks_variables_with_type_and_shape(namespace: dict[str, Any]) -> None:
    view = _view(namespace)
    await view.wait_loaded()
    box = view.message_box
    assert isinstance(box, widgets.Combobox) and box.ensure_option is False
    box.value = "Look at @d"
    assert box.options == ("Look at @df", "Look at @dfx")  # the browser's completions
    offered = view.attachments.choices
    assert offered.layout.display == "block"
    assert "@df</b> DataFrame 3x2" in offered.value and "@dfx</b> list 3" in offered.value
    box.value = "Look at @"  # every variable a person made: no modules, functions or _names
    assert box.options == ("Look at @answer", "Look at @df", "Look at @dfx")
    box.value = "Look at it"
    assert box.options == () and offered.layout.display == "none"


def _styles(html: str) -> list[dict[str, str]]:
    """Each inline style of `html` as {property: its last value}; a declaration the browser would
    drop (a value with a colon, e.g. ``color:color:...``) fails the test."""
    out = []
    for style in re.findall(r'style="([^"]*)"', html):
        declarations = [d.partition(":") for d in style.split(";") if d]
        assert all(":" not in value for _, _, value in declarations), style
        out.append({prop: value for prop, _, value in declarations})
    return out


async def test_the_offered_variables_and_the_text_sent_are_muted_lines(namespace: dict[str, Any]) -> None:
    view = _view(namespace)
    await view.wait_loaded()
    view.message_box.value = "Look at @df"
    await click(view.attachments.chips.children[0])
    view.message_box.value = "Look at @df and @d"
    for html in (view.attachments.choices.value, view.attachments.preview.value):
        first = _styles(html)[0]
        assert first["color"] == "var(--jp-ui-font-color2,#666)" and first["font-size"] == "12px", html


async def test_an_at_name_attaches_a_chip_whose_click_shows_the_exact_text_sent(namespace: dict[str, Any]) -> None:
    view = _view(namespace)
    await view.wait_loaded()
    view.message_box.value = "Which city sells most? @df and mail bob@example.com"
    chips = view.attachments.chips.children
    assert [c.description for c in chips] == ["@df"]  # an e-mail address is no attachment
    assert "DataFrame 3x2" in chips[0].tooltip
    await click(chips[0])
    preview = view.attachments.preview
    assert preview.layout.display == "block"
    sent_text = view.attachments.text_of("df")
    assert "DataFrame: 3 rows x 2 columns" in sent_text and "null counts:" in sent_text
    shown = re.search(r"<pre[^>]*>(.*)</pre>", preview.value, re.S)
    assert shown is not None and "Paris" in shown.group(1) and "DataFrame: 3 rows x 2 columns" in shown.group(1)
    await click(chips[0])  # a second click hides it again
    assert preview.layout.display == "none"


async def test_send_adds_the_summaries_and_the_thread_keeps_what_the_model_saw(namespace: dict[str, Any]) -> None:
    view = _view(namespace)
    result = await ask(view, "Which city sells most? @df")
    seen = result.output  # the model answers with the message it received
    assert seen.startswith("Which city sells most? @df\n\n[attached @df (DataFrame 3x2)]\n")
    assert "head(5):" in seen and "describe():" in seen and "Paris" in seen
    stored = [m for m in (await view.agent.store.load(view.thread)).messages if m.kind == "user"]
    assert stored[-1].content == seen  # a resume or a static render shows the same text
    assert view.attachments.chips.children == () and view.message_box.value == ""


async def test_a_variable_is_cut_to_the_cap_and_never_sent_whole() -> None:
    big = pd.DataFrame({"n": range(50_000), "text": ["x" * 40] * 50_000})
    view = _view({"big": big})
    result = await ask(view, "@big")
    assert len(result.output) < 20_000 and "[cut:" not in result.output[:40]
    assert "DataFrame: 50,000 rows x 2 columns" in result.output


async def test_context_redact_edits_the_text_before_it_is_shown_or_sent(namespace: dict[str, Any]) -> None:
    def mask(name: str, text: str) -> str:
        return text.replace("Paris", "█████")

    view = _view(namespace, context_redact=mask)
    view.message_box.value = "@df"
    await click(view.attachments.chips.children[0])
    assert "█████" in view.attachments.preview.value and "Paris" not in view.attachments.preview.value
    view.message_box.value = "@df please"
    press_enter(view.message_box)
    await settle()
    result = await view.wait()
    assert "█████" in result.output and "Paris" not in result.output


def test_context_redact_must_be_a_function() -> None:
    with pytest.raises(nbagent.UserError, match="context_redact must be a function"):
        Agent(FunctionModel(_last_user), context_redact="mask")  # type: ignore[arg-type]


async def test_a_message_without_at_names_is_sent_as_typed(namespace: dict[str, Any]) -> None:
    view = _view(namespace)
    result = await ask(view, "plain text, answer is 42")
    assert result.output == "plain text, answer is 42"


async def test_in_a_kernel_the_shells_own_variables_are_offered() -> None:
    from IPython.core.interactiveshell import InteractiveShell

    InteractiveShell.instance().user_ns["kernel_frame"] = pd.DataFrame({"a": [1]})
    agent = Agent(FunctionModel(_last_user), store=MemoryStore())
    view = agent.chat(thread="t-kernel")  # no namespace given: the running shell's
    view.message_box.value = "@kernel_f"
    assert view.message_box.options == ("@kernel_frame",)


def test_variable_kind_names_type_and_shape() -> None:
    assert variable_kind(pd.DataFrame({"a": range(3000)})) == "DataFrame 3,000x1"
    assert variable_kind([1, 2]) == "list 2" and variable_kind(7) == "int"


class ClosedDataset:
    """Like a closed h5py dataset (h5py is not installed here): asking its shape or length
    raises, as h5py's ``Dataset.shape`` does once its file is closed."""

    @property
    def shape(self) -> tuple[int, ...]:
        raise ValueError("Not a dataset (not a dataset)")

    def __len__(self) -> int:
        raise ValueError("Not a dataset (not a dataset)")


class BrokenList(list):  # type: ignore[type-arg]
    def __len__(self) -> int:
        raise RuntimeError("no length today")


async def test_a_variable_whose_shape_or_length_raises_breaks_neither_completion_nor_attachments(
        namespace: dict[str, Any]) -> None:
    import weakref

    class Gone:
        pass

    gone = Gone()
    namespace.update(closed=ClosedDataset(), broken=BrokenList([1]), proxy=weakref.proxy(gone))
    del gone  # a dead proxy: even isinstance() on it raises ReferenceError
    view = _view(namespace)
    await view.wait_loaded()
    box = view.message_box
    box.value = "Look at @"
    assert box.options == tuple(f"Look at @{n}" for n in ("answer", "broken", "closed", "df", "dfx", "proxy"))
    offered = view.attachments.choices.value
    assert "@closed</b> ClosedDataset" in offered and "@broken</b> BrokenList" in offered
    assert "@proxy</b> ProxyType" in offered
    box.value = "Compare @closed with @df and @broken, then @dfx and @proxy"
    assert [c.description for c in view.attachments.chips.children] == [
        "@closed", "@df", "@broken", "@dfx", "@proxy"]
    sent = view.attachments.message("x")
    assert "DataFrame: 3 rows x 2 columns" in sent
    assert "[attached @proxy (ProxyType)]\n<ProxyType: could not be read: ReferenceError(" in sent
    assert variable_kind(ClosedDataset()) == "ClosedDataset" and variable_kind(BrokenList()) == "BrokenList"


async def test_the_at_line_puts_data_first_and_says_how_many_more_there_are() -> None:
    agent = Agent(FunctionModel(_last_user), store=MemoryStore())
    names: dict[str, Any] = {f"col_{i:02d}": [i] for i in range(14)}
    names.update(analyst=agent, a_view=agent.chat(thread="other"), a_result=await agent.run("hi"))
    view = agent.chat(thread="t-many", namespace=names)
    await view.wait_loaded()
    view.message_box.value = "@"
    offered = view.attachments.choices.value
    shown = re.findall(r"<b>@(\w+)</b>", offered)
    assert shown == [f"col_{i:02d}" for i in range(12)]  # data first, in order
    assert "… 5 more (type more of the name)" in offered
    view.message_box.value = "@a"  # tooling comes after data, still offered
    assert re.findall(r"<b>@(\w+)</b>", view.attachments.choices.value) == ["a_result", "a_view", "analyst"]
    assert "more" not in view.attachments.choices.value
