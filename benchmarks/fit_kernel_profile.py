"""Turn benchmarks/measure_kernels.py's JSON (run on a GPU) into the GPU profile's kernel figures.

    .venv/bin/python benchmarks/fit_kernel_profile.py benchmarks/data/h200_kernels.json

GEMM curve (planner.cost.efficiency): time = (F + half_flops) / (peak * max_fraction), fitted by relative least
squares (planner.calibration.fit.fit_gemm) over every measured GEMM of at least 2^31 FLOP (1024^3 and up; below
that kernel launch dominates and no training GEMM is that small). Fused attention: the cost model times the
forward as (F + attention_half_flops) / (peak * attention_efficiency) and the backward as 2.5x it, so the fit is
of forward + backward time against 3.5 F (F = causal forward FLOPs, 2*b*heads*s^2*d).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import hardware_profiles
from planner.calibration.fit import fit_affine, fit_gemm

SMALLEST_GEMM_FLOPS = 2.0**31


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("measured", help="JSON written by benchmarks/measure_kernels.py")
    ap.add_argument("--gpu", default="h200", help="profile whose datasheet peak the fractions refer to")
    args = ap.parse_args()
    data = json.loads(Path(args.measured).read_text())
    peak = hardware_profiles.gpu(args.gpu).peak_flops["bf16"]
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
