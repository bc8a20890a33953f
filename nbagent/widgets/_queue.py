"""`MessageQueue`: the messages a person sent while the chat view was busy, and the queue's rules.

Owns the order of the queued messages, the "on hold" state and the queue's line of the status
text. It does not start runs: the `ChatController` asks it for the next message to send
(`take`) and tells it how runs ended (`run_ended`). The rules (also in `ChatView`'s docstring):

- Each queued message is sent as its own run, in the order sent, when the run before it ends.
- While a run goes on or calls wait for a decision, nothing is taken (``take(busy=True)``):
  decisions on waiting calls always go before queued messages.
- A run that was stopped (cancelled) or failed puts the queue on hold: nothing is taken by
  itself until the person presses Send (`submit`), which goes on from the first message.
- A message that could not be sent goes back to the head of the queue, on hold (`not_sent`);
  one refused because calls wait goes back without the hold (it is sent after the decisions).
- ``Clear queue`` drops every queued message (`clear`).

Pure Python: imports only the core's message type (no ipywidgets, no asyncio).
"""

from __future__ import annotations

from ..messages import UserMessage

__all__ = ["MessageQueue", "dropped_note"]

_HOLDS = ("failed", "cancelled")
"""The run outcomes that put the queue on hold."""


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def dropped_note(n: int) -> str:
    """What the status line says after ``Clear queue`` dropped `n` messages ("" for none)."""
    return f"dropped {_plural(n, 'queued message')} (not sent)" if n else ""


class MessageQueue:
    """Messages waiting to be sent, oldest first, each to be its own run.

    ```python
    queue = MessageQueue()
    queue.submit(UserMessage("second"))     # Send pressed while a run goes on
    queue.take(busy=True)                   # None: the run is still going
    queue.take(busy=False)                  # UserMessage("second"): start its run now
    ```
    """

    def __init__(self) -> None:
        self._messages: list[UserMessage] = []
        self._on_hold = False

    @property
    def messages(self) -> tuple[UserMessage, ...]:
        """The queued messages, oldest first."""
        return tuple(self._messages)

    @property
    def texts(self) -> list[str]:
        """The queued messages' texts, oldest first."""
        return [message.content for message in self._messages]

    @property
    def on_hold(self) -> bool:
        """True after a stopped or failed run (or a message that could not be sent): nothing is
        taken until the next `submit`."""
        return self._on_hold

    def __len__(self) -> int:
        return len(self._messages)

    def __bool__(self) -> bool:
        return bool(self._messages)

    def submit(self, message: UserMessage | None = None) -> None:
        """Send was pressed: `message` (if any) joins the end of the queue, and a queue on hold
        goes on again from its first message."""
        if message is not None:
            self._messages.append(message)
        self._on_hold = False

    def take(self, *, busy: bool) -> UserMessage | None:
        """The next message to send now, taken off the queue; None when the queue is empty, on
        hold, or `busy` (a run goes on, or calls wait for a decision)."""
        if not self._messages or self._on_hold or busy:
            return None
        return self._messages.pop(0)

    def ready(self, *, busy: bool) -> bool:
        """Whether `take` would give a message now."""
        return bool(self._messages) and not self._on_hold and not busy

    def not_sent(self, message: UserMessage, *, hold: bool = True) -> None:
        """A message taken could not start its run: it goes back to the head, on hold (or, with
        ``hold=False``, to be sent by itself once nothing stands in the way: e.g. it was refused
        because calls wait for a decision)."""
        self._messages.insert(0, message)
        self._on_hold = self._on_hold or hold

    def run_ended(self, status: str) -> None:
        """A run ended with `status` (a `RunResult.status`): ``failed`` and ``cancelled`` put the
        queue on hold; ``completed``, ``paused`` and ``stopped`` (a limit) let it go on."""
        if status in _HOLDS:
            self._on_hold = True

    def clear(self) -> list[UserMessage]:
        """Drop every queued message (``Clear queue``); returns them, oldest first."""
        dropped, self._messages = self._messages, []
        self._on_hold = False
        return dropped

    def note(self, *, running: bool, undecided: bool) -> str:
        """The queue's line of the status text ("" when empty): how many wait, and for what.

        Args:
            running: a run goes on.
            undecided: calls wait for a person's decision.
        """
        n = len(self._messages)
        if not n:
            return ""
        what = f"{_plural(n, 'message')} queued"
        each = " (one run each)" if n != 1 else ""
        if self._on_hold:
            it = "them" if n != 1 else "it"
            return f"{what}, on hold: Send sends {it}{each}, Clear queue drops {it}"
        if running:
            return f"{what}: sent when this run ends{each}"
        if undecided:
            return f"{what}: sent after you decide the waiting tool calls"
        return what

