"""Write the example notebooks in notebooks/ from the cell sources below (the single source).

Run::

    .venv/bin/python scripts/make_notebooks.py            # sources only (no outputs)
    .venv/bin/python scripts/make_notebooks.py --execute  # run each one offline, save its outputs
    .venv/bin/python scripts/make_notebooks.py --execute 04_state_and_history.ipynb   # just one

The committed notebooks are the executed ones, so that GitHub and nbviewer show what a run gives:
``--execute`` runs each notebook headless (nbclient, the bundled local model: any API key in the
environment is ignored, the store is a temporary file), keeps each output's static forms (the live
widgets of the view cannot come back from a file: their text fallback stays), drops the run's
timestamps, and writes it with its outputs. Regenerate them after a change to a notebook, to the
view, or to the local model's template. tests/test_notebooks.py executes the same notebooks from
these sources (`build`) and checks what their prose claims; tests/browser/test_screenshots.py
runs them in JupyterLab and saves docs/img/notebook_0N.png.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from nbagent.notebook._clean import _without_views  # clean_outputs' step, one cell at a time

ROOT = Path(__file__).resolve().parent.parent / "notebooks"

SETUP = '''import nbagent
from nbagent import Agent, tool
from nbagent.models import auto

# Claude when ANTHROPIC_API_KEY is set (ANTHROPIC_MODEL), else OpenAI or a
# compatible server when OPENAI_API_KEY is set (OPENAI_MODEL, OPENAI_BASE_URL),
# else the bundled local model (offline, no key).
model = auto()
print(model)'''

NOTEBOOKS: dict[str, list[tuple[str, str]]] = {
    "01_quickstart.ipynb": [
        ("md", """# nbagent quickstart

An agent with two tools, its answer streaming in, and the live tool-call table — in this cell, with
no API key. Without a key the model is the bundled SmolLM2-135M, running on your CPU. It is tiny:
it calls a tool when you name it ("Use the get_weather tool for Paris."), and its answer repeats
what the tool returned. That is enough to see every moving part. With `OPENAI_API_KEY` (or
`ANTHROPIC_API_KEY`) set, the same cells use a real model: try natural questions then."""),
        ("code", SETUP),
        ("md", "## Two tools\nTyped functions; the schema comes from the signature, the description from the docstring."),
        ("code", """@tool
def get_weather(city: str) -> str:
    \"\"\"Current weather for a city.

    Args:
        city: The city name, e.g. "Paris".
    \"\"\"
    return f"Sunny, 22 °C in {city}"


@tool
def get_time(city: str) -> str:
    \"\"\"Local time in a city.\"\"\"
    return f"It is 14:05 in {city}"


agent = Agent(model, tools=[get_weather, get_time], settings={"max_tokens": 200})
agent"""),
        ("md", """## Streaming, in code
`agent.stream()` yields typed events: text deltas, tool calls, usage, and the end of the run. Below,
the model asks for `get_weather` with `city="Paris"`, the tool's result comes back, and the answer
streams in, made from that result."""),
        ("code", """async for event in agent.stream("Use the get_weather tool for Paris."):
    if event.kind == "text-delta":
        print(event.delta, end="")
    elif event.kind == "tool-call-started":
        print(f"[{event.call.name}({event.call.args})]")
    elif event.kind == "tool-call-finished":
        print(f"[-> {event.result.content}]")
    elif event.kind == "run-completed":
        print("\\n\\ndone:", event.result.usage)"""),
        ("md", """## The view
`agent.chat()` shows the conversation, an input box (Enter sends), the answer streaming in as Markdown,
a row per tool call with its arguments, status, result and duration, and the run's tokens. The run is
a background task: the cell returns at once and the kernel stays free."""),
        ("code", """view = agent.chat()
view"""),
        ("code", """handle = view.ask("Use the get_time tool for Tokyo.")   # same as typing it in the box
print("the cell returned; the run goes on in the background")"""),
        ("code", """result = await handle        # wait for it here (only needed in a script-like notebook)
# A finished run renders as a static summary (also on GitHub / nbviewer).
result"""),
        ("md", """## A follow-up
