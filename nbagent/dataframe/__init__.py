"""pandas at the edge: usage, tool calls and runs as DataFrames; plots; batch runs.

```python
import nbagent
result = agent.run_sync("Refund order 42")
nbagent.usage_frame(result)             # one row per model call of this run
nbagent.usage_frame(agent)              # every model call of the threads this agent ran
nbagent.usage_frame(agent.store)        # ... of every stored thread (other agents' too)
nbagent.tool_calls_frame(agent)         # one row per tool call, with approval decisions
nbagent.runs_frame([r1, r2])            # one row per run
nbagent.context_frame(agent)            # each request's tokens by part (docs/context.md)
nbagent.dataframe.plot_cost(agent, by="model")
nbagent.dataframe.readable(frame)       # show costs as $0.000200 (the values stay numbers)
answers = agent.map(df["question"], concurrency=8)
nbagent.output_frame(answers)           # structured answers (output_type) as columns
answers = agent.map(df["question"], batch_api=True)   # through the provider's batch API, half price
```

This package is the only place nbagent imports pandas (and numpy); the core never imports it,
and `import nbagent` stays light. matplotlib is imported by pandas when a plot is drawn, tqdm
when a batch shows its progress bar. Every frame exports with ``to_csv`` / ``to_parquet``
(categoricals and UTC datetimes round-trip through parquet with pyarrow).

Naming: these functions are for notebook cells. They block and return the DataFrame, in a cell
(where a loop runs) as in a script, and have one form each; from async code call
``await asyncio.to_thread(usage_frame, ...)``.
"""

from __future__ import annotations

from ._batch import batch, output_frame
from ._batch_api import cancel_batches
from ._columns import USAGE_SCHEMA, usage_from_columns
from ._context import CONTEXT_COLUMNS, context_frame, plot_context
from ._frames import (
    RUN_SCHEMA,
    TOOL_CALL_SCHEMA,
    runs_frame,
    tool_calls_frame,
    usage_frame,
)
from ._plots import cost_by_tool, plot_cost, plot_tokens
from ._readable import readable
from ._rows import BATCH_COLUMNS, batch_inputs, batch_thread_ids

__all__ = [
    "BATCH_COLUMNS",
    "CONTEXT_COLUMNS",
    "RUN_SCHEMA",
    "TOOL_CALL_SCHEMA",
    "USAGE_SCHEMA",
    "batch",
    "batch_inputs",
    "batch_thread_ids",
    "cancel_batches",
    "context_frame",
    "cost_by_tool",
    "output_frame",
    "plot_context",
    "plot_cost",
    "plot_tokens",
    "readable",
    "runs_frame",
    "tool_calls_frame",
    "usage_frame",
    "usage_from_columns",
]

