"""`meshplan run --calibrate` and `--replan-if-off PCT`: close the loop between the cost model and a real run.

    meshplan run --calibrate                     # calibrate (quick), plan the tiny model on the result, run it
    meshplan run plan.json --calibrate           # the plan's layout re-costed on the calibrated profile, run
    meshplan run --replan-if-off 25 --steps 30   # probe, and if off by > 25 %: calibrate, re-plan, continue

--calibrate: `meshplan calibrate --quick` into RUN_DIR/calibrated.yaml first (as many processes as the run
has ranks), then without a plan the planner searches the tiny model on that profile; with one, the plan's
own layout is costed again on it (planner.evaluate), so the run compares against calibrated predictions.

--replan-if-off PCT runs the plan for PROBE_STEPS steps (the first is warm-up), with a checkpoint at the
end. When the median step time is off the prediction by more than PCT %, it calibrates (quick), re-plans the
same model and workload on the calibrated profile for the same number of ranks, prints the old and new
layout and predicted step time, and continues with the new plan FROM THAT CHECKPOINT (DCP reshards the
state onto the new mesh) up to --steps; otherwise it continues the same plan from the checkpoint. Each
phase is an ordinary `meshplan run` (a subprocess), so everything it writes (metrics.jsonl with measured
and predicted per step, the final table) is the same; the second phase's table is the run's result.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from planner.cli.app import err
from planner.errors import UserError
from planner.io import write_text_atomic

PROBE_STEPS = 6
"""Steps of the probe phase: one warm-up step plus five measured ones for the median."""


def calibrate_here(run_dir: Path, nproc: int) -> Path:
    """Quick calibration into RUN_DIR/calibrated.yaml (overwritten: it belongs to this run)."""
    from planner.cli.calibrate import run_calibration

    path = run_dir / "calibrated.yaml"
    run_dir.mkdir(parents=True, exist_ok=True)
    err.print(f"calibrating this machine ({nproc} processes, quick) into {path}", markup=False)
    run_calibration(path, quick=True, nproc=max(nproc, 2), force=True)
    return path


def replanned(plan, cluster_path: Path, *, world: int | None = None):
    """The best plan for `plan`'s model and workload on the calibrated profile of `plan.world_size` devices;
    with `world`, the best that uses exactly `world` ranks. None when no layout uses exactly `world` ranks."""
    import hardware_profiles as hp

    cluster = hp.cluster(str(cluster_path), gpus=plan.world_size)
    return best_plan(plan.inputs.model, cluster, plan.inputs.workload, world=world)


def best_plan(model, cluster, workload, *, world: int | None = None):  # noqa: ANN001, ANN201
    """The best plan on `cluster`; with `world`, the best that uses exactly `world` ranks (the search may
    otherwise leave devices idle when fewer ranks are faster, which a user who asked for N ranks did not
    want). None when no layout uses exactly `world` ranks."""
    import dataclasses

    from planner.api import plans_from_result, search_result

    ctx, result = search_result(model, cluster, workload, top=1 if world is None else ALL_LAYOUTS)
    if world is not None:
        t = result.table
        keep = (t["dp"] * t["tp"] * t["pp"] * t["cp"] == world).nonzero()[0][:1]
        if len(keep) == 0:
            return None
        result = dataclasses.replace(result, table={k: v[keep] for k, v in t.items()},
                                     step_time_s=result.step_time_s[keep])
    return plans_from_result(ctx, result)[0]


ALL_LAYOUTS = 4096
"""Rows kept by the search when a world size is required: every layout of a small local job (the tiny
model on a few gloo ranks has a few hundred), so the best one of that size is among them."""


def recosted(plan, cluster_path: Path):
    """`plan`'s own layout costed on the calibrated profile."""
    import hardware_profiles as hp
    from planner import evaluate

    cluster = hp.cluster(str(cluster_path), gpus=plan.world_size)
    return evaluate(plan.inputs.model, cluster, plan.inputs.workload, plan.layout, allow_oom=True)


