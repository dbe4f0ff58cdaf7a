"""The Blackwell GEMM knees are the fit of benchmarks/fit_xla_matmul_table.py to OpenXLA's published timings, and
the transcribed table is whole: every shape of its grid, every value a measured time."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

import hardware_profiles

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def test_table_holds_the_full_grid_of_measured_times():
    import fit_xla_matmul_table

    df = fit_xla_matmul_table.load_table()
    sizes = (256, 512, 1024, 2048, 4096)
    grid = set(itertools.product((1, 2, 4), sizes, sizes, sizes))
    for arch in ("sm_90", "sm_100"):
        rows = df[df["arch"] == arch]
        assert set(zip(rows["b"], rows["m"], rows["n"], rows["k"], strict=True)) == grid and len(rows) == len(grid)
    # The source stores 2 b m n k / (whole nanoseconds): a mistyped digit would almost never land on one.
    ns = df["F"] / df["flops_per_s"] * 1e9
    assert np.max(np.abs(df["flops_per_s"] - df["F"] / (np.round(ns) * 1e-9))) < 2.0


@pytest.mark.parametrize("name", ["b200", "gb200"])
def test_blackwell_profiles_hold_the_fitted_knee(name: str):
    import fit_xla_matmul_table

    df = fit_xla_matmul_table.load_table()
    half, res = fit_xla_matmul_table.knee_at_profile_plateau(df, name, fit_xla_matmul_table.ADOPTED[name])
    assert len(res) == 267
    assert hardware_profiles.gpu(name).matmul_efficiency.half_flops == pytest.approx(half, rel=0.01)
    assert np.sqrt(np.mean(res**2)) < 0.15


def test_the_report_runs_on_the_committed_data():
    import fit_xla_matmul_table

    df = fit_xla_matmul_table.load_table()
    lines = (fit_xla_matmul_table.report_adopted(df) + fit_xla_matmul_table.report_hopper(df)
             + fit_xla_matmul_table.report_inner_dimension(df))
    assert sum(line.startswith("ADOPTED") for line in lines) == 2
    assert any("4096x4096x4096: our H200" in line for line in lines)