The next message continues the same conversation (the view's thread), and the model calls a tool
again: here `get_weather` for Rome. Type your own in the box above, naming a tool."""),
        ("code", """followup = await view.ask("Use the get_weather tool for Rome.")
print(followup.output)"""),
        ("code", """# One row per model call of that run: tokens, cost, latency, time (columns=None: all of them).
nbagent.usage_frame(followup, columns="summary")"""),
    ],
    "02_approve_tools.ipynb": [
        ("md", """# Approve tools

A weather agent that must ask before booking anything: the run **pauses** on a call that needs a
person, the view shows its arguments with **Approve / Deny / Edit** buttons, and a client-side tool
lets the person answer the model directly. A paused run is stored, so it survives a kernel restart.
(The bundled model calls a tool when you name it; its answer repeats the tool's result.)"""),
        ("code", SETUP),
        ("code", """from pydantic import BaseModel
from nbagent import Tool


@tool
def get_weather(city: str) -> str:
    \"\"\"Current weather for a city.\"\"\"
    return f"Sunny, 22 °C in {city}"


@tool(requires_approval=True)
def book_table(city: str) -> str:
    \"\"\"Book a restaurant table in a city.\"\"\"
    return f"Table booked in {city} for 20:00"


class AskUser(BaseModel):
    question: str


ask_user = Tool.client("ask_user", "Ask the person a question and get their answer.",
                       params=AskUser)

agent = Agent(model, tools=[get_weather, book_table, ask_user], settings={"max_tokens": 200})"""),
        ("md", "## In the view\nThe model asks for `book_table`; the run pauses and the row waits with its buttons. Nothing is booked yet."),
        ("code", """view = agent.chat(thread="dinner-plans")
view"""),
        ("code", """handle = view.ask("Use the book_table tool for Paris.")
result = await handle
print(result.status, [(p.name, p.args) for p in result.pending])"""),
        ("md", """**Your turn:** the `book_table` row above waits with **Approve / Deny / Edit**. Click **Approve**:
the table is booked, once, and the model answers. (Run All leaves it waiting for you; the cells below
use conversations of their own.)"""),
        ("md", """## The same in code
Decisions in code are the same decisions: per call, and bound to the arguments that were shown. Here on
a conversation of its own, so the call in the view keeps waiting for your click."""),
        ("code", """result = await agent.run("Use the book_table tool for Paris.", thread="dinner-in-code")
print(result.status, [(p.name, p.args) for p in result.pending])
if result.status == "paused":
    booking = [p for p in result.pending if p.name == "book_table"]
    result = await agent.resume(result, approve=booking)
print(result.status, "|", result.output)"""),
        ("md", "## Deny, with a reason\nA second request in the same conversation. A denied call never runs: the model gets your reason as the tool's (error) result."),
        ("code", """result = await agent.run("Use the book_table tool for Rome.", thread="dinner-in-code")
print(result.status, [(p.name, p.args) for p in result.pending])
reason = "Rome is fully booked tonight"
result = await agent.resume(result, deny={p.id: reason for p in result.pending})
print(result.status, "|", result.output)"""),
        ("md", """## A client-side tool
`ask_user` has no Python body: the run pauses until the person (or code) gives the answer. The model
writes the question itself (a 135M model's question may be odd); your answer goes back to it as the
tool's result."""),
        ("code", """result = await agent.run("Use the ask_user tool to ask my name.", thread="names")
print(result.status, [(p.name, p.reason, p.args) for p in result.pending])
if result.pending:
    result = await agent.resume(result, results={p.id: "Ada" for p in result.pending})
print(result.status, "|", result.output)"""),
        ("md", """## Resumed after a kernel restart
The run below pauses and is stored in SQLite (`./.nbagent/threads.db`). Restart the kernel now if you
like, run the setup and tool cells again, then the cell after it: a *new* agent object finds the pending
call in the store and continues — the tool that needs approval has not run, and nothing runs twice."""),
        ("code", """paused = await agent.run("Use the book_table tool for Rome.", thread="after-restart")
print(paused.status, [p.name for p in paused.pending])"""),
        ("code", """fresh = Agent(model, tools=[get_weather, book_table, ask_user])      # as after a restart
waiting = await fresh.pending("after-restart")
print([(p.name, p.args) for p in waiting])
if waiting:
    done = await fresh.resume(thread="after-restart", approve=waiting)
    print(done.status, "|", done.output)"""),
        ("code", """# The view of a stored thread: its history, tool rows and any waiting buttons.
fresh.chat(thread="after-restart")"""),
    ],
    "03_token_costs.ipynb": [
        ("md", """# Token usage and cost

Every model call is a row — tokens (input, cached, output, reasoning), latency, finish reason and
cost — that you can group, plot and export with pandas, for what you ask about: a run, an agent's
threads, or everything stored."""),
        ("code", SETUP),
        ("code", """import pandas as pd


@tool
def get_weather(city: str) -> str:
    \"\"\"Current weather for a city.\"\"\"
    return f"Sunny, 22 °C in {city}"


# Prices in USD per million tokens. Known models (gpt-4.1-mini, ...) are priced by
# genai-prices; the local model has no price, so we give it one to have something to look at.
agent = Agent(model, tools=[get_weather], settings={"max_tokens": 120},
              prices={"local-model": {"input": 0.15, "cache_read": 0.075, "output": 0.60}})
for city in ["Paris", "Rome", "Oslo"]:
    result = await agent.run(f"Use the get_weather tool for {city}.", thread=f"weather-{city}")
    print(city, result.status, result.usage.total_tokens, "tokens")"""),
        ("md", """## This agent's model calls
`usage_frame(agent)` reads the threads this agent ran — the three above — not those of the other
notebooks that share the folder's store (`./.nbagent/threads.db`); `usage_frame(agent.store)` reads
every stored thread. Each run made two model calls: one asking for the tool, one answering."""),
        ("code", """usage = nbagent.usage_frame(agent)
usage[["thread", "step", "input_tokens", "cache_read_tokens", "output_tokens", "cost_total"]]"""),
        ("code", """columns = ["input_tokens", "output_tokens", "cost_total"]
by_thread = usage.groupby("thread", observed=True)[columns].sum()
# readable() shows the costs in dollars; by_thread itself keeps its numbers.
nbagent.dataframe.readable(by_thread)"""),
        ("md", "## Runs\nA follow-up in `weather-Paris` is a second run of that thread; `runs_frame` has one row per run, with how each ended."),
        ("code", """await agent.run("Use the get_weather tool for Berlin.", thread="weather-Paris")
nbagent.runs_frame(agent)[["thread", "status", "steps", "total_tokens", "cost_total",
                           "wall_s"]]"""),
        ("code", """nbagent.tool_calls_frame(agent)[["thread", "step", "tool", "status", "decision", "duration_s"]]"""),
        ("md", """## Plots
Cost per tool (the cost of the model call that read each tool's result; the calls that read none,
here the ones asking for the tool, are a bar of their own), and cumulative tokens per thread (a line
per thread, by step)."""),
        ("code", """from nbagent.dataframe import plot_cost, plot_tokens

plot_cost(agent, by="tool");"""),
        ("code", """usage = nbagent.usage_frame(agent)
plot_tokens(usage);"""),
        ("md", "## A batch over a DataFrame\nIndependent conversations, run concurrently with a progress bar; failures stay in their row; a re-run skips rows already done."),
        ("code", """cities = ["Cairo", "Kyiv", "Lisbon"]
questions = pd.DataFrame({"question": [f"Use the get_weather tool for {c}." for c in cities]})
answers = agent.map(questions["question"], concurrency=2)
answers[["input", "status", "output", "output_tokens", "cost", "duration_s"]]"""),
        ("md", "## Budgets\nThe budget is checked before each model call, against the tokens the run has used so far: once they reach it, the run stops gracefully (status `stopped`, with the reason) instead of making the next call. The first call always goes out (its size is known only from its answer), so a run can end above its budget by one call: below, 50 tokens are allowed, the first call takes a few hundred, and the second call is not made."),
        ("code", """thrifty = Agent(model, tools=[get_weather], token_budget=50, settings={"max_tokens": 60})
result = await thrifty.run("Use the get_weather tool for Paris.")
print(result.status, result.stop_reason, result.usage.total_tokens)"""),
        ("code", """usage.to_csv("usage.csv", index=False)
print(open("usage.csv").readline())"""),
    ],
    "04_state_and_history.ipynb": [
        ("md", """# State, threads and history

Tools that build up state (an order), a conversation kept by thread id, the checkpoints of a thread,
and a fork to try another path from an earlier step."""),
        ("code", SETUP),
        ("code", """from pydantic import BaseModel
from nbagent import RunContext


class Order(BaseModel):
    items: list[str] = []


@tool
def add_item(ctx: RunContext[Order], item: str) -> str:
    \"\"\"Add an item to the order.\"\"\"
    ctx.state.items.append(item)
    return f"order now: {ctx.state.items}"


agent = Agent(model, tools=[add_item], state_type=Order, settings={"max_tokens": 120})
coffee = await agent.run("Use the add_item tool for coffee.", thread="order-7", state=Order())
print(coffee.status, coffee.state)"""),
        ("md", "A second message in the same thread: the order comes back from the store, and the model adds a croissant."),
        ("code", """result = await agent.run("Use the add_item tool for a croissant.", thread="order-7")
print(result.state)
print(result.output)"""),
        ("md", "`agent.threads()` lists this agent's threads (threads of other notebooks in the same store are not its own)."),
        ("code", """for info in await agent.threads():
    print(info.thread, info.messages, info.status, repr(info.title))"""),
        ("md", "Each checkpoint is one write to the store: the step (model calls so far), the messages, the tokens so far and the last message."),
        ("code", """history = await agent.checkpoints("order-7")
for c in history:
    print(c.step, c.messages, c.input_tokens, c.output_tokens, c.last_message)"""),
        ("md", """## Fork
Copy the thread up to step 2 — the coffee added and answered, and the next request — with that
request changed to tea, and continue the copy from there. The order object is not copied, so we
pass the order as it was then: the first run's state. The copy gets a new id (each fork another
one, so Run All can be run again). The original thread is unchanged."""),
        ("code", """alt = await agent.fork("order-7", at_step=2, edit="Use the add_item tool for tea.")
result = await agent.resume(thread=alt, state=coffee.state.model_copy(deep=True))
print(alt, result.state)"""),
        ("code", """for thread in ["order-7", alt]:
    print(thread, "->", (await agent.checkpoints(thread))[-1].last_message)"""),
        ("code", """agent.chat(thread=alt)"""),
    ],
    "05_structured_output.ipynb": [
        ("md", """# Structured answers, into DataFrame columns

`Agent(model, output_type=Weather)` makes each answer a validated `Weather` object: the model answers
by calling a `final_result` tool whose parameters are the model's fields (it works with any model that
calls tools — even the tiny bundled one). Over a column of texts, `agent.map` turns free text into
columns you can analyse with pandas."""),
        ("code", SETUP),
        ("code", """import pandas as pd
from pydantic import BaseModel, Field


class Weather(BaseModel):
    city: str
    temperature_c: int = Field(description="temperature in degrees Celsius")


agent = Agent(model, output_type=Weather, settings={"max_tokens": 120})
result = await agent.run("It is 21 degrees in Paris. Report the weather for Paris.")
print(result.status, repr(result.output))"""),
        ("md", "The *shape* is always right: `result.output` is a `Weather`, validated (an invalid answer goes back to the model to fix). The *values* are the model's: a small model may get one wrong."),
        ("code", """reports = pd.DataFrame({"report": [
    "Rome: 24 degrees and sunny.",
    "Oslo is at 3 degrees today.",
    "Cairo, 35 degrees.",
]})
answers = agent.map(reports["report"] + " Report the weather.", concurrency=2)
answers[["input", "status", "output", "error"]]"""),
        ("md", "Check the values against the reports: the tiny local model reads most of them right, not all. A row it misses entirely (it answers in text) says why in `error` and stays `failed`; a re-run retries only those. A real model gets them all."),
        ("code", """reports.join(nbagent.output_frame(answers))     # one column per field of Weather"""),
        ("md", """## Images in the prompt

A prompt can be a list of text and images (a matplotlib figure, a PIL image, PNG/JPEG bytes...). A
vision model (e.g. `gpt-4.1-mini` with `OPENAI_API_KEY` set) describes the chart; the bundled model
is text-only, and the server refuses at once — the run fails with a clear error, without retrying."""),
        ("code", """import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(4, 2.5))
ax.plot(["Rome", "Oslo", "Cairo"], [24, 3, 35], marker="o")
ax.set_ylabel("°C")
plt.close(fig)

looker = Agent(model, settings={"max_tokens": 120})
looked = await looker.run(["What does this chart show?", fig])
print(looked.status, looked.output or looked.error)"""),
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
    if last.kind == "user":             # step 1: call the tool for the city asked
        city = last.content.rsplit(" ", 1)[-1].rstrip(".?")
        return tool_call(info.tools[0]["name"], city=city)
    return f"Done: {last.content}"      # step 2: answer with the tool's result


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

cluster = LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                       dashboard_address=None, silence_logs=logging.ERROR)
client = Client(cluster)
print(len(client.nthreads()), "workers")'''),
        ("md", """## The batch
`concurrency` caps the rows running at once across all workers (here 2 chunks in flight, 2 rows
each): 8 rows of two 0.3 s steps need 1.2 s of model time. The first batch also waits while each
worker loads nbagent and the agent, so its bar reads a few seconds. The result is the DataFrame
of the local path, in input order, with the Series' index."""),
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
booked = booker.map(["Book a table in Rome.", "Book a table in Oslo."],
                    executor=client, concurrency=2)
booked[["status", "error"]]'''),
        ("code", '''for thread in booked.loc[booked["status"] == "paused", "thread"][:1]:
    done = booker.resume_sync(thread=thread, always_allow=["book_table"])   # approve, here
    print(done.status, done.output)'''),
        ("md", """The same batch again runs nothing: the row decided above reads completed, the other still
waits for a decision (both `skipped`: read from the store)."""),
        ("code", '''rerun = booker.map(["Book a table in Rome.", "Book a table in Oslo."],
                   executor=client, concurrency=2)
rerun[["status", "skipped", "output"]]'''),
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
        ("md", """## Half price: the provider's batch API
OpenAI's Batch API and Anthropic's Message Batches answer within 24 hours at half the price.
`batch_api=True` sends the rows through them, tools and all: one batch per agent step across all
rows (a *round*), the tools run here between the rounds, and the batch ids are kept in the store,
so the same call after a restart collects them and submits nothing twice. When a batch is worth
it (rows × steps × the 24-hour window): docs/batch_api.md.

Here the provider is a stand-in on this machine: the loopback batch server of nbagent's tests
(`tests/wire/batch_server.py` in the source checkout), where every batch ends at its second look.
With a key, use `OpenAIModel("gpt-4o-mini")` or `AnthropicModel("claude-sonnet-4-5")` instead."""),
        ("code", '''import subprocess
import sys
from pathlib import Path

import nbagent
from nbagent.models.openai import OpenAIModel

stand_in = Path(nbagent.__file__).resolve().parents[1] / "tests" / "wire" / "batch_server.py"
server = subprocess.Popen([sys.executable, str(stand_in), "--polls", "1"], stdout=subprocess.PIPE, text=True)
port = server.stdout.readline().split()[1]

batch_model = OpenAIModel("gpt-4o-mini", base_url=f"http://127.0.0.1:{port}/v1", api_key="stand-in")
halves = Agent(batch_model, tools=[get_weather], store="cluster-batch.db")
halved = halves.map(cities, batch_api=True, poll_s=0.2)     # a progress bar per round
halved[["status", "output", "steps", "cost"]]'''),
        ("md", """Two rounds, one batch each: every row's tool call, then its answer. Each step is the thread's
usual step (its commit, its usage row), marked `batch` and priced at the batch price: for
gpt-4o-mini, 0.075 / 0.30 USD per million input / output tokens instead of 0.15 / 0.60."""),
        ("code", '''usage = nbagent.usage_frame(halves)
print(len(usage), "model calls, all through a batch:", usage["batch"].all())
print("cost:", nbagent.usage.usd(usage["cost_total"].sum()))'''),
        ("md", """## Submit now, collect later
`wait=False` submits and returns at once: a row whose request is in a batch reads `submitted` (or
`in_progress`, a batch an earlier call submitted). Each later call takes what ended, runs the
tools, submits the next round and returns again, so you run the cell again to collect (after a
kernel restart too: the batch ids are in the store)."""),
        ("code", '''for attempt in range(3):
    later = halves.map(["Rome", "Kyiv"], batch_api=True, wait=False)
    print(later["status"].tolist(), later["steps"].tolist())'''),
        ("code", '''server.terminate()
server.wait(10)
server.stdout.close()'''),
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

