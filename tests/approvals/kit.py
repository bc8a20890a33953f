"""What the conformance suite's tests share: tools that write down every time they really ran, a
model that asks for them, and small helpers to see a view the way a person does.

`Ledger` writes to a file, so a run in another process (a second kernel, a killed one) counts
too. The models are the shipped `FunctionModel`; stores are real (memory, SQLite, PostgreSQL).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from nbagent import Agent, tool
from nbagent.messages import Message, ToolResultMessage
from nbagent.models import FunctionModel, tool_call

__all__ = ["Ledger", "click", "results", "settle", "stubborn", "tool_results"]


class Ledger:
    """Tools whose every real run appends a line to `path` (``refund 42 10.0``): `runs` reads it.

    ``refund`` needs approval; ``lookup`` does not; ``transfer`` needs approval above 100 (a
    policy on the arguments).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.touch()

        @tool(requires_approval=True)
        def refund(order_id: str, amount: float) -> str:
            """Refund an order."""
            self._write(f"refund {order_id} {amount:g}")
            return f"refunded {amount:g} on {order_id}"

        @tool
        def lookup(order_id: str) -> str:
            """Look up an order."""
            self._write(f"lookup {order_id}")
            return f"order {order_id}: 2 items"

        @tool(requires_approval=lambda args: args.amount > 100)
        def transfer(to: str, amount: float) -> str:
            """Transfer money."""
            self._write(f"transfer {to} {amount:g}")
            return f"sent {amount:g} to {to}"

        self.refund, self.lookup, self.transfer = refund, lookup, transfer

    @property
    def tools(self) -> list[Any]:
        return [self.refund, self.lookup, self.transfer]

    def _write(self, line: str) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")

    @property
    def runs(self) -> list[str]:
        """Every real run so far, in order."""
        return self.path.read_text(encoding="utf-8").splitlines()

    def agent(self, model: Any, **kwargs: Any) -> Agent:
        return Agent(model, tools=self.tools, **kwargs)


def tool_results(messages: list[Message]) -> list[ToolResultMessage]:
    """The tool results of a conversation, in order."""
    return [m for m in messages if m.kind == "tool-result"]  # type: ignore[misc]


def results(result: Any) -> list[ToolResultMessage]:
    """The tool results of a `RunResult`'s whole thread."""
    return tool_results(result.messages)


def stubborn(*calls: Any, times: int = 3) -> FunctionModel:
    """A model that asks for `calls` after each user message, and again after each answer,
    `times` times in all (a model stuck in a retry loop), then says what the last results were."""

    def answer(messages: list[Message], request: Any) -> Any:
        turn = next(i for i in range(len(messages) - 1, -1, -1) if messages[i].kind == "user")
        asked = sum(m.kind == "assistant" for m in messages[turn:])
        if asked < times:  # fresh calls each time (the run gives each its own id)
            return [tool_call(c.name, dict(c.args)) for c in calls]
        last = [m.content.split("\n")[0] for m in messages[turn:] if m.kind == "tool-result"][-len(calls):]
        return "gave up: " + " | ".join(last)

    return FunctionModel(answer)


def once(*calls: Any) -> FunctionModel:
    """A model that asks for `calls` once per user message, then says what their results were."""
    return stubborn(*calls, times=1)


async def settle(turns: int = 10) -> None:
    """Let the work the buttons scheduled on the loop run."""
    for _ in range(turns):
        await asyncio.sleep(0)


async def click(button: widgets.Button) -> None:
    """Click as a person does: refused while the button is disabled on screen."""
    assert not button.disabled, f"{button.description!r} is disabled: {button.tooltip}"
    button.click()
    await settle()


async def deny_in_view(view: Any, reason: str) -> Any:
    """Deny the one call waiting in `view` with `reason`, as a person does (Deny, the reason,
    Confirm deny); the result of the run that carried it out."""
    [row] = [r for r in view.rows.values() if r.status == "needs approval"]
    await click(row.buttons["Deny"])
    row.deny_reason.value = reason
    await click(row.buttons["Confirm deny"])
    return await view.wait()


__all__ += ["deny_in_view", "once", "tool_call"]
