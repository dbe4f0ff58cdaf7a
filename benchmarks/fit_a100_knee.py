"""Fit the A100's GEMM knee (`matmul_efficiency.half_flops`) to published A100 GEMM throughput by size.

    .venv/bin/python benchmarks/fit_a100_knee.py

The cost model times a GEMM of F FLOP as (F + half_flops) / (peak * max_fraction) (planner.cost.efficiency). The
plateau max_fraction stays the profile's measured MAMF (0.869 of 312 TFLOP/s, stas00/ml-engineering); this script
fits only the knee to published per-size throughputs, with the same selection rule as
benchmarks/fit_kernel_profile.py (every GEMM of at least 2^31 FLOP, i.e. 1024^3 and up) and the same relative least
squares (every point counts by its relative error), the rate held fixed (planner.calibration.fit.fit_gemm_knee).

ADOPTED data (the fit that goes into hardware_profiles/data/gpus/a100-*.yaml): cuBLAS fp16, square M = N = K,
printed by Triton's matrix-multiplication tutorial (python/tutorials/03-matrix-multiplication.py: torch.matmul timed
by triton.testing.do_bench, which flushes L2 before every call and times each call with CUDA events; TFLOPS =
2 M N K / time) on an A100, quoted in https://github.com/triton-lang/triton/issues/3551 (2024-04-03, "Performance gap
for MVM example on A100 in fp16"), column "cuBLAS". The quote stops at 3200 in our copy, so the sweep ends there.

CROSS-CHECKS (printed, not fitted into the profile):
- https://github.com/triton-lang/triton/issues/7085 (2025-06-06, "release3.3 03-matrix-multiplication performance
  drop on A100"): the same tutorial's cuBLAS column on another A100 gives 99.86 TFLOPS at 1024^3 and 129.83 at 1152^3
  (rows the fit can be judged on; the rest of its table is not in our copy).
- Triton's own A100 regression thresholds, python/test/regression/test_performance.py (triton-lang/triton,
  `matmul_data['a100']`): utilisation of Triton's fp16 matmul against the tensor-core peak at the current SM clock,
  measured on its A100 CI runner with the clock locked at 1350 MHz (`sm_clocks`). Three versions of the file are
  quoted below; the fitted knee in fraction space (max_fraction 0.869) is printed for each.
- NOT used: https://github.com/triton-lang/triton/issues/6523 (2025-11-25): its cuBLAS column plateaus at about
  176 TFLOPS (0.56 of peak, 1792^3 117 below 1536^3 142), far under any A100 SXM MAMF: a power-capped or throttled
  card, which the profile's plateau does not describe.
"""

from __future__ import annotations

import numpy as np
from fit_kernel_profile import SMALLEST_GEMM_FLOPS  # the same cut as the H200 fit (a sibling script)

import hardware_profiles
from planner.calibration.fit import fit_gemm_knee

# (n for M = N = K = n, cuBLAS TFLOP/s) verbatim from triton-lang/triton#3551, "matmul-performance-fp16" table.
CUBLAS_A100_TRITON_3551 = [
    (256, 2.978909), (384, 11.059200), (512, 21.845333), (640, 39.384616), (768, 63.195428), (896, 73.943582),
    (1024, 104.857603), (1152, 129.825388), (1280, 157.538463), (1408, 151.438217), (1536, 176.947204),
    (1664, 179.978245), (1792, 172.914215), (1920, 209.454544), (2048, 233.016881), (2176, 221.138985),
    (2304, 246.266731), (2432, 219.488001), (2560, 244.537310), (2688, 213.107054), (2816, 230.763007),
    (2944, 247.940455), (3072, 229.243346), (3200, 244.274821),
]
# The same tutorial on another A100, triton-lang/triton#7085, columns "3.3cuBLAS" (= "3.2cuBLAS" on these rows).
CUBLAS_A100_TRITON_7085 = [(1024, 99.86), (1152, 129.83)]

