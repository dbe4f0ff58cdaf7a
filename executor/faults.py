"""Fault injection for tests: make one rank crash or hang at a chosen step, once per run directory.

    MESHPLAN_FAULT="rank=1,step=4,kind=exit" meshplan run plan.json --steps 6 \\
        --checkpoint-dir ckpt --checkpoint-every 2 --max-restarts 1

Kinds (all fire on rank R when it reaches step S):
  exit              `os._exit(1)` before the step's first collective: a crashed process, as after a segfault
                    or an out-of-memory kill (no Python cleanup, no goodbye to the other ranks).
  hang              block forever before the step's first collective: the other ranks wait in that collective
                    until the process-group timeout (`--collective-timeout`) ends them.
  exit-during-save  `os._exit(1)` inside the DCP save of step S, right after this rank wrote its shard files
                    and before the save's final gather: the checkpoint folder holds some shards and no
                    `.metadata` or completion marker, as after a crash in the middle of a save.

A fault fires once per run directory: the failing rank first writes `RUN_DIR/fault-fired.json` (rank, step,
kind, time, and the files of the interrupted save), and a process that finds that file disarms. So the
workers torchrun restarts (`--max-restarts`) run clean and the job recovers, as it would from a real fault.

The variable is parsed strictly: a bad value is a `UserError` naming MESHPLAN_FAULT and the allowed form.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from torch.distributed.checkpoint import FileSystemWriter

from planner.errors import UserError

ENV = "MESHPLAN_FAULT"
FORM = "rank=R,step=S,kind=exit|hang|exit-during-save"
KINDS = ("exit", "hang", "exit-during-save")
FIRED = "fault-fired.json"
"""Marker in the run directory: the fault has fired; later processes of this run ignore MESHPLAN_FAULT."""

_FIELD = re.compile(r"^(rank|step|kind)=([A-Za-z0-9_-]+)$")


@dataclass(frozen=True, kw_only=True)
class Fault:
    rank: int
    step: int
    kind: str


def parse(text: str) -> Fault:
    """`rank=R,step=S,kind=K` (any order, each key exactly once, no spaces) -> Fault; else UserError."""

    def bad(why: str) -> UserError:
        return UserError(f"{ENV}={text!r}: {why}", where="environment", fix=f"set {ENV}='{FORM}' or unset it")

    fields: dict[str, str] = {}
    for item in text.split(","):
        m = _FIELD.match(item)
        if m is None:
            raise bad(f"{item!r} is not key=value (key rank, step or kind; value letters, digits, -)")
        if m.group(1) in fields:
            raise bad(f"{m.group(1)} given twice")
        fields[m.group(1)] = m.group(2)
    missing = [k for k in ("rank", "step", "kind") if k not in fields]
    if missing:
        raise bad(f"missing {', '.join(missing)}")
    for key in ("rank", "step"):
        if not fields[key].isdigit():
            raise bad(f"{key}={fields[key]!r} is not a non-negative integer")
    if int(fields["step"]) < 1:
        raise bad("step must be >= 1 (steps are numbered from 1)")
    if fields["kind"] not in KINDS:
        raise bad(f"kind={fields['kind']!r} is not one of {', '.join(KINDS)}")
    return Fault(rank=int(fields["rank"]), step=int(fields["step"]), kind=fields["kind"])


_armed: Fault | None = None
_run_dir: Path | None = None


def arm(run_dir: Path, *, rank: int, world_size: int, steps: int, checkpoint_every: int) -> Fault | None:
    """Read MESHPLAN_FAULT for this process (every rank reaches the same verdict on a bad value).

    Returns the fault when it is to fire on this rank in this run, else None (no variable, another rank,
    or already fired in this run directory)."""
    global _armed, _run_dir
    _armed, _run_dir = None, run_dir
    text = os.environ.get(ENV)
    if not text:
        return None
    fault = parse(text)
    where = "environment"
    if fault.rank >= world_size:
        raise UserError(f"{ENV}: rank={fault.rank} but the run has {world_size} ranks", where=where,
                        fix=f"use a rank below {world_size}")
    if fault.step > steps:
        raise UserError(f"{ENV}: step={fault.step} is after the last step ({steps}): it would never fire",
                        where=where, fix=f"use a step <= --steps {steps}")
    if fault.kind == "exit-during-save" and (checkpoint_every <= 0 or fault.step % checkpoint_every):
        raise UserError(f"{ENV}: kind=exit-during-save at step {fault.step}, which writes no checkpoint "
                        f"(--checkpoint-every {checkpoint_every})", where=where,
                        fix="pick a step that is a multiple of --checkpoint-every")
    if fault.rank != rank or (run_dir / FIRED).exists():
        return None
    _armed = fault
    return fault


def _fire(step: int, kind: str, **details: object) -> None:
    """Record the firing (atomically, fsynced: it must survive the crash it announces)."""
    global _armed
    assert _run_dir is not None and _armed is not None
    record = {"rank": _armed.rank, "step": step, "kind": kind, "fired_at_unix_s": time.time(), **details}
    _run_dir.mkdir(parents=True, exist_ok=True)
    tmp = _run_dir / f".{FIRED}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, _run_dir / FIRED)
    _armed = None


def before_step(step: int) -> None:
    """Hook at the start of a step, before any of its collectives: kinds exit and hang."""
    if _armed is None or _armed.step != step or _armed.kind not in ("exit", "hang"):
        return
    kind = _armed.kind
    _fire(step, kind)
    print(f"[{ENV}] rank {os.environ.get('RANK', '?')}: injected {kind} at step {step}", flush=True)
    if kind == "exit":
        os._exit(1)
    while True:  # hang: the other ranks' collectives time out; torchrun then terminates this process
        time.sleep(3600)


class _CrashAfterShards(FileSystemWriter):
    """A DCP writer that writes this rank's shard files, then kills the process (kind exit-during-save)."""

    def __init__(self, path: Path, step: int) -> None:
        super().__init__(path)
        self._folder, self._step = Path(path), step

    def write_data(self, plan, planner):  # noqa: ANN001, ANN201 - DCP's signature
        done = super().write_data(plan, planner)  # synchronous: the files are written when it returns
        written = sorted(p.name for p in self._folder.iterdir())
        _fire(self._step, "exit-during-save", folder=str(self._folder), files_written=written)
        print(f"[{ENV}] rank {os.environ.get('RANK', '?')}: injected exit-during-save at step {self._step} "
              f"after writing {written}", flush=True)
        os._exit(1)
        return done  # unreachable


def storage_writer(folder: Path, step: int) -> FileSystemWriter | None:
    """The writer `checkpoint.save` passes to DCP: a crashing one when this rank is to die in this save."""
    if _armed is None or _armed.step != step or _armed.kind != "exit-during-save":
        return None
    return _CrashAfterShards(folder, step)