notes = MCPTools.stdio(sys.executable, ["-m", "nbagent.mcp.examples.notes"],
                       env={"NOTES_DB": "notes.db"})
# Listing connects now (otherwise: when a run first needs the tools).
for t in await notes.list_tools():
    print(f"{t.name:12} needs approval: {str(t.requires_approval):5}  {t.description}")
notes'''),
    ("code", '''agent = Agent(model, tools=[notes], settings={"max_tokens": 200})
view = agent.chat(thread="notes")
view'''),
    ("md", """## A write waits for you
`add_note` is not marked read-only, so the run pauses with the call and the arguments the model chose;
in the view above its row has **Approve / Deny / Edit**. You see the arguments before anything is
written: check them (a small model may change a title or a text; **Edit** fixes them)."""),
    ("code", '''handle = view.ask('Call add_note with title "milk" and text "buy 2 litres".')
paused = await handle
print(paused.status, [(p.name, p.args) for p in paused.pending])
assert paused.status == "paused", paused.error
assert [p.name for p in paused.pending] == ["add_note"]'''),
    ("md", """**Your turn:** the `add_note` row above waits. Click **Approve**: the call runs on the server,
once. (Run All leaves it waiting for you.)

## The same in code
A decision in code is the same decision. Here on a conversation of its own, so the call in the view
keeps waiting for your click."""),
    ("code", '''paused = await agent.run('Call add_note with title "milk" and text "buy 2 litres".',
                         thread="notes-in-code")
