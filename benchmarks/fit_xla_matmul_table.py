"""Judge and fit the GPU profiles' GEMM curves on OpenXLA's published matmul timings (sm_90 and sm_100, bf16).

    .venv/bin/python benchmarks/fit_xla_matmul_table.py

The cost model times a GEMM of F FLOP as (F + half_flops) / (peak * max_fraction) (planner.cost.efficiency). The
data (benchmarks/data/xla_matmul_perf_table.json, with its source) is OpenXLA's default GEMM performance table:
375 batched bf16 matmuls per GPU architecture, b in {1, 2, 4} and m, n, k in {256 ... 4096}, each a measured time.
Its shapes stop at 4096, below the plateau of the large GPUs, so the plateau stays each profile's MAMF (a sweep
over large shapes) and the table decides the knee, as benchmarks/fit_a100_knee.py does for the A100: relative
least squares over every GEMM of at least 2^31 FLOP (fit_kernel_profile.SMALLEST_GEMM_FLOPS), the plateau held
(planner.calibration.fit.fit_gemm_knee).

ADOPTED: the knee of the Blackwell profiles (b200, gb200), whose half_flops was an estimate (a fixed 4 us per
GEMM). The rows are a B200's and the sm_90 rows an H100's: they entered the table in OpenXLA 71feeddf ("Update
latency hiding scheduler cost models for B200/H100 FP8 matmul"), and later revisions key the sm_100 rows
sm_100_B200. GB200 takes the same fit at its own plateau (LESS SURE: its die runs at a higher power limit). Each
time is one GEMM kernel's device time (the profiler's kernel tracer, median of 5 runs, random inputs), so the
table sees boost clocks, not a GPU under sustained load.

CROSS-CHECKS (printed, not fitted into any profile):
- sm_90 against the Hopper curve measured on our H200 (h100-sxm, h200, h800 share it): the committed curve's
  residuals on the table, the knee at the committed plateau, the curve refitted free, and the shapes both data
  sets timed (benchmarks/data/h200_kernels.json).
- The inner-dimension question (does K matter beyond the FLOP count?): the free FLOP-only refit's residuals by k.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from fit_kernel_profile import SMALLEST_GEMM_FLOPS  # the same cut as the H200 and A100 fits (sibling scripts)

import hardware_profiles
from planner.calibration.fit import fit_gemm, fit_gemm_knee
from planner.cost.efficiency import gemm_time_s

DATA = Path(__file__).resolve().parent / "data" / "xla_matmul_perf_table.json"
H200_KERNELS = Path(__file__).resolve().parent / "data" / "h200_kernels.json"
# The profiles whose knee the table sets, and the architecture key each is read from.
ADOPTED = {"b200": "sm_100", "gb200": "sm_100"}
# The profile whose curve the sm_90 rows check (h200 and h800 carry the same measured curve).
HOPPER_PROFILE = "h100-sxm"


def load_table(path: Path = DATA) -> pd.DataFrame:
    """The table's rows with their FLOPs `F` (2 b m n k) and measured seconds `t`; its source in `attrs`."""
    doc = json.loads(path.read_text())
    df = pd.DataFrame(doc["rows"], columns=doc["columns"])
    df.attrs["source"] = doc["source"]
    df["F"] = 2.0 * df["b"] * df["m"] * df["n"] * df["k"]
    df["t"] = df["F"] / df["flops_per_s"]
    return df


def fitted_rows(df: pd.DataFrame, arch: str) -> pd.DataFrame:
    """The architecture's rows the fits use: GEMMs of at least 2^31 FLOP."""
    return df[(df["arch"] == arch) & (df["F"] >= SMALLEST_GEMM_FLOPS)]


def knee_at_profile_plateau(df: pd.DataFrame, gpu_name: str, arch: str) -> tuple[float, np.ndarray]:
    """The profile's knee fitted to the architecture's rows with its plateau (MAMF) held: (half_flops, relative
    time residuals)."""
    gpu = hardware_profiles.gpu(gpu_name)
    rate = gpu.peak_flops["bf16"] * gpu.matmul_efficiency.max_fraction
    rows = fitted_rows(df, arch)
    flops, times = rows["F"].to_numpy(), rows["t"].to_numpy()
    half = fit_gemm_knee(flops, times, rate)
    return half, gemm_time_s(flops, rate, 1.0, half) / times - 1.0


