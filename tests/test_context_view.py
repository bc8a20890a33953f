"""The context bookkeeping's running sums (`ThreadView`, the fake models' estimate) give exactly
what walking the whole thread gives: over long random sessions, message by message, and in whole
agent runs with each kind of compaction, the gauge, the usage rows, the records and the fakes'
token counts are the same with the cache (the default) and on the plain path
(``NBAGENT_CONTEXT_CACHE=0``)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import sys
from typing import Any

import pytest

from nbagent import Agent, Compaction, Image, ToolCall, tool
from nbagent.context import ThreadView, _view, message_tokens, request_parts, text_tokens, visible
from nbagent.messages import (
    AssistantMessage,
    CompactionMessage,
    Message,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
)
from nbagent.models import FunctionModel, TestModel
from nbagent.models.function import _request_tokens

PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")


def words(rng: random.Random, most: int = 40) -> str:
    return " ".join(rng.choice(["rows", "Paris", "17.5", "2026", "sales", "ok", "x" * 30, "ünïcode", "42"])
                    for _ in range(rng.randint(0, most)))


def grow(rng: random.Random, thread: list[Message], calls: list[str]) -> None:
    """Append one random message (or record) to `thread`, as a run would."""
    roll = rng.random()
    if roll < 0.15:
        thread.append(UserMessage(words(rng), [Image(data=PNG)] if rng.random() < 0.1 else [],
                                  blocked="guard 'g' blocked it" if rng.random() < 0.1 else None))
    elif roll < 0.17:  # a refused answer's stand-in (never sent)
        thread.append(AssistantMessage(blocked="guard 'g' blocked it"))
    elif roll < 0.45:
        n = rng.randint(0, 2)
        made = [ToolCall.of("get_rows", {"n": rng.randint(1, 99)}) for _ in range(n)]
        calls += [c.id for c in made]
        blocks = [{"type": "thinking", "thinking": words(rng)}] if rng.random() < 0.1 else []
        thread.append(AssistantMessage(words(rng) or None, made, thinking_blocks=blocks))
    elif roll < 0.8:
        call = calls[-1] if calls and rng.random() < 0.8 else f"call_{rng.randint(0, 10**6)}"
        text = words(rng, 200)
        thread.append(ToolResultMessage(
            call, "get_rows", text[: len(text) // 2] if rng.random() < 0.2 else text,
            full_content=text if rng.random() < 0.2 else None,
            edited_args={"n": 3} if rng.random() < 0.05 else None))
    elif roll < 0.83:
        thread.append(SystemMessage(words(rng)))
    elif roll < 0.93:
        upto = rng.randint(0, len(thread))
        thread.append(CompactionMessage(words(rng), "summary", upto))
    elif roll < 0.97:
        results = [m.call_id for m in thread if isinstance(m, ToolResultMessage)]
        cleared = rng.sample(results, k=min(len(results), rng.randint(0, 3)))
        thread.append(CompactionMessage("", "clear_results", 0, cleared, len(cleared)))
    else:
        items = [{"type": "compaction", "encrypted_content": words(rng)}]
        thread.append(CompactionMessage("", "native", rng.randint(0, len(thread)), items=items))


def fresh(thread: list[Message], system: str | None, tools: list[dict[str, Any]]) -> tuple[Any, dict[str, int]]:
    view = visible(thread)
    return view, request_parts(system, view.summary, view.messages, tools, text_tokens)


def sized(message: Message) -> int:
    return message_tokens(message, text_tokens)


@pytest.mark.parametrize("seed", range(12))
def test_a_thread_view_gives_what_walking_the_whole_thread_gives(seed: int) -> None:
    """Over a random session of ~600 appends (users, answers with calls and thinking, results cut
    or edited, system messages, summary, clearing and native records, prompts and answers a guard
    blocked), after every append or batch of appends: the same messages sent, summary, cut,
    records, parts, and the saving a record would make."""
    rng = random.Random(seed)
    thread: list[Message] = [UserMessage("first")]
    calls: list[str] = []
    view = ThreadView(sized)
    tools = [{"name": "get_rows", "description": "rows", "parameters": {"type": "object"}}]
    system = "Be brief." if seed % 2 else None
    system_size = text_tokens(system) + 4 if system else 0
    for _ in range(600):
        for _ in range(rng.choice((1, 1, 1, 2, 5))):
            grow(rng, thread, calls)
        ours = view.follow(thread)
        theirs, parts = fresh(thread, system, tools)
        assert ours.upto == theirs.upto and ours.summary == theirs.summary
        assert ours.messages == theirs.messages
        assert view.records == sum(m.kind == "compaction" for m in thread)
        assert bool(view.cut) == any(m.kind == "tool-result" and m.full_content is not None for m in theirs.messages)
        summary = text_tokens(theirs.summary) + 4 if theirs.summary else 0
        assert view.parts(system_size, summary, parts["tools"]) == parts
        if rng.random() < 0.05:  # a compaction's estimated saving, as `Window._after` makes it
            record = CompactionMessage("s", "summary", rng.randint(0, len(thread) - 1))
            after = view.with_record(thread, record)
            _, grown = fresh([*thread, record], system, tools)
            after_summary = text_tokens(after.summary) + 4 if after.summary else 0
            assert (summary + view.total()) - (after_summary + after.total()) == sum(parts.values()) - sum(
                grown.values())
            assert view.follow(thread).messages == theirs.messages  # the copy left this view as it was


def test_a_thread_view_starts_afresh_on_another_thread_or_a_changed_one() -> None:
    """Another list, a shorter one, or another message where the last one seen was: taken afresh."""
    view = ThreadView(sized)
    thread: list[Message] = [UserMessage("a b c"), AssistantMessage("d e")]
    assert view.follow(thread).messages == thread
    other = [UserMessage("x")]
    assert view.follow(other).messages == other and view.parts(0, 0, 0)["latest"] == sized(other[0])
    other.pop()
    other.append(UserMessage("y " * 50))
    assert view.parts(0, 0, 0) != {} and view.follow(other).messages == other
    assert view.parts(0, 0, 0)["latest"] == sized(other[0])
    shorter = list(thread)
    view.follow(shorter)
    shorter[1] = AssistantMessage("a changed answer, much longer than the first one")
    assert view.follow(shorter).messages == shorter
    assert view.parts(0, 0, 0) == request_parts(None, None, shorter, [], text_tokens)


def test_the_fakes_count_only_what_was_added_and_give_the_plain_count() -> None:
    """`FunctionModel`'s input tokens: with the cache, the same as counted afresh, over random
    requests that grow, shrink, change in the middle, start with a fresh system message or come
    from another conversation."""
    rng = random.Random(7)
    counted: dict[int, Any] = {}
    threads: list[list[Message]] = [[UserMessage(f"thread {i}")] for i in range(3)]
    calls: list[str] = []
    for _ in range(1500):
        thread = rng.choice(threads)
        grow(rng, thread, calls)
        request = [m for m in thread if m.kind != "compaction"]
        if rng.random() < 0.3:
            request = [SystemMessage("Be brief."), *request]
        if rng.random() < 0.05 and len(request) > 3:
            i = rng.randrange(1, len(request))
            request[i] = dataclasses.replace(request[i])  # an equal copy: the same count
        if rng.random() < 0.05 and len(request) > 3:
            request = request[: len(request) // 2]
        assert _request_tokens(request, counted) == _request_tokens(list(request))
    assert len(counted) <= 64


def test_the_fakes_count_a_request_list_a_test_changed_afterwards_afresh() -> None:
    counted: dict[int, Any] = {}
    first = [UserMessage("one two"), AssistantMessage("three")]
    assert _request_tokens(first, counted) == 3 + 4
    first.append(UserMessage("four five six"))  # a test changed a request it kept
    second = [*first[:2], UserMessage("seven")]
    assert _request_tokens(second, counted) == _request_tokens(list(second)) == 4 + 6


# ------------------------------------------------------------------------- whole runs, both paths
@tool
def get_rows(n: int) -> str:
    """The first n rows of the sales table."""
    return "\n".join(f"row {i}: 2026-11-{i % 28 + 1:02d} Paris {17.5 * i:.2f} EUR paid" for i in range(n))


@tool(max_result_tokens=60)
def get_log(n: int) -> str:
    """A long log (its result is cut for the model)."""
    return "\n".join(f"line {i}: nothing happened" for i in range(n))


CALLS = itertools.count()


def answer(messages: list[Message], request: Any) -> Any:
    """Calls the tools, pages through a cut result once, answers; writes summaries when asked.
    Call ids are numbered, so both paths' threads are alike."""
    if not request.tools:
        return "SUMMARY " + " ".join(m.kind for m in messages)[:200]
    last, at = messages[-1], f"c{next(CALLS)}"
    if last.kind == "user":
        turn = int(last.content.split()[1].rstrip(":"))
        return [ToolCall.of("get_rows", {"n": 5 + turn % 7}, id=at + "a"),
                ToolCall.of("get_log", {"n": 40}, id=at + "b")]
    names = {t["name"] for t in request.tools}
    if last.kind == "tool-result" and "read_result" in names and not any(
            m.kind == "tool-result" and m.name == "read_result" for m in messages[-6:]):
        return ToolCall.of("read_result", {"call_id": last.call_id, "offset": 10, "limit": 50}, id=at + "r")
    return f"done with {len(messages)} messages"