print(paused.status, [(p.name, p.args) for p in paused.pending])
done = await agent.resume(paused, approve=paused.pending)
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


OFFLINE_UNSET = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OLLAMA_MODEL")
"""Variables that would make `nbagent.models.auto` pick a hosted model: unset when executing."""


NOTEBOOKS["09_evals_and_forecasts.ipynb"] = [
    ("md", """# Evals, a comparison of two models, and a forecast

Is the agent right on many questions, which model should it use, and what will a batch cost?
Each answer is a DataFrame: `agent.evaluate` scores the answers to a cases frame,
`nbagent.compare` puts two models side by side, and `agent.estimate` forecasts a batch from a
sample of its rows before it runs (docs/evals.md).

Without a key the model is the bundled SmolLM2-135M, which knows these capitals; the stand-in of
the comparison shows what wrong answers score. With `OPENAI_API_KEY` or `ANTHROPIC_API_KEY` set,
the same cells score a real model."""),
    ("code", SETUP),
    ("md", "## Evaluate\nA cases frame: an `input` column and the `expected` answer. Each evaluator is a score column."),
    ("code", '''import pandas as pd
from nbagent import evals

cases = pd.DataFrame({
    "input": ["What is the capital of France?", "What is the capital of Japan?",
              "What is the capital of Italy?"],
    "expected": ["Paris", "Tokyo", "Rome"],
})


# Any function (output, expected, row) -> bool | float | dict is an evaluator.
def brief(output, expected, row):
    return len(output) <= 200


agent = Agent(model, system="Answer in one short sentence.", settings={"max_tokens": 40})
report = agent.evaluate(cases, evaluators=[evals.contains(), brief], concurrency=1)
print(report.frame[["input", "output", "contains", "brief"]].to_string(max_colwidth=60))'''),
    ("md", """A row per evaluator: the mean and pass rate over the scored cases, how many were scored,
how often the evaluator itself failed (`errors`), and `not_run`, the cases whose run did not
complete (failed, stopped, paused): those are not scored, since a model that was down did not
answer wrongly. `report.totals()` is the runs' side: cases, cost, latency."""),
    ("code", '''print(report.summary())
print(report.totals().to_string())'''),
    ("md", """## Compare two models

The same cases through the model and a stand-in that always answers "Paris": one wide frame,
one column group per model. `frame.view()` shows the answers side by side.

The model's copy is the agent that `evaluate` ran above, on the same cases, so `compare` does
not ask it again: its column holds the answers `evaluate` stored, with their stored cost and
latency, and the view says "reused 3 stored answers" under its name (pass `thread_prefix="..."`
for fresh runs). The stand-in's answers are new."""),
    ("code", '''from nbagent.models import FunctionModel

stand_in = FunctionModel(lambda messages, info: "Paris.", model_name="always-paris")
frame = nbagent.compare(cases, agent=agent, models=[model, stand_in],
                        evaluators=[evals.contains()], concurrency=1)
print(frame.xs("contains", axis=1, level="field").mean().round(2).to_dict())
frame.view(width=120)'''),
    ("md", """## A forecast before spending

`agent.estimate` runs a sample of the rows and forecasts the whole batch: tokens, cost (low, mid,
high) and time at the batch's concurrency. The sampled rows are the batch's own, so the real run
skips them: the table shows all the rows, and beside them the rows still to run, whose time is
what the next cell waits for (its progress bar counts the skipped rows apart)."""),
    ("code", '''colours = ["red", "yellow", "green", "orange", "purple", "brown"]
rows = [f"Name a fruit that is {colour}." for colour in colours]
forecast = agent.estimate(rows, sample=2, concurrency=1)
forecast'''),
    ("code", '''import time

started = time.perf_counter()
answers = agent.map(rows, concurrency=1)
took = time.perf_counter() - started
print("forecast tokens:", forecast.input_tokens, "+", forecast.output_tokens)
print("real tokens:    ", answers["input_tokens"].sum(), "+", answers["output_tokens"].sum())
print("sampled rows skipped:", int(answers["skipped"].sum()))
left = forecast.remaining
print(f"the {left.rows} rows still to run: forecast ~{left.wall_s:.1f}s, took {took:.1f}s")'''),
]

