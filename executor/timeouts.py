"""Collective timeouts: every process group gets the run's timeout, and a failed collective is one line.

Without a timeout a rank whose peer died or hung waits forever. `init_process_group(timeout=...)` sets it
for the world group only: the groups `DeviceMesh` creates for each mesh axis take c10d's default (30 min
for gloo in PyTorch 2.13: `distributed_c10d._get_default_timeout`), so `set_group_timeouts` applies the
run's `--collective-timeout` to every group this rank belongs to once the model is built (through
`distributed_c10d._set_pg_timeout`, the c10d call for exactly this).

gloo's timeout message names only the transport operation ("Timed out waiting 5000ms for recv operation to
complete"), so the executor runs each part of the loop inside `phase(name, step)`; a collective that times
out or loses its peer there becomes a `CollectiveFailure` whose one-line message names the rank, the step,
the phase, the collective (read from where the exception was raised: FSDP all-gather or reduce-scatter,
pipeline send/recv, DTensor/TP collective, DCP, or the c10d function) and torch's own message:

    rank 0: collective timed out after 5 s at step 2 in training step > forward/backward: DTensor (TP/SP)
    collective (wait_tensor) at executor.model.forward; torch: Timed out waiting 5000ms for recv operation
    to complete

(one line in practice). A collective failure is not a user error: the executor exits 1 and torchrun may
restart the job (`--max-restarts`).
"""

from __future__ import annotations

import contextlib
import re
import traceback
from collections.abc import Iterator
from datetime import timedelta

import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from planner.errors import one_line

DEFAULT_TIMEOUT_S = {"cuda": 600.0, "cpu": 60.0}
"""Default `--collective-timeout` by device. GPU: 10 minutes, NCCL's own default (`default_pg_nccl_timeout`),
long enough for the first step's compilation and a checkpoint write. CPU (gloo, tests): 60 s, so a stuck
test run ends in a minute rather than c10d's 30."""

_state: dict = {"timeout_s": None, "phase": None, "step": None}


class CollectiveFailure(Exception):
    """A collective timed out or lost its peer; the message is one line naming rank, step and phase."""


def set_group_timeouts(timeout_s: float) -> int:
    """Give every process group this rank belongs to the timeout `timeout_s`; returns how many."""
    _state["timeout_s"] = timeout_s
    count = 0
    for group in list(c10d._world.pg_map):
        if group is None or c10d._rank_not_in_group(group):
            continue
        c10d._set_pg_timeout(timedelta(seconds=timeout_s), group)
        count += 1
    return count


_COMM_WORDS = re.compile(r"timed out|timeout|connection (closed|reset)|broken pipe|gloo|nccl", re.IGNORECASE)


def is_collective_failure(exc: BaseException) -> bool:
    if isinstance(exc, dist.DistError):
        return True
    return isinstance(exc, RuntimeError) and bool(_COMM_WORDS.search(str(exc)))


_FRIENDLY = (
    # (path fragment, function-name fragment, name): the first rule matching any torch.distributed frame.
    ("fsdp/", "all_gather", "FSDP all-gather"),
    ("fsdp/", "unshard", "FSDP all-gather"),
    ("fsdp/", "reduce", "FSDP reduce-scatter"),
    ("fsdp/", "post_backward", "FSDP reduce-scatter"),
    ("fsdp/", "", "FSDP collective"),
    ("pipelining/", "", "pipeline send/recv"),
    ("_functional_collectives", "", "DTensor (TP/SP) collective"),
    ("distributed/tensor/", "", "DTensor (TP/SP) collective"),
    ("distributed/checkpoint/", "", "DCP checkpoint collective"),
)
_PHASES = {
    # executor function -> part of the step it is (innermost match wins).
    "executor.step.forward_backward": "forward/backward",
    "executor.step.sync_tied_embeddings": "tied-embedding gradient exchange",
    "executor.step.optimizer_step": "optimizer step",
    "executor.step.global_loss": "loss all-reduce",
    "executor.loop._peak_memory_bytes": "peak-memory all-reduce",
    "executor.checkpoint_manifest.compute": "hashing the checkpoint's files",
    "executor.checkpoint_manifest.verify": "verifying the checkpoint's files",
    "executor.checkpoint.save": "DCP save",
    "executor.checkpoint.load": "DCP load",
}


def _module(filename: str) -> str:
    """'.../site-packages/torch/distributed/fsdp/x.py' -> 'torch.distributed.fsdp.x'."""
    path = filename.replace("\\", "/")
    for root in ("torch/", "executor/"):
        i = path.rfind("/" + root)
        if i >= 0:
            return path[i + 1 :].removesuffix(".py").replace("/", ".")
    return path


def where_raised(exc: BaseException) -> dict[str, str]:
    """Read from the traceback: "op" (the c10d/functional call), "collective" (what issued it: FSDP,
    pipeline, DTensor, DCP), "part" (the part of the step) and "at" (the innermost executor function)."""
    found: dict[str, str] = {}
    frames = [(f.filename.replace("\\", "/"), f.name) for f in reversed(traceback.extract_tb(exc.__traceback__))]
    torch_frames = [(path, name) for path, name in frames if "/torch/distributed/" in path]
    for rule_path, rule_fn, friendly in _FRIENDLY:  # most specific rule first, then innermost frame
        if any(rule_path in path and rule_fn in name for path, name in torch_frames):
            found["collective"] = friendly
            break
    for path, name in torch_frames:
        if "distributed_c10d" in path or "_functional_collectives" in path:
            found["op"] = name
            break
    for path, name in frames:
        if "/executor/" in path and not path.endswith("/executor/timeouts.py"):
            qualified = f"{_module(path)}.{name}"
            found.setdefault("at", qualified)
            if qualified in _PHASES:
                found.setdefault("part", _PHASES[qualified])
    return found


_SOURCE_PREFIX = re.compile(r"\[[^\]]*\.(cc|cpp|h):\d+\]\s*")


def describe(exc: BaseException, phase: str | None, step: int | None) -> str:
    """The one-line message of a failed collective."""
    rank = dist.get_rank() if dist.is_initialized() else "?"
    text = one_line(_SOURCE_PREFIX.sub("", str(exc))) or type(exc).__name__
    timeout_s = _state["timeout_s"]
    if re.search(r"timed out|timeout", text, re.IGNORECASE):
        what = f"collective timed out after {timeout_s:g} s" if timeout_s else "collective timed out"
    else:
        what = "collective failed (a peer rank crashed or was stopped)"
    found = where_raised(exc)
    where = " > ".join(p for p in (phase, found.get("part")) if p)
    op = found.get("collective", "collective")
    if "op" in found:
        op = f"{op} ({found['op']})" if "collective" in found else f"c10d {found['op']}"
    at = f" at {found['at']}" if "at" in found else ""
    step_text = f" at step {step}" if step is not None else ""
    return f"rank {rank}: {what}{step_text} in {where or 'the run'}: {op}{at}; torch: {text[:400]}"


@contextlib.contextmanager
def phase(name: str, step: int | None = None) -> Iterator[None]:
    """Run a part of the loop; a collective failure inside it becomes a CollectiveFailure naming it."""
    saved = (_state["phase"], _state["step"])
    _state["phase"], _state["step"] = name, step
    try:
        yield
    except CollectiveFailure:
        raise
    except Exception as exc:
        if not is_collective_failure(exc):
            raise
        raise CollectiveFailure(describe(exc, name, step)) from exc
    finally:
        _state["phase"], _state["step"] = saved
