"""Measure the `cpu` device profile and the `loopback-gloo` link on this host.

A "cpu device" is one training process with OMP_NUM_THREADS=1 (how tests and CI run the executor), so
every rate here is single-threaded. Measures:
  * GEMM throughput (fp32, bf16, fp16) on 1 thread, over a range of sizes; fits achieved = R*F/(F + h)
    (F = 2*M*N*K FLOP) as 1/achieved = 1/R + (h/R)/F, giving the large-GEMM rate R (taken as the device's peak, so max_fraction = 1)
    and the half-rate size h (`matmul_efficiency.half_flops`);
  * memory bandwidth: a large tensor copy (bytes read + written per second);
  * gloo all-reduce between local processes on 127.0.0.1: bus bandwidth 2(n-1)/n * S / t for a large
    message, and per-step latency t / (2(n-1)) for a 4-byte one.

Run:  .venv/bin/python benchmarks/measure_cpu_profile.py            # print the numbers (JSON)
      .venv/bin/python benchmarks/measure_cpu_profile.py --write    # also rewrite the two YAML files
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import yaml  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "hardware_profiles" / "data"


def _best_time(fn, repeats: int, min_time_s: float = 0.2) -> float:
    """Fastest of `repeats` timings, each looping until `min_time_s` (noise on a shared host only adds time)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time_s:
                break
        best = min(best, elapsed / n)
    return best


def measure_gemm(dtype: torch.dtype, sizes: list[int], repeats: int) -> dict[str, float]:
    """Fit achieved = R * F / (F + h) over square GEMMs; returns rate R (FLOP/s) and h (FLOP)."""
    torch.set_num_threads(1)
    flops, times = [], []
    for n in sizes:
        a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
        times.append(_best_time(lambda a=a, b=b: torch.mm(a, b), repeats))
        flops.append(2.0 * n**3)
    # achieved = R * F / (F + h)  <=>  1/achieved = 1/R + (h/R) * (1/F): a straight line in 1/F.
    achieved = np.array(flops) / np.array(times)
    slope, intercept = np.polyfit(1.0 / np.array(flops), 1.0 / achieved, 1)
    rate = 1.0 / intercept
    return {
        "rate_flops": rate,
        "half_flops": max(slope * rate, 1.0),
        "points": [{"n": n, "flops": f, "time_s": t, "achieved_flops": f / t} for n, f, t in zip(sizes, flops, times, strict=True)],
    }


