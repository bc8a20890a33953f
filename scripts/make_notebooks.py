"""Write the example notebooks in notebooks/ from the cell sources below.

Run: .venv/bin/python scripts/make_notebooks.py  (outputs are not committed; the notebooks are
executed headless by tests/test_notebooks.py and in the Binder environment test).
"""

from __future__ import annotations

from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent / "notebooks"

SETUP = '''import nbagent
from nbagent import Agent, tool
from nbagent.models import auto

# OpenAI when OPENAI_API_KEY is set (OPENAI_MODEL, OPENAI_BASE_URL),
# otherwise the bundled local model (offline, no key).
model = auto()
print(model)'''

NOTEBOOKS: dict[str, list[tuple[str, str]]] = {
    "01_quickstart.ipynb": [
        ("md", """# nbagent quickstart

An agent with two tools, its answer streaming in, and the live tool-call table — in this cell, with
no API key. Without `OPENAI_API_KEY` the model is the bundled SmolLM2-135M running locally: tiny, so
we ask it to use a tool *by name*. With a key, try natural questions."""),
        ("code", SETUP),
        ("md", "## Two tools\nTyped functions; the schema comes from the signature, the description from the docstring."),
        ("code", '''@tool
def get_weather(city: str) -> str:
    """Current weather for a city.

    Args:
        city: The city name, e.g. "Paris".
    """
    return f"Sunny, 22 °C in {city}"


@tool
def get_time(city: str) -> str:
    """Local time in a city."""
    return f"It is 14:05 in {city}"


agent = Agent(model, tools=[get_weather, get_time], settings={"max_tokens": 200})
agent'''),
        ("md", "## Streaming, in code\n`agent.stream()` yields typed events: text deltas, tool calls, usage, and the end of the run."),
        ("code", '''async for event in agent.stream("Use the get_weather tool for Paris."):
    if event.kind == "text-delta":
        print(event.delta, end="")
    elif event.kind == "tool-call-started":
        print(f"\\n[{event.call.name}({event.call.args})]")
    elif event.kind == "tool-call-finished":
        print(f"[-> {event.result.content}]")
    elif event.kind == "run-completed":
        print("\\n\\ndone:", event.result.usage)'''),
        ("md", """## The view
`agent.chat()` shows the conversation, an input box (Enter sends), the answer streaming in as Markdown,
a row per tool call with its arguments, status, result and duration, and the run's tokens. The run is
a background task: the cell returns at once and the kernel stays free."""),
        ("code", '''view = agent.chat()
view'''),
        ("code", '''handle = view.ask("Use the get_time tool for Tokyo.")   # same as typing it in the box
print("the cell returned; the run goes on in the background")'''),
        ("code", '''result = await handle        # wait for it here (only needed in a script-like notebook)
result                       # a finished run renders as a static summary (also on GitHub / nbviewer)'''),
        ("code", '''import nbagent\n\nnbagent.usage_frame(result)          # one row per model call: tokens, latency, cost'''),
    ],
    "02_approve_tools.ipynb": [
        ("md", """# Approve tools

A weather agent that must ask before booking anything: the run **pauses** on a call that needs a
person, the view shows its arguments with **Approve / Deny / Edit** buttons, and a client-side tool
lets the person answer the model directly. A paused run is stored, so it survives a kernel restart."""),
        ("code", SETUP),
        ("code", '''from pydantic import BaseModel
from nbagent import Tool


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny, 22 °C in {city}"


@tool(requires_approval=True)
def book_table(city: str) -> str:
    """Book a restaurant table in a city."""
    return f"Table booked in {city} for 20:00"


class AskUser(BaseModel):
    question: str


ask_user = Tool.client("ask_user", "Ask the person a question and get their answer.", params=AskUser)

agent = Agent(model, tools=[get_weather, book_table, ask_user], settings={"max_tokens": 200})'''),
        ("md", "## In the view\nClick **Approve** or **Deny** (with a reason) in the row of the waiting call."),
        ("code", '''view = agent.chat(thread="dinner-plans")
view'''),
        ("code", '''handle = view.ask("Use the book_table tool for Paris.")
result = await handle
print(result.status, [(p.name, p.args) for p in result.pending])'''),
        ("md", "## The same in code\nDecisions are per call and bound to the arguments that were shown."),
        ("code", '''if result.status == "paused":
    result = await agent.resume(result, approve=[p for p in result.pending if p.name == "book_table"])
print(result.status, result.output)'''),
        ("md", "## A client-side tool\n`ask_user` has no Python body: the run pauses until the person (or code) gives the answer."),
        ("code", '''result = await agent.run("Use the ask_user tool to ask my name.", thread="names")
print(result.status, [(p.name, p.reason, p.args) for p in result.pending])
if result.pending:
    result = await agent.resume(result, results={p.id: "Ada" for p in result.pending})
print(result.status, result.output)'''),
        ("md", """## Resumed after a kernel restart
The run below pauses and is stored in SQLite (`./.nbagent/threads.db`). Restart the kernel now if you
like, run the setup and tool cells again, then the cell after it: a *new* agent object finds the pending
call in the store and continues — the tool that needs approval has not run, and nothing runs twice."""),
        ("code", '''paused = await agent.run("Use the book_table tool for Rome.", thread="after-restart")
print(paused.status, [p.name for p in paused.pending])'''),
        ("code", '''fresh = Agent(model, tools=[get_weather, book_table, ask_user])      # as after a restart
waiting = await fresh.pending("after-restart")
print([(p.name, p.args) for p in waiting])
if waiting:
    done = await fresh.resume(thread="after-restart", approve=waiting)
    print(done.status, done.output)'''),
        ("code", '''fresh.chat(thread="after-restart")     # the view of a stored thread: history, tool rows, any pending buttons'''),
    ],
    "03_token_costs.ipynb": [
        ("md", """# Token usage and cost

Every model call is a row — tokens (input, cached, output, reasoning), latency, finish reason and
cost — that you can group, plot and export with pandas, for a run, a thread, or everything stored."""),
        ("code", SETUP),
        ("code", '''import pandas as pd


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny, 22 °C in {city}"


# Prices in USD per million tokens. Known models (gpt-4.1-mini, ...) are priced by genai-prices;
# the local model has no price, so we give it one to have something to look at.
agent = Agent(model, tools=[get_weather], settings={"max_tokens": 120},
              prices={"local-model": {"input": 0.15, "cache_read": 0.075, "output": 0.60}})
for city in ["Paris", "Rome", "Oslo"]:
    result = await agent.run(f"Use the get_weather tool for {city}.", thread=f"weather-{city}")
    print(city, result.status, result.usage.total_tokens, "tokens")'''),
        ("code", '''usage = nbagent.usage_frame(agent)        # every stored model call of this agent's store
usage.dtypes'''),
        ("code", '''usage.groupby("thread")[["input_tokens", "output_tokens", "cost_total"]].sum()'''),
        ("code", '''nbagent.tool_calls_frame(agent)'''),
        ("code", '''nbagent.runs_frame(agent)'''),
        ("code", '''from nbagent.dataframe import plot_cost, plot_tokens

plot_cost(usage, by="model");'''),
        ("code", '''plot_tokens(usage);'''),
        ("md", "## A batch over a DataFrame\nIndependent conversations, run concurrently with a progress bar; failures stay in their row; a re-run skips rows already done."),
        ("code", '''questions = pd.DataFrame({"question": [f"Use the get_weather tool for {c}." for c in ["Lima", "Cairo", "Kyiv", "Hanoi"]]})
answers = agent.map(questions["question"], concurrency=2)
answers[["input", "status", "output_tokens", "cost", "duration_s"]]'''),
        ("md", "## Budgets\nA run stops gracefully (status `stopped`, with the reason) before a model call that would go over budget."),
        ("code", '''thrifty = Agent(model, tools=[get_weather], token_budget=50, settings={"max_tokens": 60})
result = await thrifty.run("Use the get_weather tool for Paris.")
print(result.status, result.stop_reason, result.usage.total_tokens)'''),
        ("code", '''usage.to_csv("usage.csv", index=False)
print(open("usage.csv").readline())'''),
    ],
    "04_state_and_history.ipynb": [
        ("md", """# State, threads and history

Tools that build up state (an order), conversations kept by thread id, the checkpoints of a thread,
and a fork to try another path from an earlier step."""),
        ("code", SETUP),
        ("code", '''from pydantic import BaseModel
from nbagent import RunContext


class Order(BaseModel):
    items: list[str] = []


@tool
def add_item(ctx: RunContext[Order], item: str) -> str:
    """Add an item to the order."""
    ctx.state.items.append(item)
    return f"order now: {ctx.state.items}"


agent = Agent(model, tools=[add_item], state_type=Order, settings={"max_tokens": 120})
result = await agent.run("Use the add_item tool for coffee.", thread="order-7", state=Order())
print(result.status, result.state)'''),
        ("code", '''result = await agent.run("Use the add_item tool for a croissant.", thread="order-7")   # state comes back from the store
print(result.state)'''),
        ("code", '''for info in await agent.threads():
    print(info.thread, info.messages, info.status, repr(info.title))'''),
        ("code", '''history = await agent.checkpoints("order-7")
for c in history:
    print(c.step, c.version, c.messages, c.input_tokens, c.output_tokens, c.last_message)'''),
        ("md", "## Fork\nCopy the thread up to step 1 and continue differently from there; the original is unchanged."),
        ("code", '''alt = await agent.fork("order-7", at_step=1, new_thread="order-7-tea")
result = await agent.run("Use the add_item tool for tea.", thread=alt, state=Order(items=["coffee"]))
print(alt, result.state)'''),
        ("code", '''agent.chat(thread="order-7-tea")'''),
    ],
    "05_structured_output.ipynb": [
        ("md", """# Structured answers, into DataFrame columns

`Agent(model, output_type=Weather)` makes each answer a validated `Weather` object: the model answers
by calling a `final_result` tool whose parameters are the model's fields (it works with any model that
calls tools — even the tiny bundled one). Over a column of texts, `agent.map` turns free text into
columns you can analyse with pandas."""),
        ("code", SETUP),
        ("code", '''import pandas as pd
from pydantic import BaseModel, Field


class Weather(BaseModel):
    city: str
    temperature_c: int = Field(description="temperature in degrees Celsius")


agent = Agent(model, output_type=Weather, settings={"max_tokens": 120})
result = await agent.run("It is 21 degrees in Paris. Report the weather for Paris.")
print(result.status, repr(result.output))'''),
        ("md", "A small model may get the values wrong; the *shape* is always right: `result.output` is a `Weather`, validated. An invalid answer goes back to the model to fix."),
        ("code", '''reports = pd.DataFrame({"report": [
    "Rome: 24 degrees and sunny.",
    "Oslo is at 3 degrees today.",
    "Cairo, 35 degrees.",
]})
answers = agent.map(reports["report"] + " Report the weather.", concurrency=2)
answers[["input", "status", "output", "error"]]'''),
        ("md", "The tiny local model misses some rows (it answers in text, or with the wrong field): those rows say why in `error` and stay `failed`, the others are done — a re-run retries only the failed ones. A real model gets them all."),
        ("code", '''reports.join(nbagent.output_frame(answers))     # one column per field of Weather'''),
        ("md", """## Images in the prompt

A prompt can be a list of text and images (a matplotlib figure, a PIL image, PNG/JPEG bytes...). A
vision model (e.g. `gpt-4.1-mini` with `OPENAI_API_KEY` set) describes the chart; the bundled model
is text-only, and the server refuses at once — the run fails with a clear error, without retrying."""),
        ("code", '''import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(4, 2.5))
ax.plot(["Rome", "Oslo", "Cairo"], [24, 3, 35], marker="o")
ax.set_ylabel("°C")
plt.close(fig)

looked = await Agent(model, settings={"max_tokens": 120}).run(["What does this chart show?", fig])
print(looked.status, looked.output or looked.error)'''),
    ],
    "07_batch_on_a_cluster.ipynb": [
        ("md", """# A batch on a cluster

`agent.map` runs one conversation per row. The same call runs on a **Dask** or **Ray** cluster with
one argument, `executor=`: rows go to the workers in chunks, the progress bar advances as rows
finish there, a re-run skips the rows settled before, and rows that need approval end paused, to be
decided here. This notebook starts a Dask `LocalCluster` (two worker processes on this machine);
on a real cluster, connect to its scheduler instead (docs/scale.md has Ray, throughput, and what
travels to the workers).

With `ANTHROPIC_API_KEY`, `OPENAI_API_KEY` or `OLLAMA_MODEL` set, the batch runs on that model
(`auto()`): it travels to the workers as its configuration, and each worker reads the key from its
own environment. Without one, the model is a stand-in (`auto(fallback=...)`): a Python function
that takes 0.3 s, calls the question's tool, then answers with its result. The bundled local model
answers one request at a time, seconds each on a laptop CPU, so a batch of it would show nothing of
a cluster."""),
        ("code", '''import asyncio

from nbagent import Agent, tool
from nbagent.models import FunctionModel, auto, tool_call


async def stand_in(messages, info):
    await asyncio.sleep(0.3)                              # a model takes a while to answer
    last = messages[-1]
    if last.kind == "user":                               # step 1: call the tool for the city asked
        city = last.content.rsplit(" ", 1)[-1].rstrip(".?")
        return tool_call(info.tools[0]["name"], city=city)
    return f"Done: {last.content}"                        # step 2: answer with the tool's result


model = auto(fallback=FunctionModel(stand_in, model_name="stand-in"))
print(model)'''),
        ("code", '''@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny, 22 °C in {city}"


# The workers share the store by its path (a SQLite file: workers on this machine; a cluster of
# machines shares a PostgreSQL store). API keys are not sent with the agent: each worker reads
# OPENAI_API_KEY from its own environment (a LocalCluster inherits this kernel's).
agent = Agent(model, tools=[get_weather], store="cluster-batch.db")'''),
        ("md", """## A cluster
`Client()` alone starts a `LocalCluster`; `Client("tcp://scheduler:8786")` connects to a running one."""),
        ("code", '''import logging

from dask.distributed import Client, LocalCluster

cluster = LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None,
                       silence_logs=logging.ERROR)
client = Client(cluster)
print(len(client.nthreads()), "workers")'''),
        ("md", """## The batch
`concurrency` caps the rows running at once across all workers (here 2 chunks in flight, 2 rows
each; 8 rows of two 0.3 s steps take about 1.5 s). The result is the DataFrame of the local path,
in input order, with the Series' index."""),
        ("code", '''import pandas as pd

cities = ["Lima", "Cairo", "Kyiv", "Hanoi", "Oslo", "Quito", "Accra", "Perth"]
questions = pd.Series([f"What is the weather in {c}?" for c in cities], index=cities)
answers = agent.map(questions, executor=client, concurrency=4)
answers[["status", "output", "steps", "duration_s"]]'''),
        ("md", """## Run it again
Each row's thread id is derived from the agent and the input, so the same batch finds its rows:
settled ones are skipped (a batch stopped with the Stop button, or whose worker died, continues
where it was stored)."""),
        ("code", '''again = agent.map(questions, executor=client, concurrency=4)
print(again["skipped"].all(), (again["output"] == answers["output"]).all())'''),
        ("md", """## Rows that need a person
A tool that needs approval pauses its row on the worker, as in the local path. The row is stored:
decide it here, in the notebook, and a re-run reports it settled."""),
        ("code", '''@tool(requires_approval=True)
def book_table(city: str) -> str:
    """Book a table for dinner in a city."""
    return f"Booked a table in {city}"


booker = Agent(model, tools=[book_table], store="cluster-batch.db")
booked = booker.map(["Book a table in Rome.", "Book a table in Oslo."], executor=client, concurrency=2)
booked[["status", "error"]]'''),
        ("code", '''for thread in booked.loc[booked["status"] == "paused", "thread"][:1]:
    done = booker.resume_sync(thread=thread, always_allow=["book_table"])   # approve, here
    print(done.status, done.output)'''),
        ("md", """## On Ray
The same batch on a Ray cluster: `ray.init()` (or `ray.init(address="ray://head:10001")`), then
`executor="ray"`. Ray streams each row back the moment a worker settles it.

```python
import ray

ray.init()
answers = agent.map(questions, executor="ray", concurrency=32)
```"""),
        ("code", '''client.close()
cluster.close()'''),
    ],
}

