"""Every plan in the planner's top 5 runs on the executor and trains what one process trains (CPU, gloo).

The tiny dense model on 4 local ranks, global batch 8 of 64 tokens (`meshplan plan --model tiny --cluster
local-cpu --gpus 4 --global-batch 8 --top 5`): the five best plans, layer partitions included, go through the
executor's own checks and build (`executor.train.build_run`, which applies the rules `meshplan run` applies)
in one launched world, and each matches the single-process losses, gradients and weights to the
equivalence tolerances (equivalence_checks.py). `benchmarks/top5_runs.py` runs the top 5 of dense and MoE
models on 4 and 8 ranks through `meshplan run --steps 2` itself.
"""

from __future__ import annotations

import json

import pytest
from dist_launch import REPO, tail, torchrun
from equivalence_checks import assert_matches_reference

import hardware_profiles
from planner import search
from planner.layout import Workload
from planner.model import preset

pytestmark = pytest.mark.distributed

RANKS = 4
WORKLOAD = Workload(global_batch=8, seq_len=64, dtype="fp32")


def top5_cases() -> list[dict]:
    plans = search(preset("tiny"), hardware_profiles.cluster("local-cpu", gpus=RANKS), WORKLOAD, top=5)
    return [{"name": f"top{i + 1} {p.layout.describe()}", "model": "tiny", "layout": p.layout.model_dump(mode="json")}
            for i, p in enumerate(plans)]


@pytest.mark.timeout(600)
def test_every_plan_of_the_top5_matches_one_process(tmp_path) -> None:
    cases = top5_cases()
    assert len(cases) == 5 and all(c["layout"]["dp"] * c["layout"]["tp"] * c["layout"]["pp"] * c["layout"]["cp"] == RANKS
                                   for c in cases), cases  # the worker builds every mesh over the whole world
    path, out = tmp_path / "cases.json", tmp_path / "results.jsonl"
    path.write_text(json.dumps(cases))
    proc = torchrun(RANKS, [str(REPO / "tests" / "distributed" / "equivalence_worker.py"), str(path), str(out)],
                    timeout_s=300)
    rows = {r["name"]: r for r in map(json.loads, out.read_text().splitlines())} if out.exists() else {}
    for case in cases:
        assert_matches_reference(rows.get(case["name"]), tail(proc))
