"""The training loop: resume, steps, metrics, checkpoints.

Resume: from `--resume CKPT` when given; and automatically in workers that torchrun restarted after a
failure (`--max-restarts N`, seen as TORCHELASTIC_RESTART_COUNT > 0): they continue from the latest complete
checkpoint in `--checkpoint-dir` (the one `--resume` named if the job has written none since), so a crashed
rank costs the steps since the last checkpoint, not the run. The data of step k is fixed (executor.data) and
the checkpoint holds weights, optimizer state and RNG, so the resumed losses equal an uninterrupted run's.

Each part of a step runs inside `executor.timeouts.phase`, so a collective that times out or loses its peer
ends the rank with one line naming rank, step, phase and collective; `executor.faults` hooks in before each
step and inside checkpoint saves (MESHPLAN_FAULT, tests only).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from executor import checkpoint, faults
from executor.metrics import MetricsLog
from executor.step import train_step
from executor.timeouts import phase
from planner.plan import peak_flops_of_ranks
from planner.plan.run_options import RunOptions

if TYPE_CHECKING:  # executor.train starts this loop; its `Run` is only a type here
    from executor.train import Run


def _flops_per_token(run: Run) -> float | None:
    """Model FLOPs per trained token, the planner's accounting (recomputation not counted)."""
    method = getattr(run.spec, "training_flops_per_token", None)
    if method is None:
        return None
    return float(method(run.seq_len, "none").model_flops)


def _peak_flops_total(run: Run) -> float | None:
    if not run.world.on_planned_device:
        return None
    key = "fp32" if run.world.device.type == "cpu" or run.plan.inputs.workload.dtype == "fp32" else "bf16"
    try:  # every rank's own GPU (mixed clusters): the planner's MFU denominator, planner.plan
        return peak_flops_of_ranks(run.plan.inputs.cluster, run.plan.placement, key) or None
    except (KeyError, IndexError, TypeError, ValueError):  # a GPU profile without this dtype's peak
        return None


def _peak_memory_bytes(run: Run) -> int | None:
    """Largest CUDA `max_memory_allocated` over all ranks (collective); None on CPU."""
    if run.world.device.type != "cuda":
        return None
    peak = torch.tensor([torch.cuda.max_memory_allocated(run.world.device)], device=run.world.device)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    return int(peak.item())


@contextlib.contextmanager
def _progress(enabled: bool, total: int, start: int) -> Iterator[tuple]:
    """A rich progress bar on an interactive rank-0 stdout; plain lines otherwise (logs, pipes, tests)."""
    if not enabled or not sys.stdout.isatty():
        yield None, None
        return
    columns = (TextColumn("training"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(highlight=False)) as progress:
        yield progress, progress.add_task("train", total=total, completed=start)


def _say(run: Run, text: str) -> None:
    if run.world.rank == 0:
        print(text, file=sys.stderr, flush=True)


def restart_count() -> int:
    """How many times torchrun restarted this job's workers (0 on the first launch)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0)


def resume_point(opts: RunOptions, restart: int) -> Path | None:
    """The checkpoint to start from: after a restart the newest one the job wrote, else `--resume`'s."""
    if restart > 0 and opts.checkpoint_dir is not None:
        found = checkpoint.latest_checkpoint(opts.checkpoint_dir)
        if found is not None:
            return found[1]
    if opts.resume is not None:
        return checkpoint.resume_source(opts.resume)
    return None


def train(run: Run, opts: RunOptions) -> None:
    start = 0
    restart = restart_count()
    source = resume_point(opts, restart)
    if source is not None:
        with phase("checkpoint load"):
            start = checkpoint.load(source, run.model, run.optimizers)
        how = f"restart {restart}: " if restart else ""
        _say(run, f"{how}resumed from {source} (step {start}) on layout {run.plan.layout.describe()}")
    elif restart:
        _say(run, f"restart {restart}: no checkpoint yet, training again from step 1")
    if start >= opts.steps:
        _say(run, f"nothing to do: checkpoint is at step {start} >= --steps {opts.steps}")
        return
    lay, pred = run.plan.layout, run.plan.prediction
    rank0 = run.world.rank == 0
    log = None
    with _progress(rank0, opts.steps, start) as (progress, task):
        if rank0:
            log = MetricsLog(
                opts.metrics_path,
                predicted_step_time_s=pred.step_time_s,
                predicted_tokens_per_s=pred.tokens_per_s,
                predicted_mfu=pred.mfu,
                predicted_peak_memory_bytes=pred.peak_memory_bytes,
                tokens_per_step=lay.global_batch * run.seq_len,
                flops_per_token=_flops_per_token(run),
                peak_flops_total=_peak_flops_total(run),
                total_steps=opts.steps,
                smoke=opts.smoke,
                printer=progress.console.print if progress is not None else None,
                append=source is not None or restart > 0,
                restart=restart,
            )
        for step in range(start + 1, opts.steps + 1):
            faults.before_step(step)
            inputs, targets = run.batch(step)
            t0 = time.perf_counter()
            with phase("training step", step):
                loss = train_step(run.model, run.optimizers, inputs, targets)  # ends in an all-reduce: synced
                elapsed = time.perf_counter() - t0
                peak = _peak_memory_bytes(run)
            if log is not None:
                log.record(step, loss, elapsed, peak)
            if progress is not None:
                progress.advance(task)
            if opts.checkpoint_every and step % opts.checkpoint_every == 0:
                assert opts.checkpoint_dir is not None
                info = {"plan": str(opts.plan), "layout": lay.describe(), "model": run.args.name}
                with phase("checkpoint save", step):
                    path = checkpoint.save(opts.checkpoint_dir, run.model, run.optimizers, step, info)
                _say(run, f"checkpoint {path}")
    if log is not None:
        log.close()
