"""The training loop: resume, steps, metrics, checkpoints."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator

import torch
import torch.distributed as dist
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from executor import checkpoint
from executor.metrics import MetricsLog
from executor.options import RunOptions
from executor.step import train_step
from executor.train import Run
from planner.errors import UserError


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
    peak = run.world.hardware.peak_flops.get(key)
    return peak * run.world.world_size if peak else None


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


def train(run: Run, opts: RunOptions) -> None:
    start = 0
    if opts.resume:
        assert opts.checkpoint_dir is not None
        found = checkpoint.latest_checkpoint(opts.checkpoint_dir)
        if found is None:
            raise UserError(
                "no complete checkpoint to resume from", where=str(opts.checkpoint_dir), fix="drop --resume"
            )
        start = checkpoint.load(found[1], run.model, run.optimizers)
        _say(run, f"resumed from {found[1]} (step {start}) on layout {run.plan.layout.describe()}")
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
                append=opts.resume,
            )
        for step in range(start + 1, opts.steps + 1):
            inputs, targets = run.batch(step)
            t0 = time.perf_counter()
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
                path = checkpoint.save(opts.checkpoint_dir, run.model, run.optimizers, step, info)
                _say(run, f"checkpoint {path}")
    if log is not None:
        log.close()
