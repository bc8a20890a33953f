"""Variables as context in the chat view: typing ``@`` in the message box completes from the
kernel's variables, and each ``@name`` of the message that names a variable is attached.

An attached variable shows as a chip above the message box. What is sent is never the whole
object: it is the variable's capped summary (`nbagent.notebook.summarize`: a DataFrame's shape,
dtypes, ``head(5)``, ``describe()`` and null counts; anything else its ``repr``), edited by
``Agent(context_redact=...)`` when given. Clicking a chip shows that exact text. On Send the
summaries are added to the end of the message, so the thread keeps what the model saw.

Imports ipywidgets; the summaries come from the notebook edge, loaded when a variable is first
attached.
"""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any

import ipywidgets as widgets

from ..display.html import MUTED, SMALL
from ..display.sanitize import escape

__all__ = ["Attachments", "kernel_namespace", "variable_kind"]

MAX_CHOICES = 12
"""Names offered at once while typing ``@`` (the line says how many more match)."""
TOOLING = frozenset({"nbagent", "ipywidgets", "IPython", "ipykernel"})
"""Packages whose objects (an Agent, a ChatView, a RunResult, a widget) are offered after the data."""

_MENTION = re.compile(r"(?<![\w@])@([A-Za-z_][A-Za-z0-9_]*)")
_TYPING = re.compile(r"(?:^|(?<=\s))@([A-Za-z_][A-Za-z0-9_]*)?$")
_HIDDEN = frozenset({"In", "Out", "exit", "quit", "get_ipython", "open"})


def kernel_namespace() -> Mapping[str, Any] | None:
    """The running IPython shell's variables (``user_ns``), or None outside IPython."""
    if "IPython" not in sys.modules:
        return None
    from IPython import get_ipython

    shell = get_ipython()
    return getattr(shell, "user_ns", None) if shell is not None else None


def variable_kind(value: Any) -> str:
    """A variable's type with its shape or length, as the completion shows it: ``DataFrame
    3,000x4``, ``list 12``, ``int``. Just the type when asking its shape or length fails (a closed
    h5py dataset raises): one such variable must not break the completion of the others."""
    kind = type(value).__name__
    try:
        shape = getattr(value, "shape", None)
        if isinstance(shape, tuple) and all(isinstance(n, int) for n in shape):
            return f"{kind} {'x'.join(f'{n:,}' for n in shape)}"
        if isinstance(value, (list, tuple, dict, set, frozenset, str, bytes)):
            return f"{kind} {len(value):,}"
    except Exception:  # the object's own code failed: its type still says what it is
        pass
    return kind


def _offered(name: str, value: Any) -> bool:
    """Is this a variable a person made (not a module, function, class or IPython's own)?"""
    if name.startswith("_") or name in _HIDDEN:
        return False
    try:
        return not isinstance(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type))
    except Exception:  # isinstance asks a dead weakref.proxy its __class__, which raises
        return True


def _order(name: str, value: Any) -> tuple[bool, str]:
    """Data before tooling (nbagent's agents, views and results, widgets), then by name."""
    return type(value).__module__.partition(".")[0] in TOOLING, name