def timeless(message: Message) -> dict[str, Any]:
    return {k: v for k, v in message.to_dict().items() if k != "duration_s"}


def session(compaction: Compaction | None, turns: int, cached: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`turns` turns on one thread: each turn's gauge, the thread, every request, the usage rows."""
    monkeypatch.setattr(_view, "CACHED", cached)
    monkeypatch.setattr(sys.modules[__name__], "CALLS", itertools.count())
    model = FunctionModel(answer, context_window=3_000)
    agent = Agent(model, tools=[get_rows, get_log], system="Be brief.", store="memory", compaction=compaction,
                  max_result_fraction=0.05)
    thread, gauges, rows = None, [], []
    for turn in range(turns):
        result = agent.run_sync(f"turn {turn}: rows please", thread=thread)
        assert result.status == "completed", result.error
        thread = result.thread
        gauges.append((result.context.tokens, dict(result.context.by_part), result.context.estimated))
        rows += [(u.purpose, u.step, u.input_tokens, u.output_tokens, u.tool_calls, u.context)
                 for u in result.usage.calls]
    history = [timeless(m) for m in result.messages]
    sent = [([timeless(m) for m in r.messages], [t["name"] for t in r.tools]) for r in model.requests]
    return gauges, history, sent, rows


@pytest.mark.parametrize(
    "compaction", [None, Compaction(at=0.5, keep_last=4), Compaction.clear_results(at=0.4, keep_last=3)],
    ids=["none", "summary", "clear_results"])
def test_a_long_session_is_the_same_with_the_running_sums_and_on_the_plain_path(
        compaction: Compaction | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """40 turns (a cut result read again, compactions at the threshold): the gauges, the thread
    with its records, every request sent and the usage rows' context are the same both ways."""
    cached = session(compaction, 40, True, monkeypatch)
    plain = session(compaction, 40, False, monkeypatch)
    assert cached == plain
    _, history, sent, rows = cached
    if compaction is not None:
        assert sum(m["kind"] == "compaction" for m in history) >= 2
    assert any("read_result" in names for _, names in sent)
    assert all(json.loads(row[-1])["estimate"] > 0 for row in rows if row[0] == "run")
    # the rows' JSON, written out by hand for every model call, is what json.dumps writes
    assert all(row[-1] == json.dumps(json.loads(row[-1]), separators=(",", ":")) for row in rows)


def test_test_model_counts_are_the_same_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    counts = []
    for cached in (True, False):
        monkeypatch.setattr(_view, "CACHED", cached)
        agent = Agent(TestModel(), tools=[get_rows], store="memory")
        thread, seen = None, []
        for turn in range(15):
            result = agent.run_sync(f"turn {turn}", thread=thread)
            thread = result.thread
            seen += [(u.input_tokens, u.output_tokens) for u in result.usage.calls]
        counts.append(seen)
    assert counts[0] == counts[1] and counts[0][-1][0] > counts[0][0][0]


@pytest.mark.parametrize("cached", [True, False], ids=["running sums", "plain path"])
def test_a_step_sizes_only_what_was_added_as_the_thread_grows(cached: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 300-step tool loop: the gauge sizes each message once and the fake counts each message's
    words once (not every message again on every request), so a late step does what an early one
    does; the plain path (the switch off) walks the whole thread, as it did before."""
    from nbagent._run import window
    from nbagent.models import function

    monkeypatch.setattr(_view, "CACHED", cached)
    looked: list[int] = []
    sized, words = window.Window.sized, function.estimate_tokens
    monkeypatch.setattr(window.Window, "sized", lambda self, m: looked.append(1) or sized(self, m))
    monkeypatch.setattr(function, "estimate_tokens", lambda text: looked.append(2) or words(text))
    steps = 300

    def answer(messages: list[Message], request: Any) -> Any:
        return ToolCall.of("get_rows", {"n": 1}) if len(messages) < 2 * steps else "done"

    model = FunctionModel(answer, context_window=1_000_000)
    result = Agent(model, tools=[get_rows], store="memory", max_steps=steps + 5).run_sync("rows")
    assert result.status == "completed" and len(result.messages) == 2 * steps + 2
    gauge, fake = looked.count(1), looked.count(2)
    if cached:
        assert gauge == len(result.messages) - 1  # the final answer is in no request
        assert fake <= 3 * len(result.messages)
    else:
        assert gauge > steps * steps and fake > steps * steps


def test_scaled_parts_that_tie_get_the_rounding_in_parts_order() -> None:
    """Three parts' remainders are all 1/3: the one token left goes to the first of them (the
    tools). In floats, 4 * 2 / 6 - 1 came out a hair under 1/3 and the history took it."""
    from nbagent.context import scale_parts

    parts = {"system": 0, "tools": 4, "history": 1, "tool_results": 1, "latest": 0}
    assert scale_parts(parts, 2) == {"system": 0, "tools": 2, "history": 0, "tool_results": 0, "latest": 0}


def test_the_written_out_scaling_and_json_give_what_the_plain_ones_give() -> None:
    """`scale_parts` and `parts_json` (written out for the five parts) against the plain rule and
    `json.dumps`, over random parts (missing, extra), totals, windows, estimates and keys."""
    import math
    from fractions import Fraction

    from nbagent.context import PARTS, parts_json, scale_parts

    def plain_scale(parts: dict[str, int], total: int) -> dict[str, int]:
        estimate = sum(parts.values())
        if estimate <= 0:
            return {name: (total if name == "latest" else 0) for name in PARTS}
        exact = {name: Fraction(parts.get(name, 0) * total, estimate) for name in PARTS}  # the rule, exactly
        out = {name: int(value) for name, value in exact.items()}
        for name in sorted(PARTS, key=lambda n: exact[n] - out[n], reverse=True)[:total - sum(out.values())]:
            out[name] += 1
        return out

    def plain_json(parts: dict[str, int], window: Any, estimate: Any = None, key: Any = None) -> str:
        value: dict[str, Any] = {**{name: int(parts.get(name, 0)) for name in PARTS}, "window": window}
        if estimate is not None:
            value["estimate"] = int(estimate)
        if key is not None:
            value["key"] = [int(k) for k in key]
        return json.dumps(value, separators=(",", ":"))

    rng = random.Random(46)
    for _ in range(50_000):
        parts = {n: rng.choice([0, 1, 3, rng.randint(0, 10 ** rng.randint(1, 7))]) for n in PARTS}
        if rng.random() < 0.1:
            parts.pop(rng.choice(PARTS))
        if rng.random() < 0.1:
            parts["other"] = rng.randint(0, 99)
        total = rng.choice([0, 1, 7, rng.randint(0, 10 ** rng.randint(1, 7))])
        scaled = scale_parts(parts, total)
        assert scaled == plain_scale(parts, total) and list(scaled) == list(PARTS)
        window, estimate = rng.choice([None, 4000, 10**6]), rng.choice([None, rng.randint(0, 10**6)])
        key = rng.choice([None, (rng.randint(-1, 99), rng.randint(0, 9)), [], [1, 2, 3]])
        assert parts_json(scaled, window, estimate, key) == plain_json(scaled, window, estimate, key)
        assert parts_json(parts, window) == plain_json(parts, window)
    texts = ("", "abc", "2026-11-07: 17.50 EUR", "ünï 42 €\U0001f600", "\ud800 9", "\u0660\u0661 \uff10",
             "x" * 999 + "1")
    for text in texts:
        digits = sum(map(text.count, "0123456789"))
        assert text_tokens(text) == math.ceil((len(text) - digits) / 4) + digits


# ---------------------------------------------------------- a thread replaced between two runs
def lifecycle(kind: str, cached: bool, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Turns with compaction on a thread, a fork at an earlier prompt whose text is edited (much
    longer), the fork resumed, the first thread continued by the same model, then the store opened
    again (a new `SQLiteStore` on the file, as after a kernel restart: new message objects) and
    both threads continued by the same model and by a new one. Each run's gauge and usage rows."""
    import asyncio

    from nbagent.store import MemoryStore, SQLiteStore

    monkeypatch.setattr(_view, "CACHED", cached)
    monkeypatch.setattr(sys.modules[__name__], "CALLS", itertools.count())
    path = tmp_path / f"{cached}.db"
    store: Any = MemoryStore() if kind == "memory" else SQLiteStore(path)
    model = FunctionModel(answer, context_window=3_000)

    def agent(store: Any, model: FunctionModel) -> Agent:
        return Agent(model, tools=[get_rows, get_log], system="Be brief.", store=store, max_result_fraction=0.05,
                     compaction=Compaction(at=0.5, keep_last=4))

    seen: list[Any] = []

    def keep(result: Any) -> Any:
        assert result.status == "completed", result.error
        seen.append((result.context.tokens, dict(result.context.by_part),
                     [(u.input_tokens, u.context) for u in result.usage.calls]))
        return result

    first = agent(store, model)
    thread = None
    for turn in range(8):
        thread = keep(first.run_sync(f"turn {turn}: rows please", thread=thread)).thread
    state = asyncio.run(store.load(thread))
    at = next(i for i, m in enumerate(state.messages) if m.kind == "user" and m.content.startswith("turn 3:"))
    fork = first.fork_sync(thread, at_step=state.message_steps[at],
                           edit="turn 30: rows please, " + "and every other table we keep " * 40)
    forked = asyncio.run(store.load(fork))
    assert forked.messages[-1].kind == "user" and forked.messages[-1].content.startswith("turn 30:")
    keep(first.resume_sync(thread=fork))
    keep(first.run_sync("turn 8: rows please", thread=thread))
    keep(first.run_sync("turn 31: rows please", thread=fork))
    reopened = SQLiteStore(path) if kind == "sqlite" else store
    for again in (agent(reopened, model), agent(reopened, FunctionModel(answer, context_window=3_000))):
        keep(again.run_sync("turn 9: rows please", thread=thread))
        keep(again.run_sync("turn 32: rows please", thread=fork))
    assert sum(m.kind == "compaction" for m in asyncio.run(reopened.load(thread)).messages) >= 1
    return seen


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_nothing_sized_before_a_fork_an_edit_or_a_reload_is_taken_for_the_new_thread(
        kind: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sizes held from earlier runs (the fakes' counts per conversation, the tools' sizes) are
    never taken for a thread whose messages were replaced: a fork with an edited prompt, the first
    thread continued after it, the store opened again with new message objects. The gauges and
    the usage rows are what the plain path gives."""
    assert lifecycle(kind, True, tmp_path, monkeypatch) == lifecycle(kind, False, tmp_path, monkeypatch)
