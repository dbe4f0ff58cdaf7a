"""Turn benchmarks/measure_kernels.py's JSON (run on a GPU) into the GPU profile's kernel figures.

    .venv/bin/python benchmarks/fit_kernel_profile.py benchmarks/data/h200_kernels.json

GEMM curve (planner.cost.efficiency): time = (F + half_flops) / (peak * max_fraction), fitted by relative least
squares (planner.calibration.fit.fit_gemm) over every measured GEMM of at least 2^31 FLOP (1024^3 and up; below
that kernel launch dominates and no training GEMM is that small). Fused attention: the cost model times the
forward as (F + attention_half_flops) / (peak * attention_efficiency) and the backward as 2.5x it, so the fit is
of forward + backward time against 3.5 F (F = causal forward FLOPs, 2*b*heads*s^2*d).

A file from `measure_kernels.py --shapes` (the validated runs' own GEMMs, training_gemm_shapes.py) gets the
question it was measured for: does a FLOP-only curve time the training GEMMs, or does the inner dimension K matter?
It prints the curve refitted on those shapes and its relative residuals by pass and by K band, next to the
residuals of the profile's committed curve (the profile named by --gpu).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

import hardware_profiles
from planner.calibration.fit import GemmFit, fit_affine, fit_gemm
from planner.cost.efficiency import gemm_time_s

SMALLEST_GEMM_FLOPS = 2.0**31


K_BANDS = [0, 512, 1024, 2048, 4096, 8192, np.inf]
K_BAND_LABELS = ["K < 512", "512-1023", "1024-2047", "2048-4095", "4096-8191", "K >= 8192"]


def training_residuals(data: dict, gpu_name: str) -> tuple[pd.DataFrame, GemmFit]:
    """Per training GEMM of at least 2^31 FLOP: the relative residual (predicted / measured - 1, per cent) of the
    profile's committed curve (`committed_pct`) and of the curve refitted on these shapes (`refit_pct`), with its
    K band; and that refitted curve."""
    gpu = hardware_profiles.gpu(gpu_name)
    peak = gpu.peak_flops["bf16"]
    df = pd.DataFrame(data["training_gemm"])
    df = df[df["flops"] >= SMALLEST_GEMM_FLOPS].copy()
    if df.empty:
        raise ValueError("no training GEMM of 2^31 FLOP or more in the file")
    curve = fit_gemm(list(df["flops"]), list(df["time_s"]))
    committed = gpu.matmul_efficiency
    flops = df["flops"].to_numpy()
    committed_s = gemm_time_s(flops, peak, committed.max_fraction, committed.half_flops)
    df["committed_pct"] = 100 * (committed_s / df["time_s"] - 1)
    df["refit_pct"] = 100 * (gemm_time_s(flops, curve.rate_flops, 1.0, curve.half_flops) / df["time_s"] - 1)
    df["k_band"] = pd.cut(df["k"], K_BANDS, right=False, labels=K_BAND_LABELS)
    if "reference_time_s" in df:
        # The reference cube timed before each shape (measure_kernels.py): each time scaled to the first
        # reference's speed, so a GPU slowing down over the run is not read as a shape effect.
        scale = df["reference_time_s"].iloc[0] / df["reference_time_s"]
        df["drift_free_pct"] = 100 * (committed_s / (df["time_s"] * scale) - 1)
    return df, curve


def training_shape_report(data: dict, gpu_name: str) -> str:
    """The residuals of `training_residuals` by pass and by inner dimension K (see the module docstring)."""
    df, curve = training_residuals(data, gpu_name)
    gpu = hardware_profiles.gpu(gpu_name)
    committed, peak = gpu.matmul_efficiency, gpu.peak_flops["bf16"]
    lines = [f"{data['device']} (torch {data['torch']}): {len(df)} training GEMMs of {len(data['training_gemm'])} timed",
             f"committed curve ({gpu_name}): max_fraction {committed.max_fraction:.3f}, half_flops {committed.half_flops:.3g}",
             f"refitted on these shapes:  max_fraction {curve.rate_flops / peak:.3f}, half_flops {curve.half_flops:.3g} "
             f"(rms relative error {100 * curve.rms_rel_error:.1f} %)",
             "predicted / measured - 1, per cent (negative: the curve times the GEMM faster than it ran):"]
    columns = ["committed_pct", "refit_pct"]
    if "drift_free_pct" in df:
        ref = data["reference"]
        rate = ref["flops"] / df["reference_time_s"] / 1e12
        lines.append(f"reference {ref['m']}^3 timed before each shape: {rate.iloc[0]:.0f} TFLOP/s first, "
                     f"{rate.min():.0f}-{rate.max():.0f} over the run, {rate.iloc[-1]:.0f} last "
                     "(drift_free_pct: the committed curve against times scaled to the first reference)")
        columns.append("drift_free_pct")
    for by in ("pass", "k_band"):
        table = df.groupby(by, observed=True)[columns].agg(["count", "mean", "min", "max"])
        lines.append(table.round(1).to_string())
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("measured", help="JSON written by benchmarks/measure_kernels.py")
    ap.add_argument("--gpu", default="h200", help="profile whose datasheet peak the fractions refer to")
    args = ap.parse_args()
    data = json.loads(Path(args.measured).read_text())
    peak = hardware_profiles.gpu(args.gpu).peak_flops["bf16"]
    if "training_gemm" in data:
        print(training_shape_report(data, args.gpu))
        return
    gemms = [g for g in data["gemm"] if g["flops"] >= SMALLEST_GEMM_FLOPS]
    curve = fit_gemm([g["flops"] for g in gemms], [g["time_s"] for g in gemms])
    attn = data["attention"]
    fa = fit_affine([3.5 * a["forward_flops"] for a in attn], [a["forward_backward_s"] for a in attn])
    efficiency = 1.0 / (fa.slope * peak)
    half = fa.intercept * peak * efficiency / 3.5
    print(f"{data['device']} (torch {data['torch']}), peak {peak / 1e12:.1f} TFLOP/s bf16")
    print(f"matmul_efficiency: max_fraction {curve.rate_flops / peak:.3f}, half_flops {curve.half_flops:.3g} "
          f"({len(gemms)} GEMMs, rms relative error {100 * curve.rms_rel_error:.1f} %)")
    print(f"attention_efficiency {efficiency:.3f}, attention_half_flops {half:.3g} "
          f"({len(attn)} shapes, rms relative error {100 * fa.rms_rel_error:.1f} %, fixed {fa.intercept * 1e6:.0f} us "
          "per forward+backward call)")


if __name__ == "__main__":
    main()
