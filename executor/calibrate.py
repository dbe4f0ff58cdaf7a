"""`python -m executor.calibrate`: measure this machine for the planner (run by `meshplan calibrate`).

    torchrun --nproc-per-node 4 -m executor.calibrate --out raw.json [--quick]

CPU processes share the host's cores and memory bandwidth (gloo), so a CPU device is measured alone (rank 0,
the others waiting) and then the host's concurrency is measured: how many processes run at full speed at
once (the planner divides a step's CPU work over that many). GPUs are independent devices (NCCL): every
rank measures its own and the median is kept. Measured, in this order:

  gemm        F.linear (x @ W^T, the GEMM of nn.Linear) over (tokens, in, out) shapes like the cost model's
              per-layer GEMMs, fp32 and bf16: (FLOP, seconds) pairs for the efficiency-curve fit
  memory      a large tensor copy: bytes read + written per second
  layer       the reference decoder layer (executor.model) forward and backward per micro-batch at two
              token counts: at the `tiny` preset's widths and 4x wider, and tensor-parallel (the executor's
              DTensor TP over a pair of ranks) and data-parallel (its FSDP2 ZeRO-1 over a pair): the
              framework time the cost model's FLOP/byte terms do not explain is fitted from these on the
              planner side (planner.calibration.overhead); and the `tiny-moe` MoE layer expert-parallel
              over a pair (executor.ep), which the planner reports next to its prediction (not fitted)
  optimizer   the executor's AdamW step over one layer's parameters: seconds per parameter
  pipeline    a 2-stage 1F1B step over a pair (the executor's stages and schedule, tiny widths): what the
              pipeline machinery costs per stage-boundary transfer beyond the model's terms
  collectives all_reduce, all_gather, reduce_scatter, all_to_all over groups of 2..N consecutive ranks (all
              groups of a size running at once, as a mesh axis does), and p2p (pairs exchanging at once), over
              message sizes (see executor.calibrate_collectives)

  concurrency every CPU process running the same reference layer at once, against rank 0's solo time of it

Every number is a median over repetitions (GPUs: then over ranks; collectives: the slowest rank of each
repetition).
Rank 0 writes one JSON document (`--out`, atomically) and prints `@@progress DONE TOTAL LABEL` lines that the
CLI turns into a progress bar. Nothing is fitted here: the planner owns the model, this module only measures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from executor.calibrate_collectives import KINDS, group_sizes, measure_collectives, message_sizes
from executor.calibrate_layers import (
    layer_specs,
    measure_concurrency,
    measure_layer,
    measure_optimizer,
    measure_pipeline,
    moe_layer_spec,
)
from executor.calibrate_timing import Clock, median_over_ranks

QUICK_MIN_TIME_S, FULL_MIN_TIME_S = 0.02, 0.06
"""Each timing repeats a call until this long has passed (per repetition): long enough to average the
timer and scheduler noise of one call, short enough for the run to fit its time budget."""
def gemm_shapes(device: str, quick: bool) -> list[tuple[int, int, int]]:
    """(tokens M, in K, out N) of the GEMMs timed: per-layer shapes of small (CPU) or large (GPU) models."""
    if device == "cuda":
        ms, kns = (512, 2048, 8192), ((1024, 1024), (4096, 4096), (4096, 14336), (8192, 8192))
    else:
        ms, kns = (64, 256, 1024), ((64, 128), (256, 256), (256, 768), (768, 256), (1024, 1024))
    if quick:
        ms, kns = ms[::2], kns[::2]
    return [(m, k, n) for m in ms for k, n in kns]


def measure_gemm(clock: Clock, dtype: torch.dtype, shapes: list[tuple[int, int, int]]) -> list[dict]:
    dev = clock.device
    points = []
    for m, k, n in shapes:
        x = torch.randn(m, k, device=dev).to(dtype)
        w = torch.randn(n, k, device=dev).to(dtype)
        t = clock.time(lambda x=x, w=w: F.linear(x, w))
        points.append({"m": m, "k": k, "n": n, "flops": 2.0 * m * k * n, "time_s": t})
    return points


def measure_copy(clock: Clock, nbytes: int) -> dict:
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=clock.device)
    dst = torch.empty_like(src)
    t = clock.time(lambda: dst.copy_(src))
    return {"bytes_moved": 2 * nbytes, "time_s": t}


def measure_host_copy(clock: Clock, nbytes: int) -> float:
    """Host-to-device bandwidth of pinned memory (bytes/s), CUDA only."""
    src = torch.ones(nbytes // 4, dtype=torch.float32).pin_memory()
    dst = torch.empty(nbytes // 4, dtype=torch.float32, device=clock.device)
    return nbytes / clock.time(lambda: dst.copy_(src, non_blocking=True))


class Progress:
    """`@@progress DONE TOTAL LABEL` lines on rank 0's stdout (parsed by `meshplan calibrate`)."""

    def __init__(self, total: int, rank: int) -> None:
        self.total, self.done, self.rank = total, 0, rank

    def step(self, label: str, n: int = 1) -> None:
        self.done += n
        if self.rank == 0:
            print(f"@@progress {self.done} {self.total} {label}", flush=True)


