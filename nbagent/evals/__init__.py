"""Evals at the pandas edge: score an agent's answers to a cases frame, diff two reports.

```python
import nbagent
from nbagent import evals
cases = pd.DataFrame({"input": ["Capital of France?"], "expected": ["Paris"]})
report = agent.evaluate(cases, evaluators=[evals.equals(), evals.contains("Paris"),
                                           evals.judge("Is the answer polite?", model=judge_model),
                                           my_function])   # (output, expected, row) -> bool | float | dict
report.frame        # one row per case: input, output, expected, status, cost, latency_s, ... scores
report.summary()    # one row per evaluator: mean, pass_rate, scored, errors, not_run
report.totals()     # the runs: cases, not_run, cost, p50/p95 latency
evals.diff(report_a, report_b)   # per case and evaluator: before, after, change (or "not run")
nbagent.compare(cases["input"], agents={"a": agent_a, "b": agent_b})   # one wide frame
agent.estimate(rows, sample=5)   # a Forecast of the batch's tokens, cost and time
agent.map(rows, confirm_over=1.00)   # forecast first; over $1.00, Run / Cancel buttons
```

The answers come from ``agent.map`` (concurrency, progress, resume, cluster executors). A case
whose run did not complete (failed, stopped, paused, cancelled) is not scored: NaN, counted under
``not_run``, out of the mean and the pass rate. This edge sits above the batch
(`nbagent.dataframe`) and the views (`nbagent.widgets`): it runs batches and shows the Run /
Cancel box, and neither imports it. ``agent.map(..., dry_run=True)`` and
``confirm_over=`` are `map_with_forecast`'s (`estimate`, `confirm`). See docs/evals.md.
"""

from __future__ import annotations

from ._compare import ComparisonFrame, compare
from ._confirm import BatchConfirmation, confirm, map_with_forecast
from ._evaluators import Case, Evaluator, Score, contains, equals, evaluator, judge
from ._forecast import Forecast, estimate
from ._report import EvalReport, diff, evaluate

__all__ = [
    "BatchConfirmation",
    "Case",
    "ComparisonFrame",
    "EvalReport",
    "Evaluator",
    "Forecast",
    "Score",
    "compare",
    "confirm",
    "contains",
    "diff",
    "equals",
    "estimate",
    "evaluate",
    "evaluator",
    "judge",
    "map_with_forecast",
]
