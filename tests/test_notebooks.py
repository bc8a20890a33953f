"""The example notebooks run top to bottom, headless, offline (the local model), as a user would,
and show what their prose says they show.

Each notebook is built from its source in scripts/make_notebooks.py (the committed .ipynb must be
that source, executed), run in a fresh kernel with nbclient, and then checked twice: in its printed
outputs (what a reader sees: the tool called, the answer made from the tool's result, the items of
the order...) and in the store it wrote (the calls really made, with their arguments and results).
The store is seeded with a thread of "another notebook" first: frames and ``agent.threads()`` must
not show it.

Marked ``notebooks`` (skip with NBAGENT_SKIP_NOTEBOOKS=1); they use the bundled local model, so
they also need it (NBAGENT_SKIP_LOCAL_LLM=1 skips them too).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import pytest

from nbagent.notebook._clean import WIDGET_VIEW

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
FOREIGN = "another-notebooks-thread"
"""A thread another notebook left in the shared store."""
LEAKS = ("<tool_response>", "</tool_response>", "<tool_call>", "2 plus 2", "calculator")
"""Text of the local model's prompt format or of its old few-shot example, never in an answer."""

pytestmark = [
    pytest.mark.notebooks,
    pytest.mark.local_llm,
    pytest.mark.skipif(os.environ.get("NBAGENT_SKIP_NOTEBOOKS") == "1", reason="NBAGENT_SKIP_NOTEBOOKS=1"),
    pytest.mark.skipif(os.environ.get("NBAGENT_SKIP_LOCAL_LLM") == "1", reason="NBAGENT_SKIP_LOCAL_LLM=1"),
]