NOTEBOOKS["10_long_sessions.ipynb"] = [
    ("md", """# A long session: the context gauge, a compaction and the X-ray

A session with a DataFrame tool fills a model's context window in a few turns. nbagent shows how
full the window is (`result.context`, the view's footer), cuts long results to fit it without
losing them, and compacts old turns into a summary before the provider refuses the request
(docs/context.md).

The long session's model is a stand-in (`FunctionModel`) with a 2,000-token window, so that thirty
turns take a second and fill the window several times; it asks for the sales of the store each
message names, then answers. The last cell gives the same tool to the model `auto()` picks (the
bundled local model without a key; Claude or OpenAI with one) and shows its gauge: a 128k window
takes a few hundred such turns to fill."""),
    ("code", SETUP),
    ("code", '''import pandas as pd

from nbagent import Compaction
from nbagent.models import FunctionModel, tool_call


@tool
def get_sales(store: int) -> pd.DataFrame:
    """The sales of one store: a row a day for a year.

    Args:
        store: the store's number, e.g. 3.
    """
    days = pd.date_range("2026-01-01", periods=365).strftime("%Y-%m-%d")
    amounts = [round(17.5 * (i % 40) + store, 2) for i in range(365)]
    return pd.DataFrame({"day": days, "store": store, "amount": amounts})


def stand_in(messages, request):
    """A stand-in for a model: calls get_sales for the store the user names, then answers;
    asked for a summary (a request without tools), writes one."""
    if not request.tools:
        return "Summary: the user reviews each store's daily sales for 2026, one store a turn."
    last = messages[-1]
    if last.kind == "user":
        return tool_call("get_sales", store=int(last.content.split()[-1].rstrip(".")))
    return f"Here are the sales of store {last.content.split()[5]}: 365 days."


analyst = Agent(FunctionModel(stand_in, context_window=2_000), tools=[get_sales],
                system="You review the sales of our stores.",
                compaction=Compaction(at=0.7, keep_last=4))
thread = None
for store in range(1, 31):
    result = await analyst.run(f"Show me the sales of store {store}.", thread=thread)
    thread = result.thread
    if store % 5 == 0:
        print(f"turn {store:2}: {result.status}, {result.context}")'''),
    ("md", """## The gauge

`result.context` is the size of the last request the run sent: the provider's count (here the
stand-in's), the window, and the tokens by part, which add up to the count. The chat view's
footer shows the same gauge after each model call, with this breakdown on hover; it turns amber
once a request passes the compaction threshold."""),
    ("code", '''print(result.context.describe())'''),
    ("code", '''analyst.chat(thread=thread)'''),
    ("md", """## The compactions

Each time the next request would have passed 70 % of the window, the older turns were replaced
*in the request* by one summary. The thread keeps every message: the compaction is a record of its
own, and the summary's model call is a usage row with `purpose="compaction"`. Each result the model
read was cut to a tenth of the window (head and tail); the stored message keeps it whole."""),
    ("code", '''records = [m for m in result.messages if m.kind == "compaction"]
for record in records[:3]:
    print(record.describe())
kept = sum(m.kind == "user" for m in result.messages)
print(len(records), "compactions;", kept, "user messages kept")
cut = next(m for m in result.messages if m.kind == "tool-result")
print(f"the model read {len(cut.content):,} of {len(cut.whole_text):,} characters"
      " of the first table")'''),
    ("md", """## The X-ray

`nbagent.context_frame` has one row per model call, compaction summaries included, with the
tokens of each part of its request: the tool results pile up turn after turn, and fall back
after each compaction. `plot_context` draws it as stacked bars, the summaries hatched, the window
a dashed line."""),
    ("code", '''frame = nbagent.context_frame(analyst)
# The calls around the first compaction:
first = frame.index[frame["purpose"] == "compaction"][0]
parts = ["system", "tools", "history", "tool_results", "latest"]
frame.loc[first - 2 : first + 2, ["step", "purpose", "input_tokens", *parts]]'''),
    ("code", '''from nbagent.dataframe import plot_context

plot_context(frame);'''),
    ("md", """## With your model

The same tool, the model `auto()` picked, its real window and its own count of the request."""),
    ("code", '''agent = Agent(model, tools=[get_sales], settings={"max_tokens": 60}, compaction=Compaction())
result = await agent.run("Use the get_sales tool for store 3.")
print(result.status, result.context)'''),
]

