"""The A100 GEMM knee in the profiles is the fit of benchmarks/fit_a100_knee.py to its published points."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import hardware_profiles
from planner.calibration.fit import fit_gemm_knee

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def test_profiles_hold_the_fitted_knee():
    import fit_a100_knee

    gpu = hardware_profiles.gpu("a100-80gb")
    half, flops, times, res = fit_a100_knee.fit_adopted(gpu.matmul_efficiency.max_fraction, gpu.peak_flops["bf16"])
    assert len(flops) == 18 and np.all(flops >= fit_a100_knee.SMALLEST_GEMM_FLOPS)
    for name in ("a100-80gb", "a100-40gb"):
        assert hardware_profiles.gpu(name).matmul_efficiency.half_flops == pytest.approx(half, rel=0.01)
    assert np.sqrt(np.mean(res**2)) < 0.10


def test_knee_fit_recovers_an_exact_curve():
    flops = np.array([2e9, 2e10, 2e11])
    rate, half = 2.5e14, 4e9
    assert fit_gemm_knee(flops, (flops + half) / rate, rate) == pytest.approx(half, rel=1e-9)