def _memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
    return torch.device("cpu")


_TIMES = ("time_s", "forward_s", "backward_s")


def _median_rounds(results: list):
    """The first round's structure with every timing replaced by its median over the rounds."""
    first = results[0]
    if isinstance(first, dict):
        return {k: (statistics.median(r[k] for r in results) if k in _TIMES else _median_rounds([r[k] for r in results]))
                for k in first}
    if isinstance(first, list):
        return [_median_rounds([r[i] for r in results]) for i in range(len(first))]
    return first


def device_measurements(clock: Clock, quick: bool, progress: Progress) -> dict:
    """GEMM curve, copy bandwidth, plain reference layers and optimizer of one device, in rounds.

    Each round times everything once (one repetition each); the result is the median over rounds. On a
    shared host the load drifts over seconds, and rounds spread every measurement over the whole run
    instead of taking all of one's repetitions in the same busy (or quiet) second."""
    rounds, clock.reps = clock.reps, 1
    results = [_device_round(clock, quick, progress) for _ in range(rounds)]
    clock.reps = rounds
    return _median_rounds(results)


def _device_round(clock: Clock, quick: bool, progress: Progress) -> dict:
    step = progress.step
    gemm = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        gemm[name] = []
        for shape in gemm_shapes(clock.device.type, quick):
            gemm[name] += measure_gemm(clock, dtype, [shape])
            step(f"GEMM {name} {shape[0]}x{shape[1]}x{shape[2]}")
    copy = measure_copy(clock, (64 if quick else 256) * 2**20)
    step("memory copy")
    tiny, wide = layer_specs()
    layers = [measure_layer(clock, tiny, None)]
    step("decoder layer")
    layers.append(measure_layer(clock, wide, None))
    step("decoder layer (4x wider)")
    optimizer = measure_optimizer(clock, wide)
    step("optimizer step")
    return {"gemm": gemm, "memory_copy": copy, "layers": layers, "optimizer": optimizer}


def _median_device(m: dict, device: torch.device) -> dict:
    """Every rank measured its own GPU: the median over ranks of each number."""
    flat = [p["time_s"] for k in ("fp32", "bf16") for p in m["gemm"][k]] + [m["memory_copy"]["time_s"]]
    flat += [v for layer in m["layers"] for p in layer["points"] for v in (p["forward_s"], p["backward_s"])]
    flat.append(m["optimizer"]["time_s"])
    med = iter(median_over_ranks(flat, device))
    for k in ("fp32", "bf16"):
        for p in m["gemm"][k]:
            p["time_s"] = next(med)
    m["memory_copy"]["time_s"] = next(med)
    for layer in m["layers"]:
        for p in layer["points"]:
            p["forward_s"], p["backward_s"] = next(med), next(med)
    m["optimizer"]["time_s"] = next(med)
    return m