def _stats(res: np.ndarray) -> str:
    return (f"mean {100 * np.mean(res):+.1f} %, rms {100 * np.sqrt(np.mean(res**2)):.1f} %, "
            f"max |.| {100 * np.max(np.abs(res)):.1f} %")


def report_adopted(df: pd.DataFrame) -> list[str]:
    lines = []
    for name, arch in ADOPTED.items():
        gpu = hardware_profiles.gpu(name)
        me, peak = gpu.matmul_efficiency, gpu.peak_flops["bf16"]
        half, res = knee_at_profile_plateau(df, name, arch)
        lines.append(f"ADOPTED  {name}: {arch}, {len(res)} GEMMs of 2^31 FLOP and up, plateau held at the MAMF "
                     f"{me.max_fraction} of {peak / 1e12:.0f} TFLOP/s: half_flops {half:.3g} (fixed "
                     f"{1e6 * half / (peak * me.max_fraction):.1f} us per GEMM), {_stats(res)}; profile has "
                     f"{me.half_flops:.3g}")
    return lines


def report_hopper(df: pd.DataFrame) -> list[str]:
    gpu = hardware_profiles.gpu(HOPPER_PROFILE)
    me, peak = gpu.matmul_efficiency, gpu.peak_flops["bf16"]
    rows = fitted_rows(df, "sm_90")
    committed = gemm_time_s(rows["F"].to_numpy(), peak, me.max_fraction, me.half_flops) / rows["t"].to_numpy() - 1
    half, res = knee_at_profile_plateau(df, HOPPER_PROFILE, "sm_90")
    free = fit_gemm(list(rows["F"]), list(rows["t"]))
    lines = [f"CHECK    sm_90 against {HOPPER_PROFILE}'s curve (max_fraction {me.max_fraction}, half_flops "
             f"{me.half_flops:.3g}; measured on an H200), {len(rows)} GEMMs: committed {_stats(committed)} "
             "(positive: the curve is slower than the table)",
             f"         knee at the committed plateau {half:.3g} ({_stats(res)}); refitted free: max_fraction "
             f"{free.rate_flops / peak:.3f}, half_flops {free.half_flops:.3g} (rms {100 * free.rms_rel_error:.1f} %)"]
    h200 = json.loads(H200_KERNELS.read_text())
    ours = pd.DataFrame(h200["gemm"])
    both = ours.merge(df[(df["arch"] == "sm_90") & (df["b"] == 1)], on=["m", "n", "k"], suffixes=("", "_xla"))
    both = both[both["flops"] >= SMALLEST_GEMM_FLOPS]
    for r in both.itertuples():
        lines.append(f"         {r.m}x{r.n}x{r.k}: our H200 {r.flops / r.time_s / peak:.3f} of peak, the table's sm_90 "
                     f"{r.flops_per_s / peak:.3f}")
    return lines


def report_inner_dimension(df: pd.DataFrame) -> list[str]:
    lines = ["CHECK    inner dimension: the free FLOP-only refit's mean time residual by k (negative: those GEMMs "
             "run slower than their FLOP count says)"]
    for arch in ("sm_90", "sm_100"):
        rows = fitted_rows(df, arch).copy()
        free = fit_gemm(list(rows["F"]), list(rows["t"]))
        rows["res"] = 100 * (gemm_time_s(rows["F"].to_numpy(), free.rate_flops, 1.0, free.half_flops) / rows["t"] - 1)
        by_k = rows.groupby("k")["res"].mean()
        lines.append(f"         {arch}: " + ", ".join(f"k {k} {v:+.1f} %" for k, v in by_k.items()))
    return lines


def main() -> None:
    df = load_table()
    print(f"{df.attrs['source']}\n{len(df)} rows: " + ", ".join(f"{a} {n}" for a, n in df["arch"].value_counts().items()))
    for line in report_adopted(df) + report_hopper(df) + report_inner_dimension(df):
        print(line)


if __name__ == "__main__":
    main()
