"""Speed of the exact search on large clusters: cold, warm and whole-process, wall and CPU time.

    .venv/bin/python benchmarks/search_speed.py              # every case
    .venv/bin/python benchmarks/search_speed.py --warm 7 --runs 5 --case 65,536

For each case it reports, side by side in one run:
  topo      building the cluster's topology (once per cluster and process);
  cold      the first `planner.api.search_result` call in a fresh process (the case runs in its own
            subprocess) with an empty collective-coefficient disk cache, after the topology build: what the
            first query on a cluster this machine has never planned for costs beyond it;
  +disk     the same first call in a second fresh process, which reads the coefficients the first one wrote
            (planner.cost.comm_cache);
  warm      the median of `--warm` further calls in the first process;
  plan      the median over `--runs` of the whole `meshplan plan ... --top 1` command as a user types it
            (interpreter start, imports, input resolution, search, plans, rendering), disk cache off;
  +disk     the same with the disk cache filled by the earlier runs (what a user sees from the second
            command on a cluster on).
Every time is shown as wall seconds and CPU seconds (user + sys of the process, or of the child for the
whole-process runs, from `resource.getrusage(RUSAGE_CHILDREN)`). CPU time is far less sensitive than wall
time to other jobs on the machine; the load average is printed before and after, so say when the machine
was shared.

Targets (issue 15): plan < 1.0 s wall on 2 cores, warm < 100 ms, warm growth from 64 to 65,536 GPUs <= 3x.
Then each pick's predicted MFU, error band and extrapolations (issue 11: no pick may predict an MFU above the best
published run of its GPU family without an extrapolation that says so; the count is printed).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

MT_NLG_530B = dict(
    name="gpt-530b", num_layers=105, hidden_size=20480, num_heads=128, num_kv_heads=128, ffn_hidden_size=81920,
    vocab_size=51200, max_seq_len=2048, mlp="gelu", norm="layernorm", position="learned", tied_embeddings=True,
    qkv_bias=True, linear_bias=True, source="Narayanan et al. 2021 Table 1 (529.6B row) / Smith et al. 2022 MT-NLG",
)


@dataclass(frozen=True)
class Case:
    """One benchmark case, as `meshplan plan` flags (the model is a preset name or a spec dict)."""

    label: str
    model: str | dict[str, Any]
    cluster: str
    gpus: int
    global_batch: int | None = None
    global_batch_tokens: int | None = None
    seq_len: int = 2048

    def cli_args(self, model_path: str | None = None) -> list[str]:
        """The `meshplan plan` flags of this case (`model_path`: a spec file written for a dict model)."""
        args = ["--model", model_path or str(self.model), "--cluster", self.cluster, "--gpus", str(self.gpus),
                "--seq-len", str(self.seq_len)]
        if self.global_batch is not None:
            args += ["--global-batch", str(self.global_batch)]
        if self.global_batch_tokens is not None:
            args += ["--global-batch-tokens", str(self.global_batch_tokens)]
        return args


def cases() -> Iterator[Case]:
    yield Case("llama3-405b on 16,384 H100 (16M tokens, seq 8192)", "llama3-405b", "dgx-h100", 16384,
               global_batch_tokens=16 * 2**20, seq_len=8192)
    yield Case("gpt3-175b on 1,024 A100-80GB (batch 1536)", "gpt3-175b", "dgx-a100", 1024, global_batch=1536)
    yield Case("530B on 5,120 A100-80GB (batch 2560)", MT_NLG_530B, "dgx-a100", 5120, global_batch=2560)
    for n in (8, 64, 512, 4096, 32768, 65536):
        tokens_m = 4 if n < 32768 else 16  # the larger clusters get a 16M-token batch (Llama 3 Table 4 scale)
        yield Case(f"llama3-70b on {n:,} H100 ({tokens_m}M tokens, seq 8192)", "llama3-70b", "dgx-h100", n,
                   global_batch_tokens=tokens_m * 2**20, seq_len=8192)


def model_file(case: Case, directory: Path) -> str | None:
    """A model YAML for a case whose model is a spec (what a user would pass to --model), else None."""
    if isinstance(case.model, str):
        return None
    import yaml

    path = directory / f"{case.model['name']}.yaml"
    path.write_text(yaml.safe_dump(case.model, sort_keys=False))
    return str(path)


# ---- in the child process -------------------------------------------------------------------------------
def _timed(fn) -> tuple[Any, float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    value = fn()
    return value, time.perf_counter() - w0, time.process_time() - c0


def child(index: int, warm: int) -> None:
    """Time one case in this (fresh) process and print one JSON line."""
    import hardware_profiles
    from planner.api import row_to_layout, search_result
    from planner.cost.context import cached_topology
    from planner.layout import Workload
    from planner.model import ModelSpec, preset

    case = list(cases())[index]
    model = preset(case.model) if isinstance(case.model, str) else ModelSpec(**case.model)
    cluster = hardware_profiles.cluster(case.cluster, gpus=case.gpus)
    workload = Workload(global_batch=case.global_batch, global_batch_tokens=case.global_batch_tokens,
                        seq_len=case.seq_len)
    _, topo_s, topo_cpu = _timed(lambda: cached_topology(cluster))
    (_, res), cold_s, cold_cpu = _timed(lambda: search_result(model, cluster, workload, top=1))
    warm_runs = [_timed(lambda: search_result(model, cluster, workload, top=1))[1:] for _ in range(warm)]
    best, honest = "none fits", {}
    if len(res.step_time_s):
        best = row_to_layout({k: int(v[0]) for k, v in res.table.items()}, None).describe()
        honest = pick_honesty(res, model, cluster, workload)
    print(json.dumps({
        "topo_s": topo_s, "topo_cpu": topo_cpu, "cold_s": cold_s, "cold_cpu": cold_cpu,
        "warm_s": statistics.median(w for w, _ in warm_runs) if warm_runs else float("nan"),
        "warm_cpu": statistics.median(c for _, c in warm_runs) if warm_runs else float("nan"),
        "shapes": res.stats.shapes_total, "rows": res.stats.rows_evaluated, "best": best, **honest,
    }))


def pick_honesty(res, model, cluster, workload) -> dict[str, Any]:
    """The pick's predicted MFU, error band and extrapolations, and whether an MFU above the best published run
    of its GPU family goes without an extrapolation that says so (issue 11: there must be none)."""
    from planner.api import plans_from_result, search_result
    from planner.validation.bands import gpu_family
    from planner.validation.records import load_validated_runs

    ctx, _ = search_result(model, cluster, workload, top=1)
    pred = plans_from_result(ctx, res)[0].prediction
    family = gpu_family(ctx.gpu.name)
    best = max((r.published_mfu for r in load_validated_runs().runs if r.family == family and not r.moe), default=None)
    said = any(e.startswith("predicted MFU") for e in pred.extrapolations)
    return {"mfu": pred.mfu, "band": [pred.error_band.low, pred.error_band.high], "basis": pred.error_band.basis,
            "extrapolations": list(pred.extrapolations), "mfu_unexplained": best is not None and pred.mfu > best and not said}


# ---- in the parent ----------------------------------------------------------------------------------------
def run_timed(cmd: list[str], ok: tuple[int, ...] = (0,), **kw: Any) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run a command to completion; (result, wall s, CPU s of the child: user + sys). Exit codes outside
    `ok` stop the benchmark. The child may write and read compiled bytecode whatever PYTHONDONTWRITEBYTECODE says
    here: an installed package has its .pyc files, and compiling every module from source again in each run adds
    about 0.2 s of CPU that no user pays."""
    kw["env"] = {k: v for k, v in kw.get("env", os.environ).items() if k != "PYTHONDONTWRITEBYTECODE"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    wall = time.perf_counter() - w0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return proc, wall, cpu


def median_runs(cmd: list[str], runs: int, ok: tuple[int, ...] = (0,), **kw: Any) -> tuple[float, float]:
    """Median wall and CPU seconds of `runs` runs after one untimed warm-up (file cache, .pyc files)."""
    run_timed(cmd, ok, **kw)
    timings = [run_timed(cmd, ok, **kw)[1:] for _ in range(runs)]
    return statistics.median(w for w, _ in timings), statistics.median(c for _, c in timings)


def meshplan_command() -> list[str]:
    exe = Path(sys.executable).with_name("meshplan")
    return [str(exe)] if exe.exists() else [shutil.which("meshplan") or "meshplan"]


def load_note() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm", type=int, default=5, help="warm calls per case (median)")
    parser.add_argument("--runs", type=int, default=3, help="whole-process runs per case (median, after a warm-up)")
    parser.add_argument("--case", action="append", default=[], help="only cases whose label contains this")
    parser.add_argument("--no-process", action="store_true", help="skip the whole-process `meshplan plan` runs")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.warm)
        return 0

    print(f"# {load_note()}; other jobs may share the machine: compare CPU columns, not only wall")
    print(f"# cold = first search in a fresh process (topology already built), warm = median of {args.warm}, "
          f"plan = median of {args.runs} whole `meshplan plan --top 1` runs; +disk = with the coefficient disk cache")
    print(f"{'':50s} {'':7s} {'cold':>14s} {'+disk':>14s} {'warm':>15s} {'plan':>14s} {'+disk':>14s}")
    print(f"{'case':50s} {'topo s':>7s} {'wall s':>7s} {'cpu':>6s} {'wall s':>7s} {'cpu':>6s} {'wall ms':>8s} "
          f"{'cpu':>6s} {'wall s':>7s} {'cpu':>6s} {'wall s':>7s} {'cpu':>6s} {'shapes':>6s} {'rows':>8s}  best layout")
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for index, case in enumerate(cases()):
            if args.case and not any(c in case.label for c in args.case):
                continue
            env = dict(os.environ, COLUMNS="200", MESHPLAN_CACHE_DIR=str(Path(tmp) / f"cache{index}"))
            child_cmd = [sys.executable, __file__, "--child", str(index), "--warm", str(args.warm)]
            r = json.loads(run_timed(child_cmd, cwd=ROOT, env=env)[0].stdout.strip().splitlines()[-1])
            again = json.loads(run_timed([*child_cmd[:-1], "0"], cwd=ROOT, env=env)[0].stdout.strip().splitlines()[-1])
            r["disk_s"], r["disk_cpu"] = again["cold_s"], again["cold_cpu"]
            for name in ("plan", "plan_disk"):
                r[f"{name}_s"] = r[f"{name}_cpu"] = float("nan")
            if not args.no_process:
                cmd = [*meshplan_command(), "plan", *case.cli_args(model_file(case, Path(tmp))), "--top", "1"]
                # A case where nothing fits is a proven answer too: `plan` says why and exits 2.
                ok = (0,) if r["best"] != "none fits" else (2,)
                off = dict(env, MESHPLAN_CACHE_DIR="off")
                r["plan_s"], r["plan_cpu"] = median_runs(cmd, args.runs, ok, cwd=tmp, env=off)
                r["plan_disk_s"], r["plan_disk_cpu"] = median_runs(cmd, args.runs, ok, cwd=tmp, env=env)
            results[case.label] = r
            print(f"{case.label:50s} {r['topo_s']:7.3f} {r['cold_s']:7.3f} {r['cold_cpu']:6.3f} {r['disk_s']:7.3f} "
                  f"{r['disk_cpu']:6.3f} {r['warm_s'] * 1e3:8.1f} {r['warm_cpu']:6.3f} {r['plan_s']:7.3f} "
                  f"{r['plan_cpu']:6.3f} {r['plan_disk_s']:7.3f} {r['plan_disk_cpu']:6.3f} {r['shapes']:6d} "
                  f"{r['rows']:8d}  {r['best']}", flush=True)
    if not results:
        return 0
    print()
    print(f"slowest cold search: {max(r['cold_s'] for r in results.values()):.3f} s wall, "
          f"{max(r['cold_cpu'] for r in results.values()):.3f} s CPU")
    print(f"slowest warm search: {max(r['warm_s'] for r in results.values()) * 1e3:.1f} ms wall, "
          f"{max(r['warm_cpu'] for r in results.values()) * 1e3:.1f} ms CPU (target < 100 ms)")
    if not args.no_process:
        for name, what in (("plan", "disk cache off"), ("plan_disk", "disk cache filled")):
            print(f"slowest whole `meshplan plan`, {what}: {max(r[name + '_s'] for r in results.values()):.3f} s "
                  f"wall, {max(r[name + '_cpu'] for r in results.values()):.3f} s CPU (target < 1.0 s wall)")
    small = next((r for label, r in results.items() if label.startswith("llama3-70b on 64 ")), None)
    large = next((r for label, r in results.items() if label.startswith("llama3-70b on 65,536 ")), None)
    if small and large:
        print(f"warm growth 64 -> 65,536 GPUs: {large['warm_s'] / small['warm_s']:.1f}x wall, "
              f"{large['warm_cpu'] / small['warm_cpu']:.1f}x CPU (target <= 3x)")
    print("\npicks: predicted MFU, error band (real step time vs predicted) and what each extrapolates")
    for label, r in results.items():
        if "mfu" in r:
            print(f"{label:50s} MFU {100 * r['mfu']:5.1f} %  band {100 * r['band'][0]:+.1f} .. {100 * r['band'][1]:+.1f} %"
                  f"  ({r['basis']})")
            for item in r["extrapolations"]:
                print(f"{'':52s}extrapolates: {item}")
    print("picks above their GPU family's best published MFU without an extrapolation saying so: "
          f"{sum(bool(r.get('mfu_unexplained')) for r in results.values())}")
    print(f"# {load_note()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