def run(out: Path, quick: bool) -> dict:
    """Measure (module docstring). CPU processes share the host, so the device itself is measured by rank 0
    alone (its solo rate: the others wait, which costs no CPU in gloo), then how much slower it gets with
    every process busy at once; GPUs are independent, so each rank measures its own and the median is kept."""
    device = _device()
    world = int(os.environ.get("WORLD_SIZE", 1))
    if world > 1:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        # The workers' store on 127.0.0.1 only (executor.world._loopback_store), as for training runs.
        from types import SimpleNamespace

        from executor.world import _loopback_store

        store = _loopback_store(SimpleNamespace(rank=int(os.environ.get("RANK", 0)), world_size=world), 600.0)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", device_id=device if device.type == "cuda" else None,
                                **({"store": store, "rank": int(os.environ["RANK"]), "world_size": world} if store is not None else {}))
    rank = dist.get_rank() if world > 1 else 0
    cpu = device.type == "cpu"
    if cpu:
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", 1)))
    clock = Clock(device, QUICK_MIN_TIME_S if quick else FULL_MIN_TIME_S, 3 if quick else 5)
    sizes, groups = message_sizes(device.type, quick), group_sizes(world, quick)
    n_coll = len(sizes) * (len(groups) * (len(KINDS) - 1) + 1) if world > 1 else 0
    progress = Progress(clock.reps * (2 * len(gemm_shapes(device.type, quick)) + 4) + 5 + n_coll, rank)

    measured = device_measurements(clock, quick, progress) if (rank == 0 or not cpu) else None
    if world > 1:
        dist.barrier()
    if not cpu and world > 1:
        measured = _median_device(measured, device)
    slots = None
    if cpu:
        slots = measure_concurrency(clock, world, clock.reps) if world > 1 else 1.0
    progress.step("processes at once")
    if world > 1 and world % 2 == 0:  # TP, FSDP, then EP over one pair (ranks 0, 1), the others idle: solo cost
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device.type, (world // 2, 2), mesh_dim_names=("rest", "pair"))
        tiny = layer_specs()[0]
        for label, spec, kw in (("tensor parallel", tiny, {"tp_mesh": mesh["pair"]}),
                                ("FSDP", tiny, {"dp_mesh": mesh["pair"]}),
                                ("MoE, expert parallel", moe_layer_spec(), {"ep_mesh": mesh["pair"]})):
            if rank < 2:
                layer = measure_layer(clock, spec, **kw)
                if measured is not None:
                    measured["layers"].append(layer)
            dist.barrier()
            progress.step(f"decoder layer ({label})")
        pipeline = measure_pipeline(clock, mesh["pair"]) if rank < 2 else None
        if measured is not None:
            measured["pipeline"] = pipeline
        dist.barrier()
    progress.step("2-stage pipeline")
    host_copy = measure_host_copy(clock, 256 * 2**20) if device.type == "cuda" else None

    collectives = measure_collectives(device, sizes, groups, clock, progress.step) if world > 1 else []
    result = {
        "host": platform.node() or "unknown-host",
        "date": datetime.date.today().isoformat(),
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or platform.machine()),
        "backend": "nccl" if device.type == "cuda" else "gloo",
        "world_size": world,
        "logical_cpus": os.cpu_count(),
        "threads_per_process": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "quick": quick,
        "memory_bytes": _memory_bytes(device),
        "gemm": measured["gemm"] if measured else {},
        "memory_copy": measured["memory_copy"] if measured else {},
        "host_copy_Bps": host_copy,
        "devices_at_full_speed": slots,
        "layers": measured["layers"] if measured else [],
        "optimizer": measured["optimizer"] if measured else {},
        "pipeline": measured.get("pipeline") if measured else None,
        "collectives": collectives,
    }
    if rank == 0:
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(result, indent=1), encoding="utf-8")
        os.replace(tmp, out)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m executor.calibrate", description="Measure this machine (run by meshplan calibrate).")
    ap.add_argument("--out", type=Path, required=True, help="JSON file rank 0 writes")
    ap.add_argument("--quick", action="store_true", help="fewer shapes, sizes and repetitions (< 30 s)")
    ns = ap.parse_args(argv)
    run(ns.out, ns.quick)
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)  # same reason as executor.__main__: gloo's threads can abort interpreter finalisation
