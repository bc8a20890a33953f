"""Benchmark `agent.evaluate` against pydantic-evals' `Dataset.evaluate` (#28).

    .venv/bin/python bench/bench_evals.py              # 1,000 cases, 3 repeats
    .venv/bin/python bench/bench_evals.py --cases 200 --repeats 1   # quick

nbagent runs in this interpreter (the project's venv, with pandas); pydantic-evals in a
subprocess of the peers venv (``bench/.venv-peers``, or the interpreter ``PEERS_PYTHON`` names).

Both frameworks evaluate the same cases (a question and its expected answer) with an instant
fake model (nbagent's `FunctionModel`, pydantic-ai's `FunctionModel`, each answering from a
lookup) and the same three evaluators: equals-expected, contains "Paris", and a plain
function (answer shorter than 20 characters). Concurrency 8 for both, progress bars off,
nbagent on its `MemoryStore` (and, informative, its default SQLite store). The model is instant,
so the time per case is the frameworks' overhead: the agent run, the evaluation and the report.

Target (issue #28): nbagent's overhead per case <= 0.25x pydantic-evals'.
pydantic-evals is installed into the peers venv with ``pip install --no-deps pydantic-evals``
(its latest release, 2.62.0, pins the pydantic-ai-slim it was released with; it runs on the
pinned 2.68.0).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's nbagent

TARGET = 0.25


def _cases(n: int) -> tuple[list[str], list[str]]:
    cities = ["Paris", "Berlin", "Rome", "Madrid"]
    inputs = [f"Question {i}: the capital of country {i % 4}?" for i in range(n)]
    return inputs, [cities[i % 4] for i in range(n)]


def _answer(question: str) -> str:
    return ["Paris", "Berlin", "Rome", "Madrid"][int(question.split("country ")[1][0])]


def run_nbagent(n: int, store: str) -> float:
    import pandas as pd

    from nbagent import Agent, evals
    from nbagent.models import FunctionModel

    inputs, expected = _cases(n)
    cases = pd.DataFrame({"input": inputs, "expected": expected})
    agent = Agent(FunctionModel(lambda m, i: _answer(m[-1].content)), store=store)

    def short(output: str) -> bool:
        return len(output) < 20

    start = time.perf_counter()
    report = agent.evaluate(cases, [evals.equals(), evals.contains("Paris"), short], concurrency=8, progress=False)
    report.summary()
    elapsed = time.perf_counter() - start
    assert report.frame["equals"].mean() == 1.0 and len(report.frame) == n
    return elapsed


def run_pydantic_evals(n: int) -> float:
    from pydantic_ai import Agent as PAgent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_evals import Case, Dataset
    from pydantic_evals.evaluators import Contains, EqualsExpected, Evaluator, EvaluatorContext

    class Short(Evaluator[str, str]):
        def evaluate(self, ctx: EvaluatorContext[str, str]) -> bool:
            return len(ctx.output) < 20

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        question = messages[-1].parts[-1].content  # type: ignore[union-attr]
        return ModelResponse(parts=[TextPart(_answer(str(question)))])

    agent = PAgent(FunctionModel(model))
    inputs, expected = _cases(n)
    dataset = Dataset(name="capitals", cases=[Case(name=f"c{i}", inputs=q, expected_output=e)
                             for i, (q, e) in enumerate(zip(inputs, expected, strict=True))],
                      evaluators=[EqualsExpected(), Contains("Paris"), Short()])

    async def task(question: str) -> str:
        return (await agent.run(question)).output

    start = time.perf_counter()
    report = dataset.evaluate_sync(task, max_concurrency=8, progress=False)
    report.averages()
    elapsed = time.perf_counter() - start
    assert len(report.cases) == n
    return elapsed


def _peer_times(n: int, repeats: int) -> list[float]:
    python = os.environ.get("PEERS_PYTHON") or str(Path(__file__).resolve().parent / ".venv-peers" / "bin" / "python")
    out = subprocess.run([python, __file__, "--peer", "--cases", str(n), "--repeats", str(repeats)],
                         check=True, capture_output=True, text=True).stdout
    return [float(x) for x in json.loads(out.strip().splitlines()[-1])]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=str, default=None)
    ap.add_argument("--peer", action="store_true", help="(internal) time pydantic-evals, print the times")
    args = ap.parse_args()
    n = args.cases
    if args.peer:
        run_pydantic_evals(20)  # warm up: imports, first calls
        print(json.dumps([run_pydantic_evals(n) for _ in range(args.repeats)]))
        return
    run_nbagent(20, "memory")
    results: dict[str, list[float]] = {"nbagent (MemoryStore)": [], "nbagent (SQLite)": []}
    for _ in range(args.repeats):
        results["nbagent (MemoryStore)"].append(run_nbagent(n, "memory"))
        with tempfile.TemporaryDirectory() as tmp:
            results["nbagent (SQLite)"].append(run_nbagent(n, str(Path(tmp) / "threads.db")))
    results["pydantic-evals"] = _peer_times(n, args.repeats)
    medians = {k: statistics.median(v) for k, v in results.items()}
    peer = medians["pydantic-evals"] / n
    print(f"| {n:,} cases, instant fake model, 3 evaluators, concurrency 8 "
          "| total s | ms per case | vs pydantic-evals |")
    print("|---|---:|---:|---:|")
    for name, total in medians.items():
        print(f"| {name} | {total:.2f} | {total / n * 1000:.3f} | {total / n / peer:.2f}x |")
    ratio = medians["nbagent (MemoryStore)"] / medians["pydantic-evals"]
    verdict = "meets" if ratio <= TARGET else "misses"
    print(f"\nnbagent/pydantic-evals overhead per case: {ratio:.2f}x ({verdict} the <= {TARGET}x target)")
    if args.json:
        Path(args.json).write_text(json.dumps({"cases": n, "runs": results, "medians": medians, "ratio": ratio}))


if __name__ == "__main__":
    main()
