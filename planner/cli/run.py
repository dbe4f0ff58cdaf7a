"""`meshplan run [PLAN.json]`: execute a plan with torchrun, then show measured next to predicted.

    meshplan run                                  # plan the tiny model on this machine (4 gloo ranks), run it
    meshplan run --global-batch 8 --steps 3       # the same, smaller and shorter
    meshplan run plan.json --steps 50 --smoke     # any plan's layout at toy size (world size must match)
    meshplan run plan.json --nnodes 2 --node-rank 0 --rdzv-endpoint host0:29500   # on every host

Starts `python -m torch.distributed.run ... -m executor PLAN.json` as a subprocess (this module never
imports torch): c10d rendezvous on 127.0.0.1 at a free port unless --rdzv-endpoint names a host, with
MASTER_ADDR=127.0.0.1, OMP_NUM_THREADS=1 and TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (restarts on gloo reuse
stale store addresses without it: PyTorch issue 135712). Progress streams to stderr; the final table
(median step time, tokens/s, MFU, deviation; measured vs predicted) goes to stdout, or one JSON document to
--json (planner/cli/_run_summary.py). Before anything starts, the endpoint, the executor's options, the token
file and the machine's devices and memory are checked (planner/cli/_run_checks.py, planner/plan/preflight.py);
a plan/world mismatch the executor still finds is reported as its one-line error (exit 2).

Faults during a run:
    meshplan run plan.json --checkpoint-dir ckpt --checkpoint-every 100 --max-restarts 3
        a rank that crashes (or a collective that fails) stops the job; torchrun restarts all workers (up
        to 3 times) and they resume from the latest complete checkpoint in ckpt by themselves, no --resume
        needed; the steps since that checkpoint are trained again (the metrics repeat them with restart=N).
    meshplan run plan.json --collective-timeout 120
        a collective waiting longer (a hung or dead rank) ends the run with one line naming the rank, step,
        phase and collective (exit 1; default 600 s on GPUs, 60 s on CPU).
    meshplan run new_plan.json --resume ckpt
        continue from ckpt's latest checkpoint (or one ckpt/step-NNNNNNNN) on another mesh or world size,
        e.g. re-planned for fewer GPUs after losing some: DCP reshards the state; the global batch must be
        the same for the loss to continue where it stopped.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from planner.cli._run_launch import LOOPBACK, Stopped, worker_args
from planner.cli._run_launch import held_back as _held_back  # noqa: F401 (tests read it here)
from planner.cli._run_launch import launch as _launch
from planner.cli._run_launch import torchrun_cmd as _torchrun_cmd
from planner.cli.app import abort, app, err, write_json_output
from planner.cli.options import GradReduceChoice
from planner.errors import UserError
from planner.plan.run_options import MAX_COLLECTIVE_TIMEOUT_S, MIN_COLLECTIVE_TIMEOUT_S

if TYPE_CHECKING:
    from planner.cli._run_summary import RunSummary  # a pydantic model: imported when a run is summarised

DEFAULT_RANKS = 4
"""Gloo ranks of the no-argument run: 4 processes exercise 2-D layouts and finish in seconds on 2 cores."""
DEFAULT_MODEL = "tiny"
"""Model of the no-argument run. Its workload is the model's default one (`Workload.for_model`), as in
`meshplan plan`: 512 sequences of its full 64-token context, 32 Ki tokens a step. Kept for a laptop: about
1.5 s a step on 4 ranks of a busy 2-core machine, so 10 steps and start-up take about half a minute (less on
more cores); `--global-batch` makes it smaller."""


class TokenDtype(str, Enum):
    uint16 = "uint16"
    uint32 = "uint32"


def _summarise(plan: Any, plan_path: Path, metrics: Path, smoke: bool) -> RunSummary:
    """The run's measured-vs-predicted summary (planner.cli._run_summary: imported when a run is summarised)."""
    from planner.cli._run_summary import summarise

    return summarise(plan, plan_path, metrics, smoke)


