"""The chat view's footer: which tokens and costs it adds up, and the line that shows them.

Owns `UsageTally` and `footer_html`. The numbers mean (also in docs/view.md):

- **turn**: the model calls since the person's last message: the run that message started and
  every resume that continued it (an Approve, an answer, a Stop and go on). A new message starts
  a new turn at zero, at once, so a new run never shows the previous run's numbers. While a run
  goes on it is "this turn (running)", afterwards "last turn".
- **thread**: every model call of the thread: the stored ones when the view opened, then every
  call of every run on the thread in this process (the view's own, from code, from other views).
- **budget**: ``token_budget`` / ``cost_budget`` limit each run (a resume is a new run), so the
  budget part shows the run going on, or the last run.
- **cut off**: the last run's answer stopped at the model's output token limit (``max_tokens``;
  `RunResult.truncated`), so it ends mid-sentence: the line says so until the next run starts.

Pure Python: imports the core's usage shapes and the static HTML helpers (no ipywidgets).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..context import ContextUsage
from ..display import theme
from ..display.html import ERROR, MUTED, SMALL, budget_texts, calls_text, cost_text, usage_text
from ..display.sanitize import escape
from ..usage import ModelCallUsage, Usage

__all__ = ["UsageTally", "footer_html", "gauge_html", "truncated_html"]

WARN = theme.css("color", theme.STRONG_WARN)
"""Amber, the gauge's colour past the compaction threshold (JupyterLab's warning colour)."""


class UsageTally:
    """The footer's sums: this turn, the whole thread, and the run (for the per-run budgets).

    ```python
    tally = UsageTally()
    tally.loaded(stored_rows, turn_from_step=3)   # the thread as stored
    tally.run_started(new_turn=True)              # a message was sent: the turn starts at zero
    tally.add(row)                                # each model call, as it is reported
    ```
    """

    def __init__(self) -> None:
        self.turn = Usage()
        self.thread = Usage()
        self.run = Usage()
        self.running = False
        self.context: ContextUsage | None = None
        """How full the window was for the thread's last request (the footer's gauge)."""
        self.truncated = False
        """The last run's answer was cut off at the output token limit (`RunResult.truncated`)."""
        self._seen: set[tuple[str, int, str, float]] = set()

    def loaded(self, rows: Sequence[ModelCallUsage], turn_from_step: int, *, truncated: bool = False,
               subtree: Sequence[tuple[int, Sequence[ModelCallUsage]]] = ()) -> None:
        """The thread as stored: every row counts for the thread; those after step
        `turn_from_step` (the step of the last message sent) make the last turn; `truncated`:
        the last run's answer was cut off (``ThreadMeta.truncated``). `subtree`: the rows of the
        sub-agents the thread's agent calls ran (`Agent.as_tool`), each with the step of its
        call: they count where their call does."""
        self.truncated = truncated
        last = rows[-1].run_id if rows else None
        last_steps = {r.step for r in rows if r.run_id == last}
        below = [(step, r) for step, part in subtree for r in part]
        self.thread = Usage.of([*rows, *(r for _, r in below)])
        self.turn = Usage.of([*(r for r in rows if r.step > turn_from_step),
                              *(r for step, r in below if step > turn_from_step)])
        self._seen = {_key(r) for r in self.thread.calls}
        self.run = Usage.of([*(r for r in rows if r.run_id == last), *(r for step, r in below if step in last_steps)])

    def run_started(self, *, new_turn: bool) -> None:
        """A run starts: a new turn when it sends a message (a resume continues the turn)."""
        if new_turn:
            self.turn = Usage()
        self.run = Usage()
        self.running = True
        self.truncated = False

    def add(self, row: ModelCallUsage, context: ContextUsage | None = None) -> None:
        """One model call of a run on the thread (counted once, however often it is reported);
        `context`: the gauge of its request, when known."""
        if context is not None:
            self.context = context
        key = _key(row)
        if key in self._seen:
            return
        self._seen.add(key)
        for usage in (self.turn, self.thread, self.run):
            usage.add(row)

    def run_ended(self, *, truncated: bool = False) -> None:
        """The run ended; `truncated`: its answer was cut off at the output token limit."""
        self.running = False
        self.truncated = truncated




def _purpose(row: ModelCallUsage) -> str:
    return getattr(row, "purpose", "run")


def _key(row: ModelCallUsage) -> tuple[str, int, str, float]:
    """A model call, however often it is reported (a step may have several guard rows: their
    start times tell them apart)."""
    return row.run_id, row.step, _purpose(row), row.time


def gauge_html(context: ContextUsage | None) -> str:
    """The footer's context gauge: "context 38 % of 128k", the breakdown by part on hover, amber
    past the compaction threshold. Empty when nothing is known."""
    if context is None:
        return ""
    style = WARN if context.over_threshold else ""
    return (f' · <span class="nbagent-gauge" title="{escape(context.describe())}" '
            f'style="cursor:help;{style}">{escape(str(context))}</span>')


def truncated_html(tally: UsageTally) -> str:
    """The footer's mark of an answer cut off at the output token limit ("" when it was not)."""
    if not tally.truncated or tally.running:
        return ""
    why = ("the model stopped at its output token limit, so the answer is cut off; a larger "
           "settings={&quot;max_tokens&quot;: ...} lets it finish")
    return (f' · <span class="nbagent-truncated" title="{why}" style="cursor:help;{ERROR}">'
            "answer cut off at the output token limit</span>")


def footer_html(tally: UsageTally, *, token_budget: int | None = None, cost_budget: float | None = None) -> str:
    """The footer: the turn's calls, tokens (input / cached / output) and cost, and whether the
    answer was cut off at the output token limit; the thread's calls, tokens and cost; the run's
    use of its budgets when budgets are set. Empty before the thread has any model call and while
    nothing runs."""
    turn, thread, run = tally.turn, tally.thread, tally.run
    if not thread.requests and not tally.running:
        return ""
    label = "this turn (running)" if tally.running else "last turn"
    line = usage_text(turn, label)
    whole = f"thread: {calls_text(thread.requests)} · {thread.total_tokens:,} tokens · {cost_text(thread)}"
    budget = budget_texts(run, token_budget, cost_budget)
    if budget:
        whole += " | per run: " + ", ".join(budget)
    return (f'<div class="nbagent-footer" style="{SMALL};{MUTED}">{escape(line)}'
            f'{gauge_html(tally.context)}{truncated_html(tally)}'
            f'<br><span class="nbagent-footer-thread">{escape(whole)}</span></div>')
