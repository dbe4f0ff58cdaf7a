"""Every plan in the planner's top 5 runs under `meshplan run` and trains what one process trains.

    .venv/bin/python benchmarks/top5_runs.py [--global-batch 16] [--steps 2] [--models tiny,tiny-moe] [--ranks 4,8]

For each model (tiny dense, tiny MoE) and rank count (4, 8 local gloo processes): the five best plans of
`planner.search` (what `meshplan plan --top 5` lists) for `--global-batch` sequences of the model's context,
each written to a plan file and run by `meshplan run PLAN --steps 2` (its own torchrun launch: the whole
product path, the executor's checks included); every step's loss is compared with the single-process model
trained on the full batch with `meshplan run`'s seed (0) and optimizer (AdamW, lr 3e-4, eps 1e-8), computed
by the equivalence tests' reference (tests/distributed/equivalence_worker.py). Prints one row per plan and
exits 1 if a plan does not run or a loss differs by more than LOSS_RTOL.
About 20-60 s per launch on a 2-core machine: minutes in all, so a benchmark, not a test (the test suite runs
the dense 4-rank top 5 in one launch: tests/distributed/test_top5_runs.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

import hardware_profiles
from executor.step import OptimizerConfig
from planner import search
from planner.layout import Workload
from planner.model import preset

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "distributed"))
from dist_launch import cpu_env  # noqa: E402
from equivalence_worker import SEQ_LEN, reference  # noqa: E402

LOSS_RTOL = 1e-5
"""fp32 on CPU: step 1 differs only by summation order (~1e-7); step 2 also by AdamW's eps=1e-8 amplifying
that noise on near-zero gradient elements (equivalence_worker.OPTIM), still far below 1e-5 of the loss."""
RUN_OPTIMIZER = OptimizerConfig(lr=3e-4)  # meshplan run's defaults (planner.plan.run_options: --lr 3e-4, --seed 0)


def run_plan(plan_json: str, folder: Path, steps: int) -> tuple[list[float], str]:
    """Losses per step of `meshplan run` on the plan, and its last stderr lines (for a failed run)."""
    path = folder / "plan.json"
    path.write_text(plan_json)
    proc = subprocess.run([sys.executable, "-m", "planner.cli.main", "run", str(path), "--steps", str(steps)],
                          cwd=folder, env=cpu_env(), capture_output=True, text=True, timeout=900)
    metrics = list((folder / "runs").glob("*/metrics.jsonl"))
    if proc.returncode != 0 or not metrics:
        return [], proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
    rows = [json.loads(line) for line in metrics[0].read_text().splitlines()]
    return [float(r["loss"]) for r in rows], ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--global-batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--models", default="tiny,tiny-moe")
    ap.add_argument("--ranks", default="4,8")
    args = ap.parse_args()
    rows = []
    for name in args.models.split(","):
        model = preset(name)
        workload = Workload.for_model(model, global_batch=args.global_batch, seq_len=SEQ_LEN, dtype="fp32")
        want = reference(name, args.steps, workload.batch, seed=0, optim=RUN_OPTIMIZER)["losses"]
        for ranks in (int(r) for r in args.ranks.split(",")):
            plans = search(model, hardware_profiles.cluster("local-cpu", gpus=ranks), workload, top=5)
            for i, plan in enumerate(plans, 1):
                with tempfile.TemporaryDirectory() as tmp:
                    got, error = run_plan(plan.to_json(), Path(tmp), args.steps)
                err = max((abs(g - w) / abs(w) for g, w in zip(got, want)), default=float("nan"))
                ok = not error and len(got) == args.steps and err <= LOSS_RTOL
                rows.append({"model": name, "ranks": ranks, "rank_in_top5": i, "layout": plan.layout.describe(),
                             "losses": " ".join(f"{x:.6f}" for x in got) or "-", "max_rel_loss_err": err,
                             "ok": ok, "error": error})
                print(f"{name} {ranks} ranks #{i} {plan.layout.describe()}: "
                      f"{'ok' if ok else 'FAILED'} (max rel loss err {err:.1e}) {error}", file=sys.stderr, flush=True)
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_colwidth", 60):
        print(table.drop(columns=["error"]).to_string(index=False))
    print(f"reference losses per model: one process, seed 0, AdamW lr 3e-4; tolerance {LOSS_RTOL:g} relative")
    print(f"{int(table['ok'].sum())}/{len(table)} plans ran under meshplan run and matched the one-process losses")
    return 0 if table["ok"].all() else 1


if __name__ == "__main__":
    raise SystemExit(main())