def _default_plan(nproc: int, keep_world: bool = False, measured: bool = True, global_batch: int | None = None,
                  grad_reduce_dtype: str | None = None):
    """The best plan for the tiny model on `nproc` local gloo ranks with the model's default workload (or
    `global_batch` sequences, `grad_reduce_dtype` reductions), on this machine's measured local-cpu profile (planner.calibration.local_cache;
    `measured=False`: the built-in one, for callers that only need the model and workload); with `keep_world`
    (the user gave --nproc), the best that uses all `nproc`."""
    import hardware_profiles as hp
    from planner.cli.options import cli_cluster
    from planner.cli.run_replan import best_plan
    from planner.layout import Workload
    from planner.model import preset

    def local(gpus: int):  # noqa: ANN202
        return cli_cluster("local-cpu", gpus=gpus) if measured else hp.cluster("local-cpu", gpus=gpus)

    model = preset(DEFAULT_MODEL)
    workload = Workload.for_model(model, global_batch=global_batch, grad_reduce_dtype=grad_reduce_dtype)
    plan = best_plan(model, local(nproc), workload, world=nproc if keep_world else None)
    if plan is None:
        fits = [n for n in range(1, 9) if best_plan(model, local(n), workload, world=n)]
        raise UserError(f"no layout of the tiny model ({workload.batch} sequences of {workload.seq_len}) uses "
                        f"exactly {nproc} ranks", where=f"--nproc {nproc}",
                        fix=f"use --nproc {', '.join(map(str, fits))}")
    return plan


