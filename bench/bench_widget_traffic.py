"""Widget traffic of a long streamed answer through `ChatView`, without a front end.

Streams a 4,000-delta answer (FunctionModel, ``--rate`` deltas per second) through a ChatView and
records every comm message the widgets would send (``Widget._send`` is hooked: message JSON +
buffers), then does the same answer the naive way: an ``ipywidgets.HTML`` updated per delta with the
whole text so far. Prints bytes, messages and messages per second for both.

Bytes are the comm payload (``{"method": ..., "state"|"content": ...}``); on the websocket each
message also carries a Jupyter envelope (header, parent header, metadata: ~600-700 bytes), added
below as an estimate. tests/browser/test_chat_view.py measures the real websocket in Chromium.

    .venv/bin/python bench/bench_widget_traffic.py [--deltas 4000] [--rate 500]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import ipywidgets as widgets

from nbagent import Agent
from nbagent.display.sanitize import escape
from nbagent.models import FunctionModel
from nbagent.store.memory import MemoryStore
from nbagent.widgets import ChatView

ENVELOPE_BYTES = 650
"""Approximate size of a comm message's Jupyter envelope on the websocket (header, parent header,
metadata, channel), measured from JupyterLab traffic."""
TARGET_BYTES = 500_000


class Recorder:
    """Hooks `Widget._send` and counts messages, bytes and their times."""

    def __init__(self) -> None:
        self.messages = 0
        self.bytes = 0
        self.times: list[float] = []
        self.text_times: list[float] = []
        """Times of the streaming text updates (custom messages) alone."""
        self._original = widgets.Widget._send

    def __enter__(self) -> Recorder:
        original = self._original

        def record(widget: widgets.Widget, msg: dict[str, Any], buffers: Any = None) -> None:
            self.messages += 1
            self.bytes += len(json.dumps(msg, default=str)) + sum(len(b) for b in buffers or ())
            self.times.append(time.monotonic())
            if msg.get("method") == "custom":
                self.text_times.append(self.times[-1])
            original(widget, msg, buffers)

        widgets.Widget._send = record  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        widgets.Widget._send = self._original  # type: ignore[method-assign]

    def max_per_second(self, times: list[float] | None = None) -> int:
        """Most messages in any one-second window."""
        times = self.times if times is None else times
        best, j = 0, 0
        for i, t in enumerate(times):
            while times[j] < t - 1.0:
                j += 1
            best = max(best, i - j + 1)
        return best


def deltas(n: int) -> list[str]:
    # word-sized pieces with some Markdown, ~4.7 characters per delta like English text
    words = ["The", " agent", " looked", " at", " **order**", " 42", " and", " `refund`", " said", " ok.\n\n"]
    return [words[i % len(words)] for i in range(n)]


async def stream_through_view(n: int, rate: float) -> tuple[Recorder, float, str]:
    pieces = deltas(n)

    async def stream(messages: Any, request: Any) -> Any:
        start = time.monotonic()
        for i, piece in enumerate(pieces):
            if rate > 0:
                delay = start + i / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            yield piece

    agent = Agent(FunctionModel(stream_function=stream), store=MemoryStore())
    view = ChatView(agent, thread="bench")
    await view.wait_loaded()
    with Recorder() as rec:
        t0 = time.monotonic()
        view.ask("write a long answer")
        await view.wait()
        elapsed = time.monotonic() - t0
    assert view.result is not None and view.result.output == "".join(pieces)
    return rec, elapsed, "".join(pieces)


def naive_per_delta_html(n: int) -> Recorder:
    html = widgets.HTML()
    text = ""
    with Recorder() as rec:
        for piece in deltas(n):
            text += piece
            html.value = f'<div style="white-space:pre-wrap">{escape(text)}</div>'
    return rec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deltas", type=int, default=4000)
    parser.add_argument("--rate", type=float, default=500.0,
                        help="deltas per second (0: as fast as possible)")
    args = parser.parse_args()

    rec, elapsed, text = asyncio.run(stream_through_view(args.deltas, args.rate))
    naive = naive_per_delta_html(args.deltas)
    wire = rec.bytes + rec.messages * ENVELOPE_BYTES
    naive_wire = naive.bytes + naive.messages * ENVELOPE_BYTES
    print(f"answer: {args.deltas:,} deltas, {len(text):,} characters, streamed in {elapsed:.2f} s "
          f"(target rate {args.rate:g}/s)")
    print(f"ChatView : {rec.messages:5d} messages, {rec.bytes:>12,} payload bytes, ~{wire:>12,} on the wire; "
          f"{rec.messages / elapsed:.1f} messages/s, max {rec.max_per_second()} in any second "
          f"(text updates: {len(rec.text_times)}, max {rec.max_per_second(rec.text_times)} per second)")
    print(f"naive    : {naive.messages:5d} messages, {naive.bytes:>12,} payload bytes, "
          f"~{naive_wire:>12,} on the wire "
          "(ipywidgets.HTML updated per delta with the whole text)")
    print(f"ratio    : {naive_wire / wire:.0f}x less traffic; target <= {TARGET_BYTES:,} bytes: "
          f"{'OK' if wire <= TARGET_BYTES else 'OVER'}")


if __name__ == "__main__":
    main()
