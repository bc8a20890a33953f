"""The example notebooks replayed from their recordings (notebooks/recordings/<stem>.jsonl, made
once on the local model with ``scripts/make_notebooks.py --record``): ``NBAGENT_REPLAY`` makes
``auto()`` answer from the recording, so a notebook runs offline, without the local model, and
tells the same story (the checks of tests/test_notebooks.py). tests/test_notebooks.py keeps the
live local-model run.

Marked ``notebooks`` (NBAGENT_SKIP_NOTEBOOKS=1 skips them); they need no model. The cluster
notebook is not here: offline, its model is a stand-in function, so it needs no recording.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.test_notebooks import CHECKS, MAKER, _run

pytestmark = [
    pytest.mark.notebooks,
    pytest.mark.skipif(os.environ.get("NBAGENT_SKIP_NOTEBOOKS") == "1", reason="NBAGENT_SKIP_NOTEBOOKS=1"),
]

RECORDED = sorted(p.stem + ".ipynb" for p in MAKER.RECORDINGS.glob("*.jsonl"))


OFFLINE_BY_DESIGN = {"07_batch_on_a_cluster.ipynb"}
"""Notebooks whose model offline is a stand-in function (``auto(fallback=...)``), not the local
model: they need no recording (tests/test_notebooks.py runs them as they are)."""


def test_every_notebook_on_the_local_model_has_a_recording_without_keys() -> None:
    assert set(RECORDED) == set(MAKER.NOTEBOOKS) - OFFLINE_BY_DESIGN, "scripts/make_notebooks.py --record"
    for path in MAKER.RECORDINGS.glob("*.jsonl"):
        text = path.read_text(encoding="utf-8")
        assert "sk-" not in text and "Authorization" not in text and "api_key" not in text
        assert all(json.loads(line)["request"] for line in text.splitlines())


@pytest.mark.parametrize("name", RECORDED, ids=lambda n: n[:-6])
def test_notebook_replays_its_recording_offline(name: str, tmp_path: Path) -> None:
    recording = MAKER.RECORDINGS / (Path(name).stem + ".jsonl")
    # The local model is out of reach (a port nothing listens on): every answer is the recording's.
    ran = _run(name, tmp_path, env={"NBAGENT_REPLAY": str(recording), "NBAGENT_LOCAL_LLM_PORT": "9"})
    try:
        CHECKS[name](ran)
    except AssertionError:
        print(json.dumps({i: ran.out(i) for i, c in enumerate(ran.nb.cells) if c.cell_type == "code"},
                         indent=1, ensure_ascii=False)[:20000])
        raise
    usage = [row for state in ran.threads.values() for row in state.usage if row.provider == "local"]
    assert usage and all(row.replayed and row.cost_total in (0, None) for row in usage)