@app.command("run")
def run_command(
    plan_file: Path = typer.Argument(None, metavar="[PLAN.json]", help="Plan to run (default: plan the tiny model here)."),
    steps: int = typer.Option(10, "--steps", min=1, help="Training steps."),
    global_batch: int = typer.Option(None, "--global-batch", min=1, metavar="SEQS", help="Sequences per step of the "
                                     "tiny model planned here (no PLAN.json). (default: 512)"),
    grad_reduce_dtype: GradReduceChoice = typer.Option(
        None, "--grad-reduce-dtype", help="Gradient-reduction precision of the tiny model planned here (no "
        "PLAN.json; a plan fixes its own): fp32, or bf16 for half the DP traffic. (default: fp32)"),
    smoke: bool = typer.Option(False, "--smoke", help="Toy-size model and batch with the plan's layout (runs anywhere; "
                               "not compared with the full-size predictions)."),
    metrics: Path = typer.Option(None, "--metrics", metavar="FILE", help="JSON-lines metrics (default RUN_DIR/metrics.jsonl; "
                                 "an existing file is kept unless --force, or appended to with --resume)."),
    nnodes: int = typer.Option(1, "--nnodes", min=1, help="Hosts (one torchrun agent each)."),
    node_rank: int = typer.Option(0, "--node-rank", min=0, help="This host's index (0 hosts the rendezvous store)."),
    rdzv_endpoint: str = typer.Option(None, "--rdzv-endpoint", metavar="HOST:PORT", help="Rendezvous (default 127.0.0.1:free port)."),
    nproc: int = typer.Option(None, "--nproc", min=1, help="Ranks on this host (default: world size / nnodes)."),
    run_dir: Path = typer.Option(None, "--run-dir", help="Output folder (default runs/<plan>-<time>); created if "
                                 "missing, its parent must exist."),
    data: Path = typer.Option(None, "--data", help="Flat uint16/uint32 token file (default: synthetic tokens)."),
    data_dtype: TokenDtype = typer.Option(None, "--data-dtype", help="Token dtype of --data (default: uint16 when "
                                          "the model's vocabulary fits in it, else uint32)."),
    checkpoint_dir: Path = typer.Option(None, "--checkpoint-dir", help="DCP checkpoint folder."),
    checkpoint_every: int = typer.Option(0, "--checkpoint-every", min=0, help="Save every K steps (0: never)."),
    resume: Path = typer.Option(None, "--resume", metavar="CKPT_DIR", help="Continue from CKPT_DIR's latest checkpoint, or one step-* folder (any mesh or world size)."),
    max_restarts: int = typer.Option(0, "--max-restarts", min=0, help="Restart failed workers up to N times; they resume from the latest checkpoint."),
    collective_timeout: float = typer.Option(
        None, "--collective-timeout", metavar="SECONDS",
        help=f"Fail a collective waiting longer, {MIN_COLLECTIVE_TIMEOUT_S:g} to {MAX_COLLECTIVE_TIMEOUT_S:g} s "
             "(default 600 on GPU, 60 on CPU)."),
    json_out: str = typer.Option(None, "--json", metavar="FILE", help="Write the summary as JSON ('-' = stdout)."),
    force: bool = typer.Option(False, "--force", help="Overwrite the --json (and --metrics) file if it exists."),
    calibrate: bool = typer.Option(False, "--calibrate", help="Calibrate this machine first (quick) and plan/cost on it."),
    replan_if_off: float = typer.Option(None, "--replan-if-off", metavar="PCT", min=0.0,
                                        help="After a short probe, re-plan on a calibrated profile if the median step "
                                        "time is off the prediction by more than PCT %, and continue from its checkpoint."),
) -> None:
    """Run a plan with torchrun (or plan and run the tiny model here); show measured vs predicted.

    With --max-restarts N and --checkpoint-dir, torchrun restarts failed workers and they resume from the
    latest complete checkpoint by themselves. --resume CKPT_DIR continues a run on another mesh or world size.
    """
    from planner.cli import _run_checks as run_checks
    from planner.io import (
        check_output_folder,
        check_targets,
        is_stdout,
        make_output_folder,
        write_text_atomic,
    )
    from planner.plan import Plan
    from planner.rendezvous import LoopbackStore, loopback_sockets

    given_run_dir = run_dir
    try:  # everything checkable before planning or launching anything
        if nnodes > 1 and rdzv_endpoint is None:
            raise UserError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (the same on every host)")
        if rdzv_endpoint is not None:
            run_checks.check_endpoint(rdzv_endpoint)
        check_targets(json_out, force=force)
        if global_batch is not None and plan_file is not None:
            raise UserError(f"--global-batch applies when no plan is given; {plan_file} fixes its own batch",
                            fix="drop --global-batch, or re-plan with meshplan plan --global-batch")
        if grad_reduce_dtype is not None and plan_file is not None:
            raise UserError(f"--grad-reduce-dtype applies when no plan is given; {plan_file} fixes its own",
                            fix="drop --grad-reduce-dtype, or re-plan with meshplan plan --grad-reduce-dtype")
        if metrics is not None:  # the run writes it from scratch, or appends to it when resuming
            check_targets(metrics, force=force or resume is not None)
        if run_dir is not None:
            check_output_folder(run_dir, option="--run-dir")
    except UserError as exc:
        abort(str(exc))
    default_plan = functools.partial(_default_plan, global_batch=global_batch,
                                     grad_reduce_dtype=grad_reduce_dtype.value if grad_reduce_dtype else None)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if replan_if_off is not None or calibrate:  # planner/cli/run_replan.py
        from planner.cli import run_replan

        run_dir = run_dir or Path("runs") / f"{plan_file.stem if plan_file else 'default'}-{stamp}"
        try:
            if replan_if_off is None:
                plan_file = run_replan.calibrated_plan_file(plan_file, run_dir, nproc or DEFAULT_RANKS, default_plan,
                                                            keep_world=nproc is not None)
            else:
                passthrough = [*(["--smoke"] if smoke else []), *(["--data", str(data)] if data else []),
                               *(["--data-dtype", data_dtype.value] if data_dtype else []),
                               *(["--nproc", str(nproc)] if nproc else [])]
                final = [*(["--json", json_out] if json_out else []), *(["--force"] if force else [])]
                raise typer.Exit(run_replan.run_with_replan(
                    plan_file=plan_file, pct=replan_if_off, steps=steps, run_dir=run_dir, nproc=nproc,
                    calibrate=calibrate, passthrough=passthrough, final_args=final, default_plan=default_plan,
                    keep_world=nproc is not None))
        except UserError as exc:
            abort(str(exc))
    try:
        if plan_file is None:
            plan = default_plan(nproc or DEFAULT_RANKS, keep_world=nproc is not None)
            run_dir = run_dir or Path("runs") / f"default-{stamp}"
            plan_path = run_dir / "plan.json"
        else:
            plan, plan_path = Plan.load(plan_file), plan_file
            tag = stamp if nnodes == 1 else hashlib.sha256(f"{rdzv_endpoint}".encode()).hexdigest()[:8]
            run_dir = run_dir or Path("runs") / f"{plan_file.stem}-{tag}"
        local = nproc if nproc is not None else plan.world_size // nnodes
        if local * nnodes != plan.world_size:
            raise UserError(f"the plan needs {plan.world_size} ranks but --nnodes {nnodes} x --nproc {local} "
                            f"= {local * nnodes}", where=str(plan_path),
                            fix="make nnodes x nproc equal the plan's world size")
        metrics = metrics or run_dir / "metrics.jsonl"
        args = dict(nnodes=nnodes, nproc=local, node_rank=node_rank, steps=steps, smoke=smoke, data=data,
                    data_dtype=data_dtype.value if data_dtype else None, checkpoint_dir=checkpoint_dir,
                    checkpoint_every=checkpoint_every, resume=resume, max_restarts=max_restarts,
                    collective_timeout=collective_timeout, store_hosted=rdzv_endpoint is None)
        run_checks.check_executor_options(worker_args(plan_path, run_dir, metrics, args))
        if resume is not None and not resume.is_dir():
            raise UserError("no such folder", where=f"--resume {resume}",
                            fix="pass a --checkpoint-dir folder or one of its step-* folders")
        if data is not None:
            run_checks.check_data(data, plan=plan, data_dtype=args["data_dtype"], smoke=smoke)
        from planner.plan.preflight import check_machine, cpu_oversubscribed

        check_machine(plan, local_ranks=local, nnodes=nnodes, smoke=smoke, where=str(plan_file or "the default plan"))
        slow = cpu_oversubscribed(plan, local_ranks=local, smoke=smoke)
        if given_run_dir is not None:
            make_output_folder(run_dir, option="--run-dir")
        else:
            run_dir.mkdir(parents=True, exist_ok=True)  # runs/<name>: meshplan's own default folder
        if plan_file is None:
            write_text_atomic(plan_path, plan.to_json(), force=True)  # the run folder's own copy
            err.print(f"planned {plan.layout.describe()} for tiny on {plan.world_size} local gloo ranks", markup=False)
    except UserError as exc:
        abort(str(exc))
    (run_dir / "error.txt").unlink(missing_ok=True)
    (run_dir / "failure.txt").unlink(missing_ok=True)
    if max_restarts and checkpoint_dir is None and not (resume is not None and checkpoint_every):
        err.print("note: --max-restarts without --checkpoint-dir: a restarted job trains again from step 1",
                  markup=False)
    # One host: the rendezvous store listens on 127.0.0.1 only (planner.rendezvous), not on every interface.
    store = LoopbackStore.start(run_dir / "rendezvous.log") if rdzv_endpoint is None else None
    endpoint = store.endpoint if store is not None else rdzv_endpoint
    rdzv_id = "meshplan-" + hashlib.sha256(f"{plan_path}:{endpoint}".encode()).hexdigest()[:12]
    cmd = _torchrun_cmd(plan_path, run_dir, metrics, args, endpoint, rdzv_id)
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1", PYTHONUNBUFFERED="1")
    if endpoint.rsplit(":", 1)[0] in LOOPBACK:
        env["MASTER_ADDR"] = "127.0.0.1"
        env.update({k: v for k, v in loopback_sockets().items() if k not in os.environ})
    if slow:
        err.print(f"note: {slow}", markup=False)
    err.print(f"launching {local * nnodes} ranks ({nnodes} node(s)); output in {run_dir}", markup=False)
    try:
        rc, held = _launch(cmd, env, run_dir / "launcher.log")
    except Stopped as stop:  # SIGTERM / SIGHUP: the job was stopped the same way; exit as that signal would
        err.print(f"{stop}; full log: {run_dir / 'launcher.log'}", markup=False)
        raise typer.Exit(code=128 + stop.signum) from None
    finally:
        if store is not None:
            store.stop()
    failure_file = run_dir / "failure.txt"
    failures = failure_file.read_text(encoding="utf-8").splitlines() if failure_file.is_file() else []
    more = f" ({len(failures) - 1} more in {failure_file})" if len(failures) > 1 else ""
    if rc != 0:
        error_file = run_dir / "error.txt"
        if error_file.is_file():
            abort(error_file.read_text(encoding="utf-8").strip())
        if failures:  # a collective timed out or lost its peer: the first rank's line (all in the file)
            abort(failures[0] + more, code=1)
        sys.stderr.writelines(held)
        abort(f"torchrun exited with status {rc}; full log: {run_dir / 'launcher.log'}", code=1)
    if failures:
        err.print(f"note: the job recovered from a failure (torchrun restarted it): {failures[0]}{more}", markup=False)
    if not metrics.is_file():
        err.print(f"done; metrics are written on the host that ran rank 0 ({metrics})", markup=False)
        return
    try:
        summary = _summarise(plan, plan_path, metrics, smoke)
    except UserError as exc:
        abort(str(exc))
    if json_out is not None:
        try:
            write_json_output(summary.model_dump_json(indent=2), json_out, force=force)
        except UserError as exc:
            abort(str(exc))
    hint = None if smoke else run_checks.calibration_hint(plan, summary.median_step_time_s,
                                                           summary.predicted_step_time_s, plan_path)
    if json_out is None or not is_stdout(json_out):
        from planner.cli._run_summary import render

        render(summary)
    if hint is not None:
        err.print(hint, markup=False)
