"""Command-line options of `python -m executor`, the workers `meshplan run` launches for a plan (argparse: the
executor runs under torchrun, not typer).

They live with the plan, torch-free, because both sides read them: the workers parse their arguments here, and
`meshplan run` parses the arguments it is about to hand them with the same parser before it launches anything,
so a bad combination is one line from the CLI instead of a torchrun traceback per rank."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

from planner.errors import UserError

MIN_COLLECTIVE_TIMEOUT_S = 1.0
"""Shortest --collective-timeout. The timeout bounds every wait of every process group, connection set-up of
the mesh's groups and the first step's collectives included, which take hundreds of milliseconds on a loaded
CPU host; below a second a healthy run fails, and at 0.001 s gloo's C++ layer aborts the job with a stack
trace (the 199 lines of frames this bound exists to prevent)."""
MAX_COLLECTIVE_TIMEOUT_S = 7 * 24 * 3600.0
"""Longest --collective-timeout: a week, beyond any real wait; larger values (1e300, inf) overflow the
`timedelta` torch.distributed converts them to."""

_STEP_DIR = re.compile(r"^step-\d{8}$")
"""A checkpoint folder's name (executor.checkpoint.step_dir)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunOptions:
    plan: Path
    steps: int = 10
    """Train until this step number (a resumed run continues to it)."""
    smoke: bool = False
    """Scale the model down (same layout) so any plan runs on a laptop (planner.model.smoke.smoke_spec)."""
    run_dir: Path = Path("runs/run")
    metrics: Path | None = None
    """JSON-lines metrics file; default RUN_DIR/metrics.jsonl."""
    data: Path | None = None
    data_dtype: str | None = None
    checkpoint_dir: Path | None = None
    checkpoint_every: int = 0
    """Save every K steps (0: never)."""
    resume: Path | None = None
    """Checkpoint to continue from: a checkpoint root (its latest complete checkpoint) or one step folder.
    Workers that torchrun restarted (`--max-restarts`) resume from the latest checkpoint in
    `checkpoint_dir` without it (executor.loop)."""
    seed: int = 0
    lr: float = 3e-4
    collective_timeout_s: float | None = None
    """Every collective waiting longer than this on a dead or hung rank fails instead of hanging;
    None: executor.timeouts.DEFAULT_TIMEOUT_S for the device (600 s GPU, 60 s CPU)."""

    @property
    def metrics_path(self) -> Path:
        return self.metrics if self.metrics is not None else self.run_dir / "metrics.jsonl"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m executor", description="Train a meshplan plan (run under torchrun).")
    p.add_argument("plan", type=Path, help="plan JSON written by `meshplan plan --json`")
    p.add_argument("--steps", type=int, default=10, help="train until this step (default 10)")
    p.add_argument("--smoke", action="store_true", help="toy-size model, same layout")
    p.add_argument("--run-dir", type=Path, default=None, help="output folder (default runs/<plan name>)")
    p.add_argument("--metrics", type=Path, default=None, help="JSON-lines file (default RUN_DIR/metrics.jsonl)")
    p.add_argument("--data", type=Path, default=None, help="flat uint16/uint32 token file (default: synthetic)")
    p.add_argument("--data-dtype", choices=["uint16", "uint32"], default=None)
    p.add_argument("--checkpoint-dir", type=Path, default=None)
    p.add_argument("--checkpoint-every", type=int, default=0, help="save every K steps (0: never)")
    p.add_argument("--resume", nargs="?", const=True, default=None, metavar="CKPT",
                   help="continue from CKPT (a checkpoint folder or one step-* folder in it; any mesh); "
                        "without a value, from --checkpoint-dir")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--collective-timeout", "--timeout-s", dest="collective_timeout", type=float, default=None,
                   metavar="SECONDS", help="fail a collective that waits longer (default 600 on GPU, 60 on CPU)")
    return p


def parse_args(argv: list[str] | None) -> RunOptions:
    ns = _parser().parse_args(argv)
    if ns.steps < 1:
        raise UserError(f"--steps {ns.steps}", where="--steps", fix="give a positive number of steps")
    if ns.checkpoint_every < 0:
        raise UserError(f"--checkpoint-every {ns.checkpoint_every}", where="--checkpoint-every", fix="use K >= 0")
    if ns.collective_timeout is not None and not (
            MIN_COLLECTIVE_TIMEOUT_S <= ns.collective_timeout <= MAX_COLLECTIVE_TIMEOUT_S):
        raise UserError(f"{ns.collective_timeout:g} seconds is out of range", where="--collective-timeout",
                        fix=f"give {MIN_COLLECTIVE_TIMEOUT_S:g} to {MAX_COLLECTIVE_TIMEOUT_S:g} seconds (shorter "
                            "fails healthy collectives)")
    resume = ns.resume
    if resume is True:  # bare --resume: the run's own checkpoint folder
        if ns.checkpoint_dir is None:
            raise UserError("needs a folder", where="--resume", fix="pass --checkpoint-dir DIR or --resume DIR")
        resume = ns.checkpoint_dir
    elif resume is not None:
        resume = Path(resume)
    checkpoint_dir = ns.checkpoint_dir
    if checkpoint_dir is None and resume is not None and ns.checkpoint_every:
        # New checkpoints go next to the ones resumed from (the checkpoint root, not a step folder in it).
        checkpoint_dir = resume.parent if _STEP_DIR.match(resume.name) else resume
    if ns.checkpoint_every and checkpoint_dir is None:
        raise UserError("needs a folder", where="--checkpoint-every", fix="pass --checkpoint-dir DIR")
    run_dir = ns.run_dir if ns.run_dir is not None else Path("runs") / ns.plan.stem
    return RunOptions(
        plan=ns.plan,
        steps=ns.steps,
        smoke=ns.smoke,
        run_dir=run_dir,
        metrics=ns.metrics,
        data=ns.data,
        data_dtype=ns.data_dtype,
        checkpoint_dir=checkpoint_dir,
        checkpoint_every=ns.checkpoint_every,
        resume=resume,
        seed=ns.seed,
        lr=ns.lr,
        collective_timeout_s=ns.collective_timeout,
    )