# Triton's regression thresholds for A100 fp16 (fraction of the tensor-core peak at the measured SM clock), square
# shapes from python/test/regression/test_performance.py, three versions of `matmul_data['a100']`:
TRITON_A100_THRESHOLDS = {
    "do_bench, SM clock asserted at 1350 MHz": [(256, 0.010), (512, 0.061), (1024, 0.287), (2048, 0.604),
                                                (4096, 0.842), (8192, 0.896)],
    "do_bench, 'A100 in the CI server is slow-ish'": [(512, 0.08), (1024, 0.33), (2048, 0.62), (4096, 0.81),
                                                      (8192, 0.77)],
    "do_bench_cudagraph": [(512, 0.108), (1024, 0.355), (2048, 0.653), (8192, 0.839)],
}


def _square(points: list[tuple[int, float]], tflops: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(FLOPs, throughput FLOP/s) of the square GEMMs at or above the fit's smallest size."""
    rows = [(2.0 * n**3, v * 1e12 if tflops else v) for n, v in points if 2.0 * n**3 >= SMALLEST_GEMM_FLOPS]
    return np.array([f for f, _ in rows]), np.array([r for _, r in rows])


def fit_adopted(max_fraction: float, peak_flops: float) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """The profile's knee from triton-lang/triton#3551: (half_flops, FLOPs, measured s, relative residuals)."""
    flops, achieved = _square(CUBLAS_A100_TRITON_3551)
    times = flops / achieved
    rate = peak_flops * max_fraction
    half = fit_gemm_knee(flops, times, rate)
    return half, flops, times, ((flops + half) / rate - times) / times


def main() -> None:
    gpu = hardware_profiles.gpu("a100-80gb")
    peak, mf = gpu.peak_flops["bf16"], gpu.matmul_efficiency.max_fraction
    rate = peak * mf
    half, flops, times, res = fit_adopted(mf, peak)
    print(f"A100 plateau held at the profile's MAMF: max_fraction {mf} of {peak / 1e12:.0f} TFLOP/s")
    print(f"ADOPTED  cuBLAS fp16 (triton-lang/triton#3551), {len(flops)} GEMMs 1024^3-3200^3: half_flops {half:.3g} "
          f"(fixed {1e6 * half / rate:.1f} us per GEMM), rms relative error {100 * np.sqrt(np.mean(res**2)):.1f} %, "
          f"max {100 * np.max(np.abs(res)):.1f} %; profile has {gpu.matmul_efficiency.half_flops:.3g}")
    for f, t, r in zip(flops, times, res, strict=True):
        n = round((f / 2) ** (1 / 3))
        print(f"  {n:5d}^3  measured {f / t / 1e12:6.1f} TFLOP/s  model {f / ((f + half) / rate) / 1e12:6.1f}  "
              f"time residual {100 * r:+5.1f} %")
    w = 1.0 / times
    (a, b), *_ = np.linalg.lstsq(np.stack([w, flops * w], axis=1), np.ones_like(times), rcond=None)
    print(f"  same points, plateau free too: max_fraction {1 / b / peak:.3f}, half_flops {a / b:.3g} "
          "(the sweep stops at 3200^3, below the plateau; the profile keeps the MAMF)")
    f2, r2 = _square(CUBLAS_A100_TRITON_7085)
    for f, achieved in zip(f2, r2, strict=True):
        model = f / ((f + half) / rate)
        print(f"CHECK    triton-lang/triton#7085 {round((f / 2) ** (1 / 3))}^3: measured {achieved / 1e12:.1f}, "
              f"model {model / 1e12:.1f} TFLOP/s ({100 * (achieved / model - 1):+.1f} %)")
    for label, pts in TRITON_A100_THRESHOLDS.items():
        fl, util = _square(pts, tflops=False)
        # Fraction space: a utilisation u at F means time F / (u P) at the clock's peak P; the knee in FLOP is the
        # same at any clock, so P drops out of h.
        h = fit_gemm_knee(fl, fl / util, mf)
        print(f"CHECK    Triton A100 thresholds ({label}): half_flops {h:.3g} at max_fraction {mf}")


if __name__ == "__main__":
    main()
