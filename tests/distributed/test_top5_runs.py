"""Every plan in the planner's top 5 runs on the executor and trains what one process trains (CPU, gloo).

On 4 local ranks, global batch 8 of 64 tokens, one launch (ranks forked by dist_launch.forked):
- the tiny dense model: the five best plans (`meshplan plan --model tiny --cluster local-cpu --gpus 4
  --global-batch 8 --top 5`), layer partitions included;
- the tiny MoE model (4 experts, top 2, a shared expert): its three best plans, and the best plan with
  expert parallelism pinned to 2 and to 4 (`--ep 2`, `--ep 4`: the search does not pick EP on this model,
  whose experts are small, so the EP compositions it recommends when asked are exercised here).
Each goes through the executor's own checks and build (`executor.train.build_run`, which applies the rules
`meshplan run` applies) and must match the single-process losses, gradients and weights to the equivalence
tolerances (equivalence_checks.py). `benchmarks/top5_runs.py` runs the whole top 5 of dense and MoE models on
4 and 8 ranks through `meshplan run --steps 2` itself.
"""

from __future__ import annotations

import json

import pytest
from dist_launch import REPO, forked, tail
from equivalence_checks import assert_matches_reference

import hardware_profiles
from planner import search
from planner.layout import Workload
from planner.model import preset

pytestmark = pytest.mark.distributed

RANKS = 4
WORKLOAD = Workload(global_batch=8, seq_len=64, dtype="fp32")
CASES = (("tiny", 5, {}), ("tiny-moe", 3, {}), ("tiny-moe", 1, {"ep": 2}), ("tiny-moe", 1, {"ep": 4}))
"""(model, how many of its best plans, pins)."""


def top_cases() -> list[dict]:
    cluster = hardware_profiles.cluster("local-cpu", gpus=RANKS)
    cases = []
    for model, top, pins in CASES:
        plans = search(preset(model), cluster, WORKLOAD, top=top, **pins)
        assert len(plans) == top, (model, pins)
        what = "".join(f" {k}={v}" for k, v in pins.items())
        cases += [{"name": f"{model}{what} top{i + 1} {p.layout.describe()} {','.join(p.layout.mesh_axes)}",
                   "model": model, "layout": p.layout.model_dump(mode="json")} for i, p in enumerate(plans)]
    return cases


@pytest.mark.timeout(600)
def test_every_plan_of_the_top5_matches_one_process(tmp_path) -> None:
    cases = top_cases()
    assert all(c["layout"]["dp"] * c["layout"]["tp"] * c["layout"]["pp"] * c["layout"]["cp"] == RANKS
               for c in cases), cases  # the worker builds every mesh over the whole world
    assert {c["layout"]["ep"] for c in cases} >= {1, 2, 4}
    path, out = tmp_path / "cases.json", tmp_path / "results.jsonl"
    path.write_text(json.dumps(cases))
    proc = forked(RANKS, [str(REPO / "tests" / "distributed" / "equivalence_worker.py"), str(path), str(out)],
                    timeout_s=500)
    rows = {r["name"]: r for r in map(json.loads, out.read_text().splitlines())} if out.exists() else {}
    for case in cases:
        assert_matches_reference(rows.get(case["name"]), tail(proc))