class Attachments:
    """The ``@`` completion and the chips of one message box (`ChatView` makes it).

    `namespace` gives the variables (the kernel's by default); `cap` the token cap of one
    summary; `redact` is ``Agent.context_redact`` or None. `widget` holds, above the message box,
    the names offered while typing ``@`` (with type and shape), the chips, and the text a clicked
    chip sends."""

    def __init__(self, box: widgets.Text, *, namespace: Callable[[], Mapping[str, Any] | None],
                 cap: Callable[[], int], redact: Callable[[], Callable[[str, str], str] | None]) -> None:
        self._box, self._namespace, self._cap, self._redact = box, namespace, cap, redact
        self.choices = widgets.HTML(layout=widgets.Layout(display="none"))
        self.chips = widgets.HBox(layout=widgets.Layout(display="none", flex_flow="row wrap"))
        self.preview = widgets.HTML(layout=widgets.Layout(display="none"))
        self.widget = widgets.VBox([self.choices, self.chips, self.preview], layout=widgets.Layout(width="100%"))
        self.widget.add_class("nbagent-attachments")
        self._shown: str | None = None
        """The name whose sent text the preview shows."""
        self.attached: dict[str, str] = {}
        """The attached variables: name -> kind (``DataFrame 3,000x4``), in the message's order."""
        box.observe(self._on_text, "value")

    def _variables(self) -> dict[str, Any]:
        namespace = self._namespace()
        if not namespace:
            return {}
        return {name: value for name, value in list(namespace.items()) if _offered(name, value)}

    def _on_text(self, change: dict[str, Any]) -> None:
        text = change["new"] or ""
        if "@" not in text and not self.attached and self.choices.layout.display == "none":
            return  # the usual keystroke: nothing to do, nothing sent to the browser
        variables = self._variables()
        self._offer(text, variables)
        mentioned = dict.fromkeys(m.group(1) for m in _MENTION.finditer(text))
        attached = {name: variable_kind(variables[name]) for name in mentioned if name in variables}
        if attached != self.attached:
            self.attached = attached
            self._draw_chips()

    def _offer(self, text: str, variables: Mapping[str, Any]) -> None:
        """While an ``@name`` is being typed at the end of the text: the matching variables, as the
        box's completions and as a line with their types and shapes."""
        typing = _TYPING.search(text)
        names: list[str] = []
        if typing is not None:
            prefix = typing.group(1) or ""
            names = sorted((n for n in variables if n.startswith(prefix)), key=lambda n: _order(n, variables[n]))
        more = len(names) - MAX_CHOICES
        names = names[:MAX_CHOICES]
        if isinstance(self._box, widgets.Combobox):
            options = tuple(f"{text[:typing.start()]}@{n}" for n in names) if typing is not None else ()
            if self._box.options != options:
                self._box.options = options
        if not names:
            self._hide(self.choices)
            return
        items = " · ".join(f"<b>@{escape(n)}</b> {escape(variable_kind(variables[n]))}" for n in names)
        if more > 0:
            items += f" · … {more:,} more (type more of the name)"
        self.choices.value = f'<div style="{SMALL};{MUTED}">{items}</div>'
        self.choices.layout.display = "block"

    @staticmethod
    def _hide(widget: widgets.DOMWidget) -> None:
        if widget.layout.display != "none":
            widget.layout.display = "none"

    def _draw_chips(self) -> None:
        chips = []
        for name, kind in self.attached.items():
            chip = widgets.Button(description=f"@{name}", tooltip=f"{kind}: click to see the text sent",
                                  layout=widgets.Layout(width="auto"))
            chip.add_class("nbagent-chip")
            chip.on_click(lambda _b, n=name: self.toggle(n))
            chips.append(chip)
        self.chips.children = tuple(chips)
        self.chips.layout.display = "flex" if chips else "none"
        if self._shown not in self.attached:
            self._shown = None
            self._hide(self.preview)

    def text_of(self, name: str) -> str:
        """The exact text sent for the attached variable `name` (its capped summary, redacted)."""
        from ..notebook import summarize

        variables = self._variables()
        if name not in variables:
            return f"(@{name} is no longer a variable of the notebook: nothing is sent for it)"
        text = summarize(variables[name], self._cap())
        redact = self._redact()
        if redact is not None:
            text = redact(name, text)
            if not isinstance(text, str):
                from ..exceptions import UserError

                raise UserError(f"context_redact must return the text to send (a str), got {type(text).__name__}")
        return text

    def toggle(self, name: str) -> None:
        """Show the text sent for `name` under the chips (a chip's click), or hide it again."""
        if self._shown == name or name not in self.attached:
            self._shown = None
            self._hide(self.preview)
            return
        self._shown = name
        self.preview.value = (f'<div style="{SMALL};{MUTED}">sent for '
                              f'<b>@{escape(name)}</b> ({escape(self.attached[name])}):</div>'
                              f'<pre class="nbagent-attachment" style="max-height:16em;overflow:auto;'
                              f'white-space:pre-wrap;margin:2px 0">{escape(self.text_of(name))}</pre>')
        self.preview.layout.display = "block"

    def message(self, text: str) -> str:
        """`text` with the attached variables' summaries after it (what Send sends)."""
        parts = [text]
        for name, kind in self.attached.items():
            parts.append(f"[attached @{name} ({kind})]\n{self.text_of(name)}")
        return "\n\n".join(parts)

    def clear(self) -> None:
        """Forget the attachments (the message was sent)."""
        self.attached = {}
        self._draw_chips()
        self._offer("", {})