# Notebook 06 is its own entry (MCP servers as tool sources); 01-05 are above.
NOTEBOOKS["06_mcp_tools.ipynb"] = [
    ("md", """# Tools from an MCP server

An agent whose tools live in a [Model Context Protocol](https://modelcontextprotocol.io) server. nbagent
ships a small notes server on SQLite (`python -m nbagent.mcp.examples.notes`); `MCPTools.stdio` starts
it, lists its tools when a run first needs them, and keeps the connection for the whole kernel. The
server's own annotations decide what needs approval: reading notes runs at once, writing (`add_note`)
and deleting (`delete_note`, marked destructive) wait for you. Offline, the model is the bundled SmolLM2-135M: we ask it to use a tool *by name*."""),
    ("code", SETUP),
    ("md", "## The server and its tools\nThe server gets only the environment you pass (`env=`) and the few variables the `mcp` SDK considers safe."),
    ("code", '''import sys
from nbagent.mcp import MCPTools

notes = MCPTools.stdio(sys.executable, ["-m", "nbagent.mcp.examples.notes"], env={"NOTES_DB": "notes.db"})
for t in await notes.list_tools():      # connects now (otherwise: when a run first needs the tools)
    print(f"{t.name:12} needs approval: {str(t.requires_approval):5}  {t.description}")
notes'''),
    ("code", '''agent = Agent(model, tools=[notes], settings={"max_tokens": 60})
view = agent.chat(thread="notes")
view'''),
    ("md", """## A write waits for you
`add_note` is not marked read-only, so the run pauses with the call and the arguments the model chose;
in the view above its row has **Approve / Deny / Edit**. (The tiny local model invents its own title
and text: this is why you see the arguments before anything is written.)"""),
    ("code", '''handle = view.ask("Use the add_note tool to save a note titled milk with the text buy 2 litres.")
paused = await handle
print(paused.status, [(p.name, p.args) for p in paused.pending])
assert paused.status == "paused" and [p.name for p in paused.pending] == ["add_note"]'''),
    ("md", "Approve it (the same as clicking **Approve**): the call runs on the server, once."),
    ("code", '''done = await agent.resume(paused, approve=paused.pending)
saved = [m.content for m in done.messages if m.kind == "tool-result"]
print(saved)
assert saved[-1].startswith("saved note")
title = paused.pending[0].args["title"]'''),
    ("md", "## Reading runs at once\n`list_notes` is marked read-only: no pause."),
    ("code", '''listed = await agent.run("Use the list_notes tool.", thread="reading")
print(listed.status, [m.content for m in listed.messages if m.kind == "tool-result"])
assert listed.status == "completed" and not listed.pending'''),
    ("md", "You can call a server's tool yourself too; the result is what a model would see."),
    ("code", '''print(await notes.call_tool("list_notes"))
print(await notes.call_tool("read_note", {"title": title}))
assert title in await notes.call_tool("list_notes")'''),
    ("md", """## The connection
One server process serves every run of this kernel (`await`, `run_sync`, the view, `agent.map`); it is
stopped when the kernel exits, or now with `close()`. A later run would start it again."""),
    ("code", '''print("connected:", notes.connected)
await notes.close()
print("connected:", notes.connected)'''),
]


def main() -> None:
    ROOT.mkdir(exist_ok=True)
    for name, cells in NOTEBOOKS.items():
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.metadata["language_info"] = {"name": "python"}
        for i, (kind, source) in enumerate(cells):
            cell = nbformat.v4.new_markdown_cell(source) if kind == "md" else nbformat.v4.new_code_cell(source)
            cell["id"] = f"{name[:2]}-{i:02d}"  # stable ids: regenerating gives no spurious diff
            nb.cells.append(cell)
        nbformat.write(nb, ROOT / name)
        print("wrote", ROOT / name)


if __name__ == "__main__":
    main()
