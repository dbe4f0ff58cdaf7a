"""Regression guard for the cost model against published runs (benchmarks/published_runs.py on a subset).

The issue's targets (mean |error| <= 5 %, max <= 10 %, published layout in the top 5 for every case) are not all
met: the full benchmark gives mean |error| 6.3 % on the Megatron-Core 2024 H100 runs, 8.2 % on the 2021
Megatron-LM runs, and 30-79 % on the 2021 DeepSpeed ZeRO-3 baselines (see the benchmark's output). This test
keeps one case of each Megatron family in the band the model reaches now, on the side it errs, and checks that
the planner ranks the published layout where it does now, so an accidental change to the cost model fails CI.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import published_runs  # noqa: E402

CASES = {
    # case id: ((lowest, highest) allowed error in %, worst allowed rank of the published layout)
    "narayanan2021_table1_18.4B": ((-10.0, 0.0), None),
    "narayanan2021_table1_1008.0B": ((-10.0, 0.0), 5),
    "megatron_core_2024_h100_177B": ((-5.0, 5.0), None),
    "narayanan2021_table2_PTD-P_529.6B_1120gpu": ((-10.0, 0.0), 5),
}


def test_published_subset_stays_in_its_error_band() -> None:
    df = published_runs.run(list(CASES))
    assert sorted(df["case"]) == sorted(CASES)
    for row in df.itertuples():
        (low, high), worst_rank = CASES[row.case]
        assert np.isfinite(row.predicted_s) and row.predicted_s > 0, row.case
        assert low <= row.error_pct <= high, f"{row.case}: {row.error_pct:.1f} % outside [{low}, {high}]"
        if worst_rank is not None:
            assert row.rank.isdigit() and int(row.rank) <= worst_rank, f"{row.case}: published layout ranks {row.rank}"


def test_framework_pins_stay_inside_the_framework() -> None:
    """The published layout is pinned inside its framework's feature set (a 2021 run gets no sequence
    parallelism, no distributed optimizer, no zero-bubble schedule), and the rank search uses the same set."""
    case = next(c for c in published_runs.load_cases() if c["id"] == "narayanan2021_table1_145.6B")
    pins = published_runs._pins(case)
    assert pins["sequence_parallel"] is False and pins["zero"] == 0 and pins["schedule"] == "interleaved"
    stated = published_runs._stated(case)
    assert "tp" not in stated and "dp" not in stated and stated["recompute"] == "full"
