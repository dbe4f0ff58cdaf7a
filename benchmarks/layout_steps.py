"""Time training steps of several plans in one torchrun job, round-robin (the worker of predicted_vs_measured).

    torchrun --nproc-per-node 4 benchmarks/layout_steps.py --out times.json --warmup 3 --rounds 3 \\
        --steps 8 a.json b.json c.json

Every rank builds every plan with the executor's own code (`executor.train.build_run`: mesh, TP/SP, PP,
FSDP, AC), then runs `executor.step.train_step` - the executor's hot loop, timed as `executor.loop` times
it (perf_counter around the step, which ends in a world all-reduce) - for `--warmup` untimed steps per
plan, then `--rounds` rounds of `--steps` timed steps per plan, the plans taking turns. Taking turns is the
point: on a shared host the load from other work drifts, and interleaving spreads that drift over every
layout alike instead of charging it to whichever ran during a busy minute. Rank 0 writes
{plan path: [seconds per timed step]} to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch.distributed as dist

from executor.step import train_step
from executor.train import build_run, check_plan
from executor.world import check_world, init_process_group
from planner.plan import Plan
from planner.plan.run_options import RunOptions


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("plans", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ns = ap.parse_args()

    plans = [Plan.load(p) for p in ns.plans]
    worlds = [check_world(p, smoke=False, plan_path=str(path)) for p, path in zip(plans, ns.plans, strict=True)]
    for plan, path in zip(plans, ns.plans, strict=True):
        check_plan(plan, smoke=False, where=str(path))
    init_process_group(worlds[0], 600.0)
    runs = [build_run(p, RunOptions(plan=path, run_dir=ns.out.parent), w, where=str(path))
            for p, path, w in zip(plans, ns.plans, worlds, strict=True)]
    step = {id(r): 0 for r in runs}

    def one(run) -> float:
        step[id(run)] += 1
        inputs, targets = run.batch(step[id(run)])
        t0 = time.perf_counter()
        train_step(run.model, run.optimizers, inputs, targets)  # ends in an all-reduce: synced
        return time.perf_counter() - t0

    for run in runs:
        for _ in range(ns.warmup):
            one(run)
    times: dict[str, list[float]] = {str(p): [] for p in ns.plans}
    for _ in range(ns.rounds):
        for path, run in zip(ns.plans, runs, strict=True):
            times[str(path)] += [one(run) for _ in range(ns.steps)]
            if worlds[0].rank == 0:
                print(f"@@measured {path.stem} {len(times[str(path)])}", flush=True)
    if worlds[0].rank == 0:
        tmp = ns.out.with_name(f".{ns.out.name}.tmp")
        tmp.write_text(json.dumps(times), encoding="utf-8")
        os.replace(tmp, ns.out)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)  # as executor.__main__: gloo threads can abort interpreter finalisation