NOTEBOOKS["08_notebook_as_context.ipynb"] = [
    ("md", """# The notebook as context

Ask about a DataFrame without pasting it: `%%agent` sends `{df}` as a capped summary (shape,
dtypes, `head(5)`, `describe()`, null counts), `@df` in the chat view attaches it as a chip, and
`dataframe_tools` lets a model query it with typed, read-only tools. When the model should run
code, `python_tool()` runs it in this kernel, after you approve it (docs/notebook.md).

Without a key the model is the bundled SmolLM2-135M: its answers about the table do not matter
here. What this notebook shows is what is *sent*, which is the same for every model. The tool
calls are made by scripted stand-ins (`FunctionModel`), so their results are the same every run."""),
    ("code", SETUP),
    ("code", '''import pandas as pd

df = pd.DataFrame({
    "region": ["North", "South", "North", "East", "South", "East", "North", "West"],
    "product": ["tea", "coffee", "coffee", "tea", "tea", "coffee", "tea", "coffee"],
    "units": [12, 7, 30, 5, 18, 22, 9, 14],
    "price": [3.5, 4.0, 4.0, 3.5, 3.5, 4.0, 3.5, 4.0],
})
df'''),
    ("md", """## `%%agent`: the cell is the prompt

`%load_ext nbagent` registers the magics. `{df}` in the prompt becomes the frame's summary, never
the whole object, cut to a tenth of the model's window (2,000 tokens when the window is unknown).
The answer streams into the chat view under the cell; `--agent analyst` runs on that agent. Its
`max_tokens` of 40 keeps answers short: one cut there ends mid-sentence, and the view's footer
says "answer cut off at the output token limit"."""),
    ("code", '''%load_ext nbagent
analyst = Agent(model, settings={"max_tokens": 40})'''),
    ("code", '''%%agent --agent analyst
Which region sold the most units? {df}'''),
    ("md", """## What was sent

The run is a background task behind the view; wait for it, then read the user message the thread
recorded: exactly what the model saw. `nbagent.notebook.interpolate` is what the magic calls, so
you can see a prompt's text before sending it."""),
    ("code", '''from nbagent.notebook import cap_for, interpolate, magics_of

result = await magics_of(get_ipython()).last.wait()
first_thread = result.thread
sent = [m.content for m in result.messages if m.kind == "user"][-1]
print(f"cap: {cap_for(model)} tokens; sent {len(sent):,} characters, not the frame itself")
print(sent)
again = interpolate("Which region sold the most units? {df}", globals(), cap=cap_for(model))
print("same as interpolate():", sent == again)'''),
    ("md", """## A follow-up, and `--new`

A follow-up cell continues the same thread; `--new` starts another. (A line that ends with `?`
is IPython's help: end a `%agent` line with a period.) `{Out[n]}` is cell *n*'s result
(the number left of the cell; `{In[n]}` its source, `{Err}` the last exception a cell raised). The
next cells use an `echo` stand-in that answers with the message it received, so you see what
`{Out[n]}` sends."""),
    ("code", '''%agent --agent analyst Now name the product that sold the most units.'''),
    ("code", '''result = await magics_of(get_ipython()).last.wait()
asked = sum(m.kind == "user" for m in result.messages)
print("same thread:", result.thread == first_thread, "|", asked, "user messages")'''),
    ("code", '''from nbagent.models import FunctionModel

echo = Agent(FunctionModel(lambda messages, info: messages[-1].content, model_name="echo"))
totals = df.groupby("region")["units"].sum()
totals'''),
    ("code", '''%agent --agent echo --new Explain these totals: {Out[8]}'''),
    ("code", '''result = await magics_of(get_ipython()).last.wait()
print(result.output)'''),
    ("md", """A name that is no variable (a typo: `{totls}`) is sent as written, and a one-line warning
under the cell names it (`{{totls}}` sends literal braces without a warning)."""),
    ("code", '''%agent --agent echo What were the {totls} again.'''),
    ("md", """## `@df` in the chat view

In `agent.chat()`'s message box, typing `@` offers the kernel's variables with their types and
shapes, data first (agents, views and results after it), and says how many more match than it
shows; `@df` attaches `df` as a chip above the box. Click the chip to read the exact text that will
be sent with your message (the same capped summary). Below, the box is filled in code; type in it
yourself to see the completions."""),
    ("code", '''view = analyst.chat(thread="at-df")
view.message_box.value = "Which region sold the most? @df"
print([chip.description for chip in view.attachments.chips.children])
print(view.attachments.text_of("df").splitlines()[0])
view'''),
    ("md", """## Read-only tools over the frame

`dataframe_tools(df, name="sales")` gives six typed tools, named with the prefix: the model asks
structured questions, no code runs, and none needs approval. Called directly, a tool returns what
the model would read."""),
    ("code", '''from nbagent.notebook import dataframe_tools

sales_tools = dataframe_tools(df, name="sales")
print([t.name for t in sales_tools])
by_name = {t.name: t for t in sales_tools}
print(by_name["sales_groupby_agg"](by="region", column="units", agg="sum"))'''),
    ("md", "In a run, a stand-in model filters the rows, then answers from the tool's result."),
    ("code", '''from nbagent.models import tool_call


def asks_for_tea(messages, info):          # a stand-in for a model: one filter, then an answer
    if messages[-1].kind == "user":
        return tool_call("sales_filter", conditions=[
            {"column": "product", "op": "==", "value": "tea"},
            {"column": "units", "op": ">=", "value": 10}])
    return "Two tea sales had 10 units or more."


tea_agent = Agent(FunctionModel(asks_for_tea), tools=sales_tools)
result = await tea_agent.run("Which tea sales had 10+ units?")
print(result.messages[2].content)
print(result.output)'''),
    ("md", """## Code in the kernel, after approval

`python_tool()` runs the model's Python in this kernel, with your variables. **Approving code is
approving code**: it runs with the kernel's full rights. Every call waits for you by default: the
row in the view below shows the code with **Approve / Deny / Edit**. Here a stand-in writes the
code, so you know what you are approving."""),
    ("code", '''from nbagent.notebook import python_tool


def writes_code(messages, info):           # a stand-in for a model: writes code, then answers
    last = messages[-1]
    if last.kind == "user":
        code = 'best = df.groupby("region")["units"].sum().idxmax()\\nbest'
        return tool_call("python", code=code)
    if last.status == "denied":
        return "You denied the code, so nothing ran and I have no answer: approve it, or ask another way."
    if last.is_error:
        return f"The code failed: {last.content}"
    return f"The best region is {last.content}."


coder = Agent(FunctionModel(writes_code), tools=[python_tool(timeout=10)])
code_view = coder.chat(thread="code-in-view")
code_view'''),
    ("code", '''paused = await code_view.ask("Which region sold the most units?")
print(paused.status, [(p.name, p.args["code"]) for p in paused.pending])'''),
    ("md", """**Your turn:** the `python` row above waits with **Approve / Deny / Edit**. Click **Approve**:
the code runs once, in this kernel. Click **Deny** instead, and nothing runs: the stand-in answers
that it has no result. (Run All leaves it waiting for you.)

## The same approval in code

For CI and scripts: a conversation of its own, approved in code, so the row above keeps waiting."""),
    ("code", '''paused = await coder.run("Which region sold the most units?", thread="code-approved-in-code")
done = await coder.resume(paused, approve=paused.pending)
print(done.status, "|", done.output, "| best =", best)'''),
    ("md", "Denied, the code never runs, and the model is told so: the stand-in answers without a result."),
    ("code", '''paused = await coder.run("Which region sold the most units?", thread="code-denied-in-code")
refused = await coder.resume(paused, deny={paused.pending[0].id: "not on this data"})
print(refused.status, "|", refused.output)'''),
]