def _maker() -> Any:
    spec = importlib.util.spec_from_file_location("make_notebooks", ROOT / "scripts" / "make_notebooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKER = _maker()


# ----------------------------------------------------------------------------------- what ran
@dataclass
class Call:
    """One tool call as stored: name, arguments, result text, status."""

    name: str
    args: dict[str, Any]
    result: str | None
    status: str | None


@dataclass
class Ran:
    """An executed notebook: its cells' printed text, and its store's threads."""

    nb: nbformat.NotebookNode
    store: Path
    threads: dict[str, Any] = field(default_factory=dict)

    def out(self, index: int) -> str:
        """The text a reader sees under code cell `index` (in the notebook's cell order)."""
        cell = self.nb.cells[index]
        assert cell.cell_type == "code", f"cell {index} is {cell.cell_type}"
        parts: list[str] = []
        stream = False  # consecutive stream pieces show as one text, as in the notebook
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream":
                if stream:
                    parts[-1] += str(o.get("text", ""))
                else:
                    parts.append(str(o.get("text", "")))
                stream = True
            else:
                parts.append(str(o.get("data", {}).get("text/plain", "")))
                stream = False
        return "\n".join(p for p in parts if p)

    def html(self, index: int) -> str:
        """The HTML a reader sees under code cell `index` (a frame's view, a forecast's table)."""
        return "\n".join(str(o.get("data", {}).get("text/html", "")) for o in self.nb.cells[index].get("outputs", []))

    def index(self, needle: str) -> int:
        """The index of the only code cell whose source contains `needle`."""
        found = [i for i, c in enumerate(self.nb.cells) if c.cell_type == "code" and needle in c.source]
        assert len(found) == 1, f"{needle!r} in cells {found}"
        return found[0]

    def after(self, needle: str) -> str:
        return self.out(self.index(needle))

    def calls(self, thread: str) -> list[Call]:
        state = self.threads[thread]
        results = {m.call_id: m for m in state.messages if m.kind == "tool-result"}
        out = []
        for m in state.messages:
            if m.kind == "assistant":
                for c in m.tool_calls:
                    r = results.get(c.id)
                    out.append(Call(c.name, c.args, r.content if r else None, r.status if r else None))
        return out

    def answers(self, thread: str) -> list[str]:
        return [m.text for m in self.threads[thread].messages if m.kind == "assistant" and m.text]

    def all_text(self) -> str:
        return "\n".join(self.out(i) for i, c in enumerate(self.nb.cells) if c.cell_type == "code")


def _seed_foreign_thread(path: Path) -> None:
    from nbagent import Agent
    from nbagent.models import TestModel

    other = Agent(TestModel(text="from another notebook"), store=str(path))
    other.run_sync("hello", thread=FOREIGN)
    asyncio.run(other.store.close())


def _load_threads(path: Path) -> dict[str, Any]:
    from nbagent.store import SQLiteStore

    async def read() -> dict[str, Any]:
        store = SQLiteStore(path)
        try:
            return {info.thread: await store.load(info.thread) for info in await store.threads()}
        finally:
            await store.close()

    return asyncio.run(read())


def _run(name: str, tmp_path: Path, env: dict[str, str] | None = None) -> Ran:
    work = tmp_path / "nb"
    work.mkdir()
    store = work / "threads.db"
    _seed_foreign_thread(store)
    nb = MAKER.build(name)
    MAKER.execute(nb, work, env={"MPLBACKEND": "Agg", **(env or {})}, timeout=300)
    ran = Ran(nb, store, _load_threads(store))
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors
    text = ran.all_text()
    assert "Traceback" not in text
    assert "sk-" not in text  # no key ever printed
    leaked = [leak for leak in LEAKS if leak in text]
    assert not leaked, f"prompt-format text in the outputs: {leaked}\n{text}"
    assert FOREIGN not in text, "another notebook's thread shows in this one"
    return ran


def _has(text: str | None, *needles: str) -> bool:
    return text is not None and all(n.lower() in text.lower() for n in needles)


# ----------------------------------------------------------------------------------- the stories
def check_quickstart(ran: Ran) -> None:
    # Streaming: get_weather(city=Paris) is called, its result printed, the answer is made from it.
    streamed = ran.after("agent.stream(")
    assert "[get_weather({'city': 'Paris'})]" in streamed, streamed
    assert "[-> Sunny, 22 °C in Paris]" in streamed, streamed
    answer = streamed.split("[-> Sunny, 22 °C in Paris]", 1)[1].split("done:", 1)[0]
    assert _has(answer, "22 °C", "Paris"), answer
    # The view's thread: get_time for Tokyo, then the follow-up calls get_weather for Rome.
    [thread] = [t for t in ran.threads if t != FOREIGN and any(c.name == "get_time" for c in ran.calls(t))]
    calls = ran.calls(thread)
    assert [(c.name, c.args) for c in calls] == [("get_time", {"city": "Tokyo"}), ("get_weather", {"city": "Rome"})]
    assert all(c.status == "done" for c in calls)
    tokyo, rome = ran.answers(thread)
    assert _has(tokyo, "14:05") and _has(rome, "22 °C", "Rome"), (tokyo, rome)
    assert "completed" in ran.after("result = await handle") and "get_time" in ran.after("result = await handle")
    assert _has(ran.after("followup = await"), "22 °C", "Rome")
    usage = ran.after("usage_frame(followup")
    assert usage.count("local-model") == 2, usage  # the call, then the answer
    # the summary: what the comment promises (tokens, cost, latency, time), no ids
    assert all(name in usage for name in ("input_tokens", "cost_total", "latency_s", "time")), usage
    assert "run_id" not in usage and "provider" not in usage, usage


def check_approve_tools(ran: Ran) -> None:
    # The view's request pauses on book_table(Paris), and Run All leaves it waiting for a click:
    # nothing decides it in code (the code path below has a conversation of its own).
    assert "paused [('book_table', {'city': 'Paris'})]" in ran.after('view.ask("Use the book_table'), ran.nb
    assert [(c.name, c.args, c.status) for c in ran.calls("dinner-plans")] == [
        ("book_table", {"city": "Paris"}, None)]
    # In code: approved, the table is booked; a second request denied never runs.
    approved = ran.after('approve=booking)')
    assert "paused [('book_table', {'city': 'Paris'})]" in approved
    assert _has(approved, "completed", "Table booked in Paris"), approved
    denied = ran.after("fully booked")
    assert "paused [('book_table', {'city': 'Rome'})]" in denied, denied
    assert "completed |" in denied, denied
    calls = ran.calls("dinner-in-code")
    assert [(c.name, c.args, c.status) for c in calls] == [
        ("book_table", {"city": "Paris"}, "done"), ("book_table", {"city": "Rome"}, "denied")]
    assert "fully booked" in (calls[1].result or "")
    assert _has(ran.answers("dinner-in-code")[-1], "fully booked"), ran.answers("dinner-in-code")
    # The client tool: the run pauses on ask_user, the person's answer reaches the model.
    asked = ran.after('"Use the ask_user tool')
    assert "paused [('ask_user', 'client'" in asked, asked
    [call] = ran.calls("names")
    assert call.name == "ask_user" and call.result == "Ada"
    answered = asked.strip().splitlines()[-1]
    assert answered.startswith("completed |") and "Ada" in answered, asked
    # After a restart: a new agent finds the waiting call and carries it out, once.
    assert "paused ['book_table']" in ran.after('thread="after-restart")\nprint')
    resumed = ran.after("fresh = Agent(")
    assert "[('book_table', {'city': 'Rome'})]" in resumed and _has(resumed, "completed", "Table booked in Rome")
    assert [(c.name, c.status) for c in ran.calls("after-restart")] == [("book_table", "done")]


def check_token_costs(ran: Ran) -> None:
    mine = {"weather-Paris", "weather-Rome", "weather-Oslo"}
    for city in ["Paris", "Rome", "Oslo"]:
        assert ran.calls(f"weather-{city}")[0] == Call("get_weather", {"city": city}, f"Sunny, 22 °C in {city}", "done")
    usage = ran.after("usage = nbagent.usage_frame(agent)\nusage[")
    assert {t for t in mine if t in usage} == mine, usage
    assert usage.count("weather-") == 6, usage  # 3 runs x 2 model calls: the call, the answer
    runs = ran.after('thread="weather-Paris")\nnbagent.runs_frame')
    assert runs.count("weather-") == 4 and runs.count("weather-Paris") == 2, runs
    assert runs.count("completed") == 4 and "NaN" not in runs, runs  # every run has its status
    assert [c.args for c in ran.calls("weather-Paris")] == [{"city": "Paris"}, {"city": "Berlin"}]
    tools = ran.after("nbagent.tool_calls_frame(agent)")
    assert tools.count("get_weather") == 4 and tools.count(" done ") == 4, tools
    batch = ran.after("agent.map(questions")
    assert batch.count("completed") == 3, batch
    for city in ["Cairo", "Kyiv", "Lisbon"]:
        assert f"22 °c in {city.lower()}" in batch.lower(), batch
    budget = ran.after("token_budget=50")
    assert budget.startswith("stopped token_budget"), budget
    assert "run_id,thread,step" in ran.after('to_csv("usage.csv"')


def check_state_and_history(ran: Ran) -> None:
    first = ran.after('"Use the add_item tool for coffee."')
    assert first.strip().lower() == "completed items=['coffee']", first  # (the model may write Coffee)
    second = ran.after("for a croissant.")
    state_line, answer = second.strip().split("\n", 1)
    assert state_line.lower() == "items=['coffee', 'croissant']", second
    assert _has(answer, "croissant"), answer
    assert [(c.name, c.args["item"].lower()) for c in ran.calls("order-7")] == [
        ("add_item", "coffee"), ("add_item", "croissant")]
    listed = ran.after("await agent.threads()")
    assert listed.split()[0] == "order-7" and len(listed.strip().splitlines()) == 1, listed
    # The fork: copied up to the coffee's answer, then tea; the original keeps its croissant.
    forked = ran.after("agent.fork(")
    fork, state = forked.strip().split(" ", 1)
    assert fork.startswith("order-7-fork-") and state.lower() == "items=['coffee', 'tea']", forked
    assert [(c.name, c.args["item"].lower()) for c in ran.calls(fork)] == [("add_item", "coffee"), ("add_item", "tea")]
    prompts = [m.content for m in ran.threads[fork].messages if m.kind == "user"]
    assert prompts == ["Use the add_item tool for coffee.", "Use the add_item tool for tea."], prompts
    lasts = ran.after('for thread in ["order-7", alt]').strip().splitlines()
    assert _has(lasts[0], "order-7 ->", "croissant") and "tea" not in lasts[0].lower(), lasts
    assert _has(lasts[1], f"{fork} ->", "tea") and "croissant" not in lasts[1].lower(), lasts
    meta = ran.threads["order-7"].meta
    assert [i.lower() for i in meta.state["items"]] == ["coffee", "croissant"]
    # The fork's view, the last cell: its saved copy shows the copied conversation. (Its history
    # loads after the view is shown; the executor once dropped that update: "no messages yet".)
    copy = ran.after("agent.chat(thread=alt)")
    assert "no messages yet" not in copy and _has(copy, "you: Use the add_item tool for tea."), copy


def check_structured_output(ran: Ran) -> None:
    first = ran.after("Report the weather for Paris.")
    assert first.strip() == "completed Weather(city='Paris', temperature_c=21)", first
    table = ran.after("agent.map(reports")
    for city in ["Rome", "Oslo", "Cairo"]:
        assert city in table
    row_status = re.findall(r"\b(completed|failed)\b", table)
    assert len(row_status) == 3, table
    joined = ran.after("output_frame(answers)")
    assert "temperature_c" in joined and "Rome: 24 degrees" in joined
    looked = ran.after("What does this chart show?")
    assert looked.startswith("failed") and "image" in looked.lower(), looked


def check_mcp_tools(ran: Ran) -> None:
    # The server's tools and who decides: read-only ones run at once, writes wait for a person.
    listing = ran.after("MCPTools.stdio(")
    assert re.search(r"list_notes\s+needs approval: False", listing), listing
    assert re.search(r"add_note\s+needs approval: True", listing), listing
    assert "NOTES_DB" in listing and "/tmp" not in listing.split("env=", 1)[1], listing  # names, never values
    # The view's request waits for approval of add_note, and Run All leaves it waiting.
    asked = ran.after("view.ask('Call add_note")
    assert asked.startswith("paused [('add_note', {'title': "), asked
    calls = ran.calls("notes")  # the model may look at the notes first (read-only: no pause)
    assert {c.name for c in calls} <= {"add_note", "list_notes", "read_note"}, calls
    assert [c.status for c in calls if c.name == "add_note"] == [None]  # waiting for a click
    # In code, on a conversation of its own: approved, the server saves the note once.
    coded = ran.calls("notes-in-code")
    [call] = [c for c in coded if c.name == "add_note"]
    assert call.status == "done" and (call.result or "").startswith("saved note")
    title = call.args["title"]
    assert f"saved note '{title}'" in ran.after("approve=paused.pending")
    # A read-only tool runs with no pause; the note is on the server.
    listed = ran.after('"Use the list_notes tool."')
    assert listed.startswith("completed [") and title in listed, listed
    assert [(c.name, c.status) for c in ran.calls("reading")] == [("list_notes", "done")]
    assert title in ran.after('notes.call_tool("list_notes")')
    assert ran.after("await notes.close()").split() == ["connected:", "True", "connected:", "False"]


def check_batch_on_a_cluster(ran: Ran) -> None:
    # Offline, auto() gives the stand-in; eight rows on two Dask workers, in input order.
    assert "stand-in" in ran.after("model = auto(fallback=")
    assert ran.after("LocalCluster(").strip() == "2 workers"
    table = ran.after("answers = agent.map(questions")
    cities = ["Lima", "Cairo", "Kyiv", "Hanoi", "Oslo", "Quito", "Accra", "Perth"]
    rows = [line.split() for line in table.splitlines() if line.split() and line.split()[0] in cities]
    assert [r[0] for r in rows] == cities, table
    assert all(r[1] == "completed" and f"{r[0]}" in " ".join(r[2:]) for r in rows), table
    assert ran.after("again = agent.map(").split() == ["True", "True"]  # every row skipped, same answers
    decided = ran.after('booked.loc[booked["status"] == "paused"')
    assert decided.startswith("completed Done: Booked a table in"), decided
    # The re-run reports the decided row settled and the other still waiting, running nothing.
    rerun = [line.split() for line in ran.after("rerun = booker.map(").splitlines()[1:]]
    assert [r[1:3] for r in rerun] == [["completed", "True"], ["paused", "True"]], rerun
    assert " ".join(rerun[0][3:]) == "Done: Booked a table in Rome", rerun
    # Through the batch API (the loopback stand-in): every row's two steps, each a batch row.
    halved = [line.split() for line in ran.after("halved = halves.map(").splitlines()[1:]]
    assert [r[:2] for r in halved] == [[str(i), "completed"] for i in range(8)], halved
    assert all(f"answer to {c}: Sunny, 22 °C in {c}" in " ".join(r) for r, c in zip(halved, cities, strict=True))
    assert ran.after("usage = nbagent.usage_frame(halves)").splitlines()[0] == (
        "16 model calls, all through a batch: True")
    assert ran.after("for attempt in range(3)").splitlines() == [
        "['submitted', 'submitted'] [0, 0]", "['submitted', 'submitted'] [1, 1]", "['completed', 'completed'] [2, 2]"]


def check_evals_and_forecasts(ran: Ran) -> None:
    # One row per case with a score per evaluator, and a summary indexed by evaluator.
    scored = ran.after("report = agent.evaluate(cases")
    assert "contains" in scored and "brief" in scored and "capital of Japan" in scored, scored
    # A row per evaluator and no NaN row that reads as a failure; the runs' totals apart.
    summary = ran.after("print(report.summary())")
    assert summary.split()[:5] == ["mean", "pass_rate", "scored", "errors", "not_run"], summary
    assert "total" not in summary and "NaN" not in summary, summary
    assert re.search(r"^cases +3$", summary, re.M) and re.search(r"^latency_p50_s +\d", summary, re.M), summary
    # Two models side by side: the stand-in names Paris every time, so 1/3 of the cases. The
    # model's answers are the ones evaluate stored: the view says so, with their stored latency.
    compared = ran.after("nbagent.compare(cases")
    assert "'always-paris': 0.33" in compared, compared
    view = ran.html(ran.index("nbagent.compare(cases"))
    assert view.count("reused 3 stored answers") == 1, view
    assert " · n/a contains" not in view, view
    # The forecast, for all the rows and for the ones still to run; then the batch that skips its
    # sampled rows, its time beside the forecast's for the rows it ran.
    forecast = ran.after("forecast = agent.estimate(")
    assert forecast.startswith("Forecast(6 rows from a sample of 2") and "; 4 still to run: " in forecast
    real = ran.after("answers = agent.map(rows")
    assert "sampled rows skipped: 2" in real, real
    assert re.search(r"^the 4 rows still to run: forecast ~\d+\.\ds, took \d+\.\ds$", real, re.M), real
    assert [t.startswith("batch-") for t in ran.threads].count(True) >= 6


def check_long_sessions(ran: Ran) -> None:
    turns = ran.after("for store in range(1, 31)").strip().splitlines()
    assert len(turns) == 6, turns
    assert all(re.fullmatch(r"turn [ 0-9]{2}: completed, context \d+ % of 2k", t) for t in turns), turns
    gauge = ran.after("print(result.context.describe())").strip().splitlines()
    assert re.fullmatch(r"context \d+ % of 2k", gauge[0]), gauge
    assert [line.split(":")[0] for line in gauge[1:]] == ["system", "tools", "history", "tool results", "latest"], gauge
    compacted = ran.after('records = [m for m in result.messages if m.kind == "compaction"]')
    assert re.search(r"^compacted \d+ messages into a summary \(\d+ tokens\), saved ", compacted, re.M), compacted
    assert re.search(r"^[1-9]\d* compactions; 30 user messages kept$", compacted, re.M), compacted
    assert re.search(r"the model read \d[\d,]* of 1,015 characters of the first table", compacted), compacted
    assert " compaction " in ran.after("frame = nbagent.context_frame(analyst)")
    (state,) = [t for t in ran.threads.values() if any(m.kind == "compaction" for m in t.messages)]
    assert sum(m.kind == "user" for m in state.messages) == 30
    assert sum(m.kind == "tool-result" and m.full_content is not None for m in state.messages) == 30
    real = ran.after('result = await agent.run("Use the get_sales tool for store 3.")').strip()
    assert re.fullmatch(r"completed context \d+ % of 4.1k", real), real  # the local model's window


def check_guardrails(ran: Ran) -> None:
    # The blocked prompt reached no model; it is in its thread, marked.
    assert ran.after('thread="ids")').splitlines() == [
        "stopped | guard 'ids' blocked the prompt: an internal ticket id", "model calls: 0"]
    [prompt] = ran.threads["ids"].messages
    assert prompt.blocked == "ids: an internal ticket id" and ran.threads["ids"].usage == []
    # The mass mail never ran; the model read why.
    mail = ran.after('thread="newsletter")')
    assert mail.startswith("denied | blocked by guard 'mass-mail': 250 recipients; at most 10 at once"), mail
    assert "emails sent: 0 |" in mail
    assert [(c.name, c.status) for c in ran.calls("newsletter")] == [("send_email", "denied")]
    # The record was redacted before the model and the store read it.
    assert ran.after('thread="lookup")').strip() == (
        "Jane Doe: premium since 2021, [redacted email address], card [redacted card number]")
    assert "4111" not in json.dumps([m.to_dict() for m in ran.threads["lookup"].messages])
    # The leaked key was held, blocked, never shown or stored; the view's saved copy says so.
    key = ran.after('view.ask("What is our API key?")').splitlines()
    assert key == ["stopped | guard 'leaks' blocked the answer: found 1 API key", "stored: ['leaks: found 1 API key']"]
    assert "sk-live" not in json.dumps([m.to_dict() for m in ran.threads["key"].messages])
    assert "answer withheld: blocked by leaks" in ran.after('support.chat(thread="key")')
    audit = ran.after("pd.DataFrame([")
    assert "leaks  output   block  found 1 API key" in audit, audit
    # The real model read the prompt with the address redacted.
    real = ran.after("guarded = Agent(model").splitlines()
    assert real[0] == "the model read: Write one short welcome line for our new customer [redacted email address]"
    assert real[1].startswith("[('pii', 'input', 'rewrite'), ('pii', 'output', "), real


def check_notebook_as_context(ran: Ran) -> None:
    # %%agent sent df's capped summary, not the frame: shape, dtypes, head(5), describe, nulls;
    # the thread recorded it as the user message, and interpolate() gives the same text.
    sent = ran.after("first_thread = result.thread")
    assert re.match(r"cap: \d+ tokens; sent \d[\d,]* characters", sent), sent
    assert "Which region sold the most units? DataFrame: 8 rows x 4 columns" in sent, sent
    assert all(part in sent for part in ("dtypes:", "head(5):", "describe():", "null counts:")), sent
    assert "7   West" not in sent  # past head(5): the rows themselves are not sent
    assert sent.strip().endswith("same as interpolate(): True"), sent
    (asked,) = [t for t in ran.threads.values() if t.messages and t.messages[0].kind == "user"
                and t.messages[0].content.startswith("Which region sold the most units? DataFrame: 8 rows")]
    # The %agent follow-up continued that thread: two user messages in it, the second the line's text.
    assert ran.after('print("same thread:"').strip() == "same thread: True | 2 user messages"
    users = [m.content for m in asked.messages if m.kind == "user"]
    assert users[1:] == ["Now name the product that sold the most units."], users
    # --new with {Out[8]}: the echo stand-in answers with what it received, the totals cell's result.
    echoed = ran.out(ran.index("Explain these totals: {Out[8]}") + 1)  # the cell that waits for it
    assert echoed.startswith("Explain these totals: region\nEast     27\nNorth    51"), echoed
    # A typo ({totls}) is sent as written, with one warning line naming it.
    typo = ran.after("What were the {totls} again.")
    assert typo.startswith("nbagent: {totls} names no variable of the notebook: sent as written"), typo
    assert [t for t in ran.threads.values() if t.messages and t.messages[-1].kind == "assistant"
            and t.messages[-1].text == "What were the {totls} again."], "the typo reached the model as written"
    # @df in the chat view: a chip, and the text it sends.
    chips = ran.after('view.message_box.value = "Which region sold the most? @df"')
    assert chips.startswith("['@df']\nDataFrame: 8 rows x 4 columns"), chips
    # dataframe_tools: six prefixed tools; a direct call and a stand-in's filter answer like pandas.
    tools = ran.after('dataframe_tools(df, name="sales")')
    assert "['sales_describe', 'sales_head', 'sales_filter', 'sales_groupby_agg', 'sales_value_counts', " \
           "'sales_sort_top']" in tools, tools
    assert re.search(r"^North\s+51$", tools, re.M) and "4 groups" in tools, tools
    filtered = ran.after("def asks_for_tea(")
    assert "matching rows: 2, shown: 2" in filtered and filtered.strip().endswith("Two tea sales had 10 units or more.")
    # python_tool: the view's call waits for a click under Run All; the one approved in code ran once.
    assert "python waits for a decision" in ran.after("code_view = coder.chat(")
    assert ran.after("paused = await code_view.ask(").startswith("paused [('python', 'best = df.groupby(")
    assert [(c.name, c.status) for c in ran.calls("code-in-view")] == [("python", None)]
    assert [(c.name, c.status) for c in ran.calls("code-approved-in-code")] == [("python", "done")]
    assert ran.after("done = await coder.resume(").strip() == "completed | The best region is North. | best = North"
    # Denied in code: nothing ran, and the stand-in says so (not "The best region is denied ...").
    assert [(c.name, c.status) for c in ran.calls("code-denied-in-code")] == [("python", "denied")]
    assert ran.after("refused = await coder.resume(").strip() == (
        "completed | You denied the code, so nothing ran and I have no answer: approve it, or ask another way.")


def check_sub_agents(ran: Ran) -> None:
    # The view's run paused on the researcher's call, in the top cell; Run All leaves it waiting.
    assert ran.after('paused = await view.ask("Research tides")').strip() == (
        "paused [('researcher → delete_file', {'path': '/tmp/tides.old'})]")
    [top] = [name for name, t in ran.threads.items() if "/" not in name and t.messages
             and t.messages[0].content == "Research tides" and t.meta.status == "paused"]
    [child] = [t for name, t in ran.threads.items() if name.startswith(top + "/")]
    assert child.meta.parent["thread"] == top and child.meta.parent["path"] == ["boss", "researcher"]
    assert [(c.name, c.status) for c in ran.calls(child.thread)] == [("read_note", "done"), ("delete_file", None)]
    # Approved in code: the researcher's call ran once, in its own thread of the store.
    assert ran.after('paused = await boss.run("Research fog"').strip() == (
        "1 ('boss', 'researcher') researcher → delete_file\n"
        "completed | My researcher reports: Fog lifts by noon. deleted /tmp/fog.old")
    [fog] = [t for name, t in ran.threads.items() if name.startswith("fog-in-code/")]
    assert [(c.name, c.status) for c in ran.calls(fog.thread)] == [("read_note", "done"), ("delete_file", "done")]
    assert sorted(e.status for e in fog.ledger.values()) == ["finished", "finished"]
    # Denied: the reason reached the researcher's model, nothing was deleted.
    assert ran.after("refused = await boss.resume(").strip() == (
        "My researcher reports: Tides follow the moon. denied by the user: keep the old copy\n"
        "delete_file was not run. Do not call it again with the same arguments: that call is denied"
        " without asking. Take the reason into account, or ask the user what to do instead.")
    # Cost per agent: the frame's sums are the run's usage.
    sums = ran.after('print(frame.groupby("agent"').strip().splitlines()
    assert sums[-1].startswith("frame: ") and sums[-1].split()[1] == sums[-1].split()[-2], sums
    table = "\n".join(sums)
    assert re.search(r"^boss\s+\d+\s+\d+$", table, re.M) and re.search(r"^researcher\s+\d+", table, re.M)
    # The summary holds the researcher's run under its call.
    [cell] = [c for c in ran.nb.cells if c.cell_type == "code" and c.source == "done"]
    summary = [o for o in cell.outputs if "text/html" in o.get("data", {})]
    assert summary and "researcher · completed" in summary[0]["data"]["text/html"]
    # A sub-agent on auto()'s model: its rows joined the planner's run.
    trip = ran.after("trip = await planner.run(").strip().splitlines()
    assert trip[0] == "completed | [('forecaster', 1), ('planner', 0)]", trip
    assert "Sunny, 22 °C in Paris" in trip[-1], trip
    assert not any(leak in ran.all_text() for leak in LEAKS)


CHECKS: dict[str, Callable[[Ran], None]] = {
    "01_quickstart.ipynb": check_quickstart,
    "02_approve_tools.ipynb": check_approve_tools,
    "03_token_costs.ipynb": check_token_costs,
    "04_state_and_history.ipynb": check_state_and_history,
    "05_structured_output.ipynb": check_structured_output,
    "06_mcp_tools.ipynb": check_mcp_tools,
    "07_batch_on_a_cluster.ipynb": check_batch_on_a_cluster,
    "08_notebook_as_context.ipynb": check_notebook_as_context,
    "09_evals_and_forecasts.ipynb": check_evals_and_forecasts,
    "10_long_sessions.ipynb": check_long_sessions,
    "11_sub_agents.ipynb": check_sub_agents,
    "12_guardrails.ipynb": check_guardrails,
}


# ----------------------------------------------------------------------------------- tests
def test_there_are_the_notebooks_the_script_makes() -> None:
    assert [p.name for p in NOTEBOOKS] == sorted(MAKER.NOTEBOOKS)
    assert sorted(CHECKS) == sorted(MAKER.NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebook_is_its_source_executed(path: Path) -> None:
    """The .ipynb on disk has exactly the cells scripts/make_notebooks.py writes, with the outputs
    of ``--execute`` (so GitHub shows a run), and no live-widget view a saved file cannot bring
    back (JupyterLab would log "widget model not found" on opening it)."""
    committed = nbformat.read(path, as_version=4)
    built = MAKER.build(path.name)
    assert [(c.cell_type, c.id, c.source) for c in committed.cells] == [
        (c.cell_type, c.id, c.source) for c in built.cells]
    code = [c for c in committed.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), "run scripts/make_notebooks.py --execute"
    assert not [o for c in code for o in c.outputs if WIDGET_VIEW in o.get("data", {})]
    # one notice per chat view: its saved copy, not also the live view's plain-text stand-in
    assert not [o for c in code for o in c.outputs if "chat view of thread" in str(o.get("data", {}))]
    assert "widgets" not in committed.metadata
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]


@pytest.mark.parametrize("name", sorted(CHECKS), ids=lambda n: n[:-6])
def test_notebook_tells_a_true_story(name: str, tmp_path: Path, local_llm_base_url: str) -> None:
    if "cluster" in name:  # a Dask LocalCluster: the cluster tests' switch and package
        if os.environ.get("NBAGENT_SKIP_CLUSTER") == "1":
            pytest.skip("NBAGENT_SKIP_CLUSTER=1")
        pytest.importorskip("distributed", reason="dask.distributed is not installed")
    ran = _run(name, tmp_path)
    try:
        CHECKS[name](ran)
    except AssertionError:
        print(json.dumps({i: ran.out(i) for i, c in enumerate(ran.nb.cells) if c.cell_type == "code"},
                         indent=1, ensure_ascii=False)[:20000])
        raise