def calibrated_plan_file(plan_file: Path | None, run_dir: Path, nproc: int, default_plan, *,
                         keep_world: bool = False) -> Path:
    """--calibrate: calibrate, then write RUN_DIR/plan.json planned (or re-costed) on the result.

    Without a plan the tiny model is planned on `nproc` calibrated devices: on exactly `nproc` ranks when the
    user asked for them (`keep_world`, --nproc); otherwise the search may choose fewer ranks (on CPU one rank
    is often fastest: gloo communication costs more than the compute it splits), and then says so."""
    from planner.plan import Plan

    cluster = calibrate_here(run_dir, nproc)
    if plan_file is None:
        base = default_plan(nproc, measured=False)  # its model and workload; the calibration is the hardware
        plan = replanned(base, cluster, world=nproc if keep_world else None)
        if plan is None:
            raise UserError(f"no layout of the tiny model uses exactly {nproc} ranks", where="--nproc",
                            fix="choose another --nproc")
        err.print(f"planned {plan.layout.describe()} for {plan.inputs.model.name} on the calibrated profile "
                  f"(predicted {plan.prediction.step_time_s * 1e3:.1f} ms/step)", markup=False)
        if plan.world_size < nproc:
            full = replanned(base, cluster, world=nproc)
            than = (f" than the best on {nproc} ({full.prediction.step_time_s * 1e3:.1f} ms: communication costs more "
                    "than the compute it splits)") if full is not None else ""
            err.print(f"note: {plan.world_size} rank(s) instead of {nproc}: the calibrated profile predicts "
                      f"{plan.world_size} faster{than}; pass --nproc {nproc} to run {nproc} ranks anyway", markup=False)
    else:
        plan = recosted(Plan.load(plan_file), cluster)
        err.print(f"re-costed {plan.layout.describe()} on the calibrated profile: predicted "
                  f"{plan.prediction.step_time_s * 1e3:.1f} ms/step", markup=False)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "plan.json"
    write_text_atomic(path, plan.to_json(), force=True)  # the run folder's own copy
    return path


def _phase(args: list[str]) -> subprocess.CompletedProcess:
    """One `meshplan run` as a subprocess; its stderr (progress) streams through, its stdout is returned."""
    cmd = [sys.executable, "-m", "planner.cli.main", "run", *args]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None, text=True, env=dict(os.environ))


def run_with_replan(*, plan_file: Path | None, pct: float, steps: int, run_dir: Path, nproc: int | None,
                    calibrate: bool, passthrough: list[str], final_args: list[str], default_plan,
                    keep_world: bool = False) -> int:
    """The probe phase, the decision, the continuation (see the module docstring); returns an exit code."""
    from planner.plan import Plan

    if steps <= PROBE_STEPS:
        raise UserError(f"--steps {steps} leaves nothing after the {PROBE_STEPS}-step probe",
                        where="--replan-if-off", fix=f"use --steps > {PROBE_STEPS}")
    run_dir.mkdir(parents=True, exist_ok=True)
    if calibrate:
        plan_path = calibrated_plan_file(plan_file, run_dir / "calibration", nproc or 4, default_plan,
                                         keep_world=keep_world)
    elif plan_file is None:
        plan_path = run_dir / "plan.json"
        write_text_atomic(plan_path, default_plan(nproc or 4, keep_world=keep_world).to_json(), force=True)
    else:
        plan_path = plan_file
    plan = Plan.load(plan_path)
    ckpt, probe_json = run_dir / "replan-checkpoint", run_dir / "probe.json"
    err.print(f"probe: {PROBE_STEPS} steps of {plan.layout.describe()} "
              f"(predicted {plan.prediction.step_time_s * 1e3:.1f} ms/step)", markup=False)
    probe = _phase([str(plan_path), "--steps", str(PROBE_STEPS), "--run-dir", str(run_dir / "probe"),
                    "--checkpoint-dir", str(ckpt), "--checkpoint-every", str(PROBE_STEPS),
                    "--json", str(probe_json), "--force", *passthrough])
    if probe.returncode != 0:
        return probe.returncode
    from hardware_profiles.reader import read_json

    summary = read_json(probe_json, what="probe summary")
    deviation = summary["median_step_time_s"] / summary["predicted_step_time_s"] - 1.0
    off = abs(deviation) * 100 > pct
    err.print(f"probe median {summary['median_step_time_s'] * 1e3:.1f} ms vs predicted "
              f"{summary['predicted_step_time_s'] * 1e3:.1f} ms ({deviation:+.1%}): "
              + (f"off by more than {pct:g} %, re-planning" if off else f"within {pct:g} %, keeping the plan"),
              markup=False)
    next_plan = plan_path
    if off:
        cluster = calibrate_here(run_dir / "calibration", plan.world_size)
        new = replanned(plan, cluster, world=plan.world_size) or replanned(plan, cluster)  # same ranks if any
        next_plan = run_dir / "replanned.json"
        write_text_atomic(next_plan, new.to_json(), force=True)
        same = new.layout.describe() == plan.layout.describe()
        err.print(f"re-planned on the calibrated profile: {plan.layout.describe()} "
                  f"(was predicted {plan.prediction.step_time_s * 1e3:.1f} ms) -> {new.layout.describe()} "
                  f"(predicted {new.prediction.step_time_s * 1e3:.1f} ms)"
                  + ("; same layout, calibrated prediction" if same else ""), markup=False)
    err.print(f"continuing {'the re-planned' if off else 'the same'} plan from the step-{PROBE_STEPS} checkpoint "
              f"in {ckpt} up to step {steps}", markup=False)
    final = _phase([str(next_plan), "--steps", str(steps), "--run-dir", str(run_dir / "continued"),
                    "--resume", str(ckpt), *passthrough, *final_args])
    sys.stdout.write(final.stdout)
    return final.returncode