NOTEBOOKS["11_sub_agents.ipynb"] = [
    ("md", """# Sub-agents: an agent as a tool of another

A boss agent hands a question to a researcher agent, which reads the notes and wants to delete a
stale copy. The researcher is a **sub-agent** (`Agent(agents=[researcher])`, the same as
`tools=[researcher.as_tool()]`): its steps show under the boss's call, its approval waits in
**this** cell, and its cost counts in the boss's run (docs/subagents.md).

The two agents' models are stand-ins (`FunctionModel`) that do what each prompt asks, so the tree
runs the same way every time; the last cells give a sub-agent the model `auto()` picks (the bundled
local model without a key; Claude or OpenAI with one)."""),
    ("code", SETUP),
    ("code", '''from nbagent.models import FunctionModel, tool_call

NOTES = {"tides": "Tides follow the moon.", "fog": "Fog lifts by noon."}


@tool
def read_note(topic: str) -> str:
    """The note about a topic."""
    return NOTES.get(topic, "no note")


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def research(messages, request):
    """The researcher's stand-in: read the topic's note, ask to delete its stale copy, report."""
    last = messages[-1]
    if last.kind == "user":
        topic = last.content.split()[-1]
        return [tool_call("read_note", topic=topic), tool_call("delete_file", path=f"/tmp/{topic}.old")]
    return " ".join(m.content for m in messages if m.kind == "tool-result")


def lead(messages, request):
    """The boss's stand-in: hand the question to the researcher, then answer with its report."""
    last = messages[-1]
    if last.kind == "user":
        return tool_call("researcher", task=last.content)
    return f"My researcher reports: {last.content}"


researcher = Agent(FunctionModel(research), tools=[read_note, delete_file], name="researcher")
boss = Agent(FunctionModel(lead), agents=[researcher], name="boss")
print(boss.tools)'''),
    ("md", """## The tree in the view

The boss's call of `researcher` is one row of its tool table. Under it, collapsed (**▸ steps of
researcher**), are the researcher's own steps: its tool rows and its answer. Its `delete_file`
waits for you here, in the top cell, labelled **researcher → delete_file**, with Approve, Deny and
Edit, and the steps it waits in opened down to it. The footer counts both agents."""),
    ("code", '''view = boss.chat()
view'''),
    ("code", '''paused = await view.ask("Research tides")
print(paused.status, [(p.label, p.args) for p in paused.pending])'''),
    ("md", """Run All leaves that call waiting for you: Approve runs `delete_file` once, the researcher
answers, then the boss does. The researcher's thread is stored with the boss's (its id is the
boss's thread and the call's id), so after a kernel restart a new view of the boss's thread shows
the same tree and the same buttons.

## The same approval in code

For CI and scripts: a conversation of its own, approved in code. The waiting call has an id that is
unique in the tree (the boss's call id, `/`, the researcher's) and its `path`."""),
    ("code", '''paused = await boss.run("Research fog", thread="fog-in-code")
[p] = paused.pending
print(p.id.count("/"), p.path, p.label)
done = await boss.resume(paused, approve=[p])
print(done.status, "|", done.output)'''),
    ("md", "Denied, the file stays, and the reason reaches the researcher's model (here its report)."),
    ("code", '''paused = await boss.run("Research tides", thread="tides-denied")
refused = await boss.resume(paused, deny={paused.pending[0].id: "keep the old copy"})
print(refused.output)'''),
    ("md", """## Cost per agent

The boss's `result.usage` holds the whole tree's model calls; each usage row says whose it is
(`agent`, `depth`) and which call of its parent ran it (`parent_call_id`), and carries its own
thread. The frame's sums and `result.usage` agree to the token, and so do the budgets
(`token_budget`, `cost_budget` count the tree)."""),
    ("code", '''frame = nbagent.usage_frame(done)
frame[["agent", "depth", "parent_call_id", "thread", "input_tokens", "output_tokens"]]'''),
    ("code", '''print(frame.groupby("agent", observed=True)[["input_tokens", "output_tokens"]].sum())
print("frame:", int(frame.input_tokens.sum() + frame.output_tokens.sum()), "tokens | result.usage:",
      done.usage.total_tokens, "tokens")'''),
    ("md", """## The summary

`display(result)` shows the researcher's run as a closed section under the boss's call (open it to
see its steps), also on GitHub and nbviewer."""),
    ("code", "done"),
    ("md", """## With your model

A sub-agent on the model `auto()` picked: a forecaster with a weather tool, asked by a planner
stand-in. Its steps, tokens and cost join the planner's run the same way."""),
    ("code", '''@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny, 22 °C in {city}"


forecaster = Agent(model, tools=[get_weather], name="forecaster", settings={"max_tokens": 120})


def ask_forecaster(messages, request):
    last = messages[-1]
    if last.kind == "user":
        return tool_call("forecaster", task="Use the get_weather tool for Paris.")
    return f"The forecaster says: {last.content}"


planner = Agent(FunctionModel(ask_forecaster), agents=[forecaster], name="planner")
trip = await planner.run("What is the weather for my trip?")
print(trip.status, "|", sorted({(row.agent, row.depth) for row in trip.usage.calls}))
print(trip.output)'''),
]


NOTEBOOKS["12_guardrails.ipynb"] = [
    ("md", """# Guardrails: rules that hold whatever the model does

Guards (`nbagent.guards`) check the **prompt** before any model call, a tool call's **arguments**
before anyone is asked to approve it, a tool's **result** before the model or the store read it, and
an **answer** before a word of it is shown. Each returns allow, `block(reason)`, `rewrite(value)` or
(answers only) `retry(message)`; a guard that fails blocks (docs/guards.md).

The support desk below runs on a stand-in model (`FunctionModel`) so that every guard trips on
cue; the last cell puts `pii()` in front of the model `auto()` picks (the bundled local model
without a key; Claude or OpenAI with one)."""),
    ("code", SETUP),
    ("code", '''import asyncio

from nbagent.guards import Guard, block, pii
from nbagent.models import FunctionModel, tool_call

SENT = []


@tool
def send_email(to: list[str], body: str) -> str:
    """Send an email."""
    SENT.append((to, body))
    return f"sent to {len(to)} people"


@tool
def lookup_customer(name: str) -> str:
    """A customer's record."""
    return f"{name}: premium since 2021, jane.doe@example.com, card 4111 1111 1111 1111"


async def desk(messages, request):
    """A stand-in for a model: what each request asks for, on cue."""
    last = messages[-1]
    if last.kind == "tool-result":
        yield f"Done: {last.content}"
        return
    if "newsletter" in last.content:
        yield tool_call("send_email", to=[f"customer{i}@example.com" for i in range(250)], body="Spring sale!")
    elif "look up" in last.content:
        yield tool_call("lookup_customer", name="Jane Doe")
    else:
        for word in "Sure: the production key is sk-live-0a1b2c3d4e5f6g7h8i9j0k1l2m".split(" "):
            await asyncio.sleep(0.2)  # a slow answer, so the view shows it held
            yield word + " "


def no_internal_ids(text):
    return block("an internal ticket id") if "INT-" in text else None


def at_most_ten(args):
    return block(f"{len(args['to'])} recipients; at most 10 at once") if len(args["to"]) > 10 else None


support = Agent(FunctionModel(stream_function=desk), name="support", tools=[send_email, lookup_customer],
                guards=[Guard.input(no_internal_ids, name="ids"),
                        Guard.tool_args(at_most_ten, tools=["send_email"], name="mass-mail"),
                        *pii(stages=["tool_result"]),
                        *pii(stages=["output"], action="block", name="leaks")])'''),
    ("md", """## A prompt that never reaches a model

The input guard runs before anything else: no model call, no tool, no cost. The run stops, and the
prompt stays in the thread marked blocked: it is never sent, in this turn or a later one."""),
    ("code", '''result = await support.run("Close INT-4471 and tell the customer", thread="ids")
print(result.status, "|", result.guard_trip.describe())
print("model calls:", result.usage.requests)'''),
    ("md", """## A call blocked before approval

The model asks to email 250 customers. The tool-argument guard refuses before the call runs (and
before anyone would be asked to approve it); the model reads why, and the run goes on."""),
    ("code", '''result = await support.run("Send the newsletter", thread="newsletter")
[refused] = [m for m in result.messages if m.kind == "tool-result"]
print(refused.status, "|", refused.content)
print("emails sent:", len(SENT), "|", result.output)'''),
    ("md", """## A result redacted before the model reads it

`pii()` on tool results: the customer's email and card number are redacted before the model, the
store or the view see them."""),
    ("code", '''result = await support.run("Please look up Jane Doe", thread="lookup")
[record] = [m for m in result.messages if m.kind == "tool-result"]
print(record.content)'''),
    ("md", """## An answer held until its guards pass

With an output guard, a streamed answer is held back: the view shows **checking…** while the model
writes, then the text, or, as here, a red **blocked by leaks** label: not one word of the blocked
answer was ever shown or stored."""),
    ("code", '''view = support.chat(thread="key")
view'''),
    ("code", '''handle = view.ask("What is our API key?")
result = await handle
print(result.status, "|", result.guard_trip.describe())
print("stored:", [m.blocked for m in result.messages if m.kind == "assistant"])'''),
    ("md", """## The audit

Every check of a run, passed or not, is in `result.guard_checks` (also when a guard tripped):
guard, stage, verdict, reason, latency."""),
    ("code", '''import pandas as pd

pd.DataFrame([{"guard": c.guard, "stage": c.stage, "verdict": c.verdict, "reason": c.reason,
               "latency_ms": round(c.latency_s * 1000, 3)} for c in result.guard_checks])'''),
    ("md", """## With your model

`pii()` in front of the model `auto()` picked: the provider never reads the email address in the
prompt (it reads the redacted text), and the answer is checked before it is shown."""),
    ("code", '''guarded = Agent(model, guards=[*pii()], settings={"max_tokens": 60})
result = await guarded.run("Write one short welcome line for our new customer jane.doe@example.com")
print("the model read:", result.messages[0].content)
print([(c.guard, c.stage, c.verdict) for c in result.guard_checks])'''),
]

