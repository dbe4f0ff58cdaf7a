"""Regression guard for the cost model against published runs (benchmarks/published_runs.py on a subset).

The issue's targets (mean |error| <= 5 %, max <= 10 %, published layout in the top 5) are NOT met yet: the full
benchmark gives a mean |error| of 27 % (PTD-P runs -11..-28 %, the 2021 ZeRO-3 runs -42..-82 %). This test
keeps the PTD-P cases from drifting further while the model is improved: every case must produce a finite
prediction within the band the current model reaches, on the side it errs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import published_runs  # noqa: E402

CASES = {
    # case id: (lowest, highest) allowed error in % (current model: see module docstring)
    "narayanan2021_table1_18.4B": (-20.0, 0.0),
    "megatron_core_2024_h100_32B": (-20.0, 0.0),
    "narayanan2021_table2_PTD-P_529.6B_1120gpu": (-32.0, 0.0),
}


def test_published_subset_stays_in_its_error_band() -> None:
    df = published_runs.run(list(CASES))
    assert sorted(df["case"]) == sorted(CASES)
    for row in df.itertuples():
        low, high = CASES[row.case]
        assert np.isfinite(row.predicted_s) and row.predicted_s > 0, row.case
        assert low <= row.error_pct <= high, f"{row.case}: {row.error_pct:.1f} % outside [{low}, {high}]"
