"""The ``%%agent`` and ``%agent`` magics (registered by `load_ipython_extension`)."""

from __future__ import annotations

import asyncio
import re
import sys
from typing import Any

from ..agent import Agent
from ..exceptions import UserError
from ._context import cap_for, interpolate, unknown_fields

__all__ = ["AgentMagics", "load_ipython_extension", "magics_of"]

_USAGE = "%%agent [--agent NAME] [--thread T] [--model M] [--new]"


_WORD = re.compile(r"""\s*(?:"([^"]*)"|'([^']*)'|(\S+))""")


def _word(text: str) -> tuple[str, str]:
    """The first word of `text` (quotes may group a value: ``--thread "my thread"``) and the
    text after it."""
    match = _WORD.match(text)
    if match is None:
        return "", ""
    return next(g for g in match.groups() if g is not None), text[match.end():]


def _options(line: str) -> dict[str, Any]:
    """The magic line's options: the words starting with ``--`` that come first. The rest of the
    line is the prompt, as typed (apostrophes, quotes and spacing included)."""
    options: dict[str, Any] = {"agent": None, "thread": None, "model": None, "new": False}
    rest = line
    while True:
        word, after = _word(rest)
        if not word.startswith("--"):
            break
        if word == "--new":
            options["new"] = True
        elif word in ("--agent", "--thread", "--model"):
            value, after = _word(after)
            if not value:
                raise UserError(f"{word} needs a value: {_USAGE}")
            options[word[2:]] = value
        else:
            raise UserError(f"unknown option {word}: {_USAGE}")
        rest = after
    options["prompt"] = rest.strip()
    return options


class AgentMagics:
    """The state behind the magics of one IPython shell: the default agents, each agent's current
    thread and each cell's exception (for ``{Err[n]}``).

    Attributes:
        shell: the IPython shell.
        threads: the thread each agent's next cell continues, by ``id(agent)``.
        errors: the exception each cell raised, by execution count.
        last: the view (in a kernel) or `RunResult` (elsewhere) of the last magic.
    """

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.threads: dict[int, str] = {}
        self.errors: dict[int, BaseException] = {}
        self.last: Any = None
        self._defaults: dict[str, Agent] = {}

    def record_error(self, result: Any) -> None:
        """IPython's ``post_run_cell`` hook: keep the cell's exception for ``{Err[n]}``."""
        error = getattr(result, "error_in_exec", None) or getattr(result, "error_before_exec", None)
        count = getattr(result, "execution_count", None)
        if error is not None and count is not None:
            self.errors[count] = error

    def _agent(self, name: str | None, model: str | None) -> Agent:
        namespace = self.shell.user_ns
        if name is not None:
            if model is not None:
                raise UserError(f"--agent {name} --model {model}: an agent keeps its own model; give one of the two "
                                "(--model alone runs a default agent on that model)")
            agent = namespace.get(name)
            if not isinstance(agent, Agent):
                raise UserError(f"--agent {name}: no Agent named {name!r} in the notebook")
            return agent
        key = model or ""
        if key not in self._defaults:
            chosen: Any
            if model is None:
                from ..models import auto

                chosen = auto()
            else:  # a Model in the notebook, or a model name (``--model openai:gpt-4o``)
                chosen = namespace.get(model, model)
            self._defaults[key] = Agent(chosen, name="notebook")
        return self._defaults[key]

    def _last_error(self) -> BaseException | None:
        return self.errors[max(self.errors)] if self.errors else None

    def run(self, line: str, cell: str | None = None) -> Any:
        """Run one magic: the cell body (or the rest of the line) is the prompt."""
        options = _options(line)
        if cell is not None and options["prompt"]:  # never dropped unseen
            raise UserError(f"%%agent {line.strip()}: the first line takes only options, the cell body is the "
                            f"prompt: {_USAGE}")
        text = (cell if cell is not None else options["prompt"]).strip()
        if not text.strip():
            raise UserError(f"the prompt is empty: {_USAGE}")
        agent = self._agent(options["agent"], options["model"])
        _warn_unknown(unknown_fields(text, self.shell.user_ns))
        prompt = interpolate(text, self.shell.user_ns, cap=cap_for(agent.model),
                             errors=self.errors, last_error=self._last_error(), redact=agent.context_redact)
        thread = options["thread"] or (None if options["new"] else self.threads.get(id(agent)))
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a plain shell: run to the end
            result = agent.run_sync(prompt, thread=thread)
            self.threads[id(agent)] = result.thread
            self.last = result
            return result
        view = agent.chat(thread=thread)  # a kernel: a background run behind the view
        self.threads[id(agent)] = view.thread
        view.ask(prompt)
        self.last = view
        return view


def _warn_unknown(fields: list[str]) -> None:
    """One line on stderr naming the ``{name}`` fields that name no variable (a typo is sent as
    written, and the model would not know it was meant to be a variable)."""
    if not fields:
        return
    names = ", ".join(fields)
    verb = "names no variable" if len(fields) == 1 else "name no variables"
    literal = fields[0].replace("{", "{{").replace("}", "}}")
    print(f"nbagent: {names} {verb} of the notebook: sent as written (write {literal} for literal braces)",
          file=sys.stderr)


_SHELLS: dict[int, AgentMagics] = {}


def magics_of(ipython: Any) -> AgentMagics | None:
    """The `AgentMagics` registered in `ipython`, or None."""
    return _SHELLS.get(id(ipython))


def load_ipython_extension(ipython: Any) -> AgentMagics:
    """Register ``%%agent`` and ``%agent`` in `ipython` (``%load_ext nbagent``); a second call
    keeps the first registration. Returns the magics' state."""
    magics = _SHELLS.get(id(ipython))
    if magics is None:
        magics = _SHELLS[id(ipython)] = AgentMagics(ipython)

        def agent(line: str, cell: str | None = None) -> Any:
            return magics.run(line, cell)

        agent._ipython_magic_no_var_expand = True  # type: ignore[attr-defined]  # {x} is ours, not IPython's
        ipython.register_magic_function(agent, "line_cell", "agent")
        ipython.events.register("post_run_cell", magics.record_error)
    return magics