def build(name: str) -> nbformat.NotebookNode:
    """The notebook `name` from its cell sources, without outputs (stable cell ids)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for i, (kind, source) in enumerate(NOTEBOOKS[name]):
        cell = nbformat.v4.new_markdown_cell(source) if kind == "md" else nbformat.v4.new_code_cell(source)
        cell["id"] = f"{name[:2]}-{i:02d}"  # stable ids: regenerating gives no spurious diff
        nb.cells.append(cell)
    return nb


def execute(nb: nbformat.NotebookNode, workdir: Path, env: Mapping[str, str] | None = None,
            timeout: int = 600) -> nbformat.NotebookNode:
    """Run `nb` top to bottom in a fresh kernel started in `workdir`, offline (the bundled local
    model; the store is ``workdir/threads.db`` unless `env` names one), and return it with its
    outputs. `env`: more variables for the kernel.

    Live widgets are not kept: a widget's output is dropped with its plain-text stand-in (a saved
    notebook cannot bring the widget back, and JupyterLab would report "widget model not found"
    for each one; a chat view's saved copy follows as its own output); progress bars are off
    (their saved text would say 0%).
    """
    saved = dict(os.environ)
    try:
        for name in OFFLINE_UNSET:
            os.environ.pop(name, None)
        os.environ["NBAGENT_STORE"] = str(workdir / "threads.db")
        os.environ["TQDM_DISABLE"] = "1"
        os.environ.update(env or {})
        nb.cells.append(nbformat.v4.new_code_cell(_SETTLE))
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                                store_widget_state=False, coalesce_streams=True,
                                resources={"metadata": {"path": str(workdir)}})
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    if nb.cells and nb.cells[-1].source == _SETTLE:
        nb.cells.pop()
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            # a live view's output goes (clean_outputs' step): the chat view's saved copy, the
            # next output, is its one notice
            cell.outputs, _ = _without_views(cell.outputs)
    nb.metadata.pop("widgets", None)
    return nb


_SETTLE = "from nbagent.notebook import settle\nawait settle()  # the runs end; the views' saved copies reach this file"
"""A last cell, removed after the run: `nbagent.notebook.settle` waits until the runs started by
the cells above have ended and sends each chat view's saved copy again, as a reply to this cell
(nbclient reads only the replies to the cell it runs, and a view's copy changes when its run
ends, after the cell that showed it)."""


RECORDINGS = ROOT / "recordings"
"""Each notebook's model calls, recorded once on the local model: ``recordings/<stem>.jsonl``
(`NBAGENT_REPLAY` replays them, so the notebooks run offline without the model)."""

def record(name: str, workdir: Path, timeout: int = 600) -> int:
    """Run notebook `name` on the local model with every model call `auto()` gives recorded
    (``NBAGENT_RECORD=1``), and write the calls to ``recordings/<stem>.jsonl``; returns how many.
    The notebook itself is not written."""
    import asyncio

    from nbagent.models import export_recording
    from nbagent.store import SQLiteStore

    nb = build(name)
    execute(nb, workdir, env={"NBAGENT_RECORD": "1"}, timeout=timeout)  # auto() records every call
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    if errors:
        raise RuntimeError(f"{name} failed while recording: {errors[0].get('ename')}: {errors[0].get('evalue')}")
    RECORDINGS.mkdir(exist_ok=True)
    store, path = SQLiteStore(workdir / "threads.db"), RECORDINGS / (Path(name).stem + ".jsonl")
    try:
        count = export_recording(store, path)
    finally:
        asyncio.run(store.close())
    if count == 0:  # its model is not auto()'s here (07: the stand-in, on the workers): nothing to replay
        path.unlink()
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--execute", action="store_true", help="run each notebook and save its outputs")
    parser.add_argument("--record", action="store_true",
                        help="run each notebook on the local model and keep its model calls in recordings/")
    parser.add_argument("names", nargs="*", help="notebook file names (default: all)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(NOTEBOOKS))
    if unknown:
        parser.error(f"unknown notebooks {unknown}; known: {sorted(NOTEBOOKS)}")
    ROOT.mkdir(exist_ok=True)
    for name in args.names or list(NOTEBOOKS):
        if args.record:
            with tempfile.TemporaryDirectory(prefix="nbagent-notebook-") as tmp:
                print("recorded", record(name, Path(tmp)), "model calls of", name)
            continue
        nb = build(name)
        if args.execute:
            with tempfile.TemporaryDirectory(prefix="nbagent-notebook-") as tmp:
                execute(nb, Path(tmp))
        nbformat.write(nb, ROOT / name)
        print("wrote", ROOT / name, "(executed)" if args.execute else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