def measure_memory_bandwidth(nbytes: int, repeats: int) -> float:
    """Bytes moved (read + write) per second by a single-threaded copy of `nbytes`."""
    torch.set_num_threads(1)
    src = torch.ones(nbytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    return 2 * nbytes / _best_time(lambda: dst.copy_(src), repeats)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _allreduce_worker(rank: int, world: int, port: int, sizes: list[int], iters: int, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    result = {}
    for nbytes in sizes:
        x = torch.ones(max(nbytes // 4, 1), dtype=torch.float32)
        for _ in range(3):
            dist.all_reduce(x)
        samples = []
        for _ in range(iters):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            samples.append(time.perf_counter() - t0)
        t = torch.tensor([statistics.median(samples)])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        result[nbytes] = float(t)
    if rank == 0:
        out.put(result)
    dist.destroy_process_group()


def measure_gloo(world: int, large_bytes: int, iters: int) -> dict[str, float]:
    """Bus bandwidth and per-step latency of gloo all-reduce among `world` local processes."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    sizes = [4, large_bytes]
    port = _free_port()
    procs = [ctx.Process(target=_allreduce_worker, args=(r, world, port, sizes, iters, q)) for r in range(world)]
    for p in procs:
        p.start()
    res = q.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    steps = 2 * (world - 1)
    return {
        "world": world,
        "busbw_Bps": steps / world * large_bytes / res[large_bytes],
        "step_latency_s": res[4] / steps,
        "small_allreduce_s": res[4],
        "large_allreduce_s": res[large_bytes],
        "large_bytes": large_bytes,
    }


def _meminfo_total_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("MemTotal not found in /proc/meminfo")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="rewrite data/gpus/cpu.yaml and data/links/loopback-gloo.yaml")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--gloo-bytes", type=int, default=64 * 2**20)
    args = ap.parse_args()

    host, date = platform.node() or "unknown-host", datetime.date.today().isoformat()
    cpu_name = platform.processor() or platform.machine()
    sizes = [64, 96, 128, 192, 256, 384, 512, 768]
    res = {
        "host": host,
        "date": date,
        "cpu": cpu_name,
        "logical_cpus": os.cpu_count(),
        "fp32": measure_gemm(torch.float32, sizes, args.repeats),
        "bf16": measure_gemm(torch.bfloat16, [128, 256, 512], 3),
        "fp16": measure_gemm(torch.float16, [128, 256, 512], 3),
        "memory_bandwidth_Bps": measure_memory_bandwidth(256 * 2**20, args.repeats),
        "memory_bytes": _meminfo_total_bytes(),
        "gloo": [measure_gloo(w, args.gloo_bytes, 10) for w in (2, 4)],
    }
    print(json.dumps(res, indent=2))
    if args.write:
        write_profiles(res)


def write_profiles(res: dict) -> None:
    """Rewrite the cpu GPU profile and the loopback-gloo link from a measurement."""
    tag = f"measured by benchmarks/measure_cpu_profile.py on {res['host']} {res['date']}"
    g2 = res["gloo"][0]
    cpu = {
        "name": "cpu",
        "vendor": "cpu",
        "description": f"one CPU training process (1 thread, gloo) on {res['cpu']}",
        "memory_bytes": res["memory_bytes"],
        "memory_bandwidth_Bps": float(f"{res['memory_bandwidth_Bps']:.4g}"),
        "peak_flops": {k: float(f"{res[k]['rate_flops']:.4g}") for k in ("bf16", "fp16", "fp32")},
        "matmul_efficiency": {"max_fraction": 1.0, "half_flops": float(f"{res['fp32']['half_flops']:.4g}")},
        "nvlink_bandwidth_Bps": 0.0,
        "pcie_bandwidth_Bps": float(f"{res['memory_bandwidth_Bps']:.4g}"),
        "sources": {
            "memory_bytes": f"{tag}: MemTotal of /proc/meminfo (host RAM; split evenly over the processes of a run)",
            "memory_bandwidth_Bps": f"{tag}: single-threaded copy of 256 MiB, bytes read + written per second",
            "peak_flops": f"{tag}: large square GEMM rate on 1 thread (torch.mm), fit achieved = R*F/(F + h); the "
            "achieved rate is the peak of a CPU process (no datasheet figure applies)",
            "matmul_efficiency.max_fraction": "definition: peak_flops is the measured large-GEMM rate, so 1.0",
            "matmul_efficiency.half_flops": f"{tag}: h of the fp32 fit achieved = R*F/(F + h) over square n = 64..768 (regression of 1/achieved on 1/F)",
            "nvlink_bandwidth_Bps": "none: CPU processes exchange data through gloo over loopback (see loopback-gloo)",
            "pcie_bandwidth_Bps": f"{tag}: no PCIe device; the host-memory copy bandwidth stands in",
        },
    }
    loop = {
        "name": "loopback-gloo",
        "kind": "loopback",
        "description": "gloo collectives between CPU processes of one host over 127.0.0.1",
        "bandwidth_Bps": float(f"{g2['busbw_Bps']:.4g}"),
        "latency_s": float(f"{g2['step_latency_s']:.4g}"),
        "protocol_efficiency": 1.0,
        "sources": {
            "bandwidth_Bps": f"{tag}: gloo all-reduce of {g2['large_bytes']} bytes between 2 processes, bus "
            f"bandwidth 2(n-1)/n*S/t (4 processes: {res['gloo'][1]['busbw_Bps']:.4g} B/s on {res['logical_cpus']} logical CPUs)",
            "latency_s": f"{tag}: median 4-byte gloo all-reduce time between 2 processes / 2(n-1) steps",
            "protocol_efficiency": "bandwidth_Bps above is already the measured payload rate (nothing to discount)",
        },
    }
    header = "# Written by benchmarks/measure_cpu_profile.py --write; rerun it (or meshplan calibrate) to refresh.\n"
    (DATA / "gpus" / "cpu.yaml").write_text(header + yaml.safe_dump(cpu, sort_keys=False, width=120))
    (DATA / "links" / "loopback-gloo.yaml").write_text(header + yaml.safe_dump(loop, sort_keys=False, width=120))


if __name__ == "__main__":
    main()
