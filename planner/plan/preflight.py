"""Checks `meshplan run` makes before it launches anything, shared with the workers (this module imports no
torch, so the CLI can use it: planner code never imports torch).

- The machine: a GPU plan needs CUDA devices (counted with `nvidia-smi`, honouring CUDA_VISIBLE_DEVICES),
  as many on this host as it starts ranks, each with the memory the plan predicts; CPU ranks (gloo, or
  --smoke) need host memory. A 64-H100 plan on a laptop is refused in well under a second, naming what is
  missing and suggesting `meshplan replan PLAN --gpus N` for the GPUs that exist, instead of starting 64
  workers that each discover it after loading torch (158 s and 14 GB on a 2-core machine).
- The token file (`--data`): a regular file, a whole number of tokens of its dtype, at least one sequence;
  the workers open it with the same rules (executor.data.MemmapTokens).
- `hardware_of`: what the plan's cluster says a host runs on (executor.world checks the same in each rank).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import UserError

GIB = 2**30
WORKER_BASE_BYTES = 200 * 2**20
"""Host memory one CPU worker needs before its model: measured 250 MB resident per rank of `meshplan run`
(tiny model, 4 gloo ranks, torch 2.13 CPU) with about 50 MB of it shared library pages common to all ranks."""
TOKEN_DTYPES = {"uint16": 2, "uint32": 4}
"""Token file dtypes (nanoGPT's .bin format) and their bytes per token."""


@dataclass(frozen=True, kw_only=True)
class Hardware:
    """What the plan's cluster says one rank runs on."""

    kind: str
    """"cpu" (gloo processes) or "cuda"."""
    gpu_name: str
    memory_bytes: float | None
    peak_flops: dict[str, float]


def _node_of_host(groups: list, host: int) -> dict:
    """The node shape of host `host` (host groups are numbered group by group, in order)."""
    for group in groups:
        if not isinstance(group, dict):
            break
        if host < int(group.get("hosts", 1)):
            return group.get("node", {}) or {}
        host -= int(group.get("hosts", 1))
    return groups[0].get("node", {}) if groups and isinstance(groups[0], dict) else {}


def hardware_of(cluster: dict[str, Any], host: int = 0) -> Hardware:
    """The device of host `host` of the plan's cluster (heterogeneous clusters differ by host)."""
    gpus = cluster.get("gpus") if isinstance(cluster.get("gpus"), dict) else {}
    node = _node_of_host(cluster.get("host_groups") or [], host)
    name = str(node.get("gpu") or next(iter(gpus), "") or cluster.get("name", ""))
    profile = gpus.get(name, {}) if isinstance(gpus, dict) else {}
    vendor = str(profile.get("vendor", "")).lower()
    cpu = bool(node.get("virtual_devices")) or vendor == "cpu" or (not profile and "cpu" in name.lower())
    return Hardware(
        kind="cpu" if cpu else "cuda",
        gpu_name=name or "unknown",
        memory_bytes=profile.get("memory_bytes"),
        peak_flops=dict(profile.get("peak_flops") or {}),
    )


def plan_hardware(plan: Any) -> list[Hardware]:
    """The hardware of every host the plan's ranks run on (the hosts of its placement), in host order."""
    hosts = sorted({p.host for p in plan.placement})
    return [hardware_of(plan.inputs.cluster, h) for h in hosts]


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_bytes: int


def visible_gpus() -> list[Gpu]:
    """CUDA devices this process would see, from `nvidia-smi` (no torch); [] without a driver or when
    CUDA_VISIBLE_DEVICES hides them all."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
        return []
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        run = subprocess.run([smi, "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in run.stdout.splitlines() if run.returncode == 0 else []:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit() and parts[2].isdigit():
            gpus.append(Gpu(int(parts[0]), parts[1], int(parts[2]) * 2**20))  # nvidia-smi reports MiB
    if visible is not None:
        wanted = [v.strip() for v in visible.split(",")]
        if all(v.isdigit() for v in wanted):
            by_index = {g.index: g for g in gpus}
            gpus = [by_index[int(v)] for v in wanted if int(v) in by_index]
    return gpus


def available_host_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), None elsewhere."""
    try:
        for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_machine(plan: Any, *, local_ranks: int, nnodes: int, smoke: bool, where: str,
                  gpus: list[Gpu] | None = None, memory_bytes: int | None = None) -> None:
    """Refuse (UserError) a run this machine cannot start: see the module docstring. `gpus` and
    `memory_bytes` default to what this machine has (tests pass their own)."""
    kinds = plan_hardware(plan)
    replan = f"meshplan replan {where} --gpus N"
    if any(h.kind == "cuda" for h in kinds) and not smoke:
        found = visible_gpus() if gpus is None else gpus
        name = "/".join(sorted({h.gpu_name for h in kinds}))
        if not found:
            raise UserError(
                f"the plan is for {plan.world_size} {name} GPUs ({local_ranks} on this host) but no CUDA device is "
                "visible here; nothing was started", where=f"{where}: inputs.cluster",
                fix=f"run it where those GPUs are, pass --smoke to run the layout at toy size on CPU, or plan for "
                    f"this machine (meshplan plan --cluster local-cpu ...; `{replan}` re-plans for N GPUs)")
        if local_ranks > len(found):
            raise UserError(
                f"{local_ranks} ranks of the plan run on this host but only {len(found)} CUDA device(s) are visible",
                where=f"{where}: layout", fix=f"meshplan replan {where} --gpus {len(found) * nnodes} (the GPUs here)"
                                              f"{'' if nnodes == 1 else ' on every host'}, or run on hosts with "
                                              f"{local_ranks} GPUs")
        need = float(plan.prediction.peak_memory_bytes)
        small = min(found[:local_ranks], key=lambda g: g.memory_bytes)
        if need > small.memory_bytes:
            raise UserError(
                f"predicted peak memory {need / GIB:.1f} GiB per GPU exceeds the {small.memory_bytes / GIB:.1f} GiB "
                f"of GPU {small.index} ({small.name})", where=f"{where}: prediction.peak_memory_bytes",
                fix="re-plan with a profile of this GPU (meshplan detect --out here.yaml; meshplan plan --cluster "
                    "here.yaml ...) or run with --smoke")
        return
    # CPU ranks: gloo processes of the plan (or of a --smoke run) share this host's memory.
    model_bytes = 0.0 if smoke else float(plan.prediction.peak_memory_bytes)
    per_rank = WORKER_BASE_BYTES + model_bytes
    have = available_host_memory_bytes() if memory_bytes is None else memory_bytes
    if have is not None and local_ranks * per_rank > have:
        fits = int(have // per_rank)
        raise UserError(
            f"{local_ranks} CPU ranks need about {local_ranks * per_rank / GIB:.1f} GiB "
            f"({per_rank / GIB:.2f} GiB each{', toy model' if smoke else ''}) but {have / GIB:.1f} GiB of memory "
            "is available", where=f"{where}: layout",
            fix=(f"meshplan replan {where} --gpus {fits} (as many ranks as fit)" if fits >= 1 else
                 "free memory or run on a larger machine"))


def cpu_oversubscribed(plan: Any, *, local_ranks: int, smoke: bool) -> str | None:
    """A warning when CPU ranks (gloo, or a --smoke run of a GPU plan) outnumber this host's cores: the run
    works, each step just takes (ranks / cores) times longer; None otherwise."""
    cores = os.cpu_count() or 1
    on_cpu = all(h.kind == "cpu" for h in plan_hardware(plan)) or (smoke and not visible_gpus())
    if not on_cpu or local_ranks <= cores:
        return None
    return (f"{local_ranks} CPU ranks share {cores} cores here: every step will be about {local_ranks / cores:.0f}x "
            "slower than with a core per rank")


def token_dtype(vocab_size: int, given: str | None) -> str:
    """The token file's dtype: as given, else uint16 when the vocabulary fits in it (nanoGPT's convention)."""
    return given or ("uint16" if vocab_size <= 2**16 else "uint32")


def check_token_file(path: str | Path, *, dtype: str, seq_len: int) -> int:
    """Refuse (UserError) a --data file the workers cannot read; returns its number of tokens."""
    path = Path(path)
    where = f"--data {path}"
    fix = "pass a flat uint16/uint32 token file (nanoGPT's .bin format)"
    if dtype not in TOKEN_DTYPES:
        raise UserError(f"token dtype {dtype!r}", where="--data-dtype", fix="use uint16 or uint32")
    try:
        info = path.stat()
    except OSError as exc:
        raise UserError(f"cannot read the token file ({exc.strerror})", where=where, fix=fix) from None
    if path.is_dir():
        raise UserError("is a folder, not a token file", where=where, fix=fix)
    if not path.is_file():
        raise UserError("is not a regular file (the token file is memory-mapped)", where=where, fix=fix)
    if not os.access(path, os.R_OK):
        raise UserError("cannot read the token file (permission denied)", where=where, fix=fix)
    size, width = info.st_size, TOKEN_DTYPES[dtype]
    if size % width:
        raise UserError(f"{size} bytes is not a whole number of {dtype} tokens ({width} bytes each)", where=where,
                        fix=f"{fix}; or pass --data-dtype matching the file")
    tokens = size // width
    if tokens < seq_len + 1:
        raise UserError(f"{tokens} {dtype} tokens, fewer than one sequence of seq_len+1={seq_len + 1}", where=where,
                        fix="pass a longer token file")
    return tokens
