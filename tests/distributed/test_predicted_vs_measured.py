"""The predicted-vs-measured harness on two layouts: predict on the built-in profile, run both in one
torchrun job of 4 gloo ranks, compare. Asserts the loop runs and its table is complete and finite.

The benchmark-grade runs (6 layouts with a calibration: `--quick`; 8 layouts over 3 calibrated rounds: the
default) live in benchmarks/predicted_vs_measured.py, whose accuracy figures are read from a full run, not
asserted on a shared CI host.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from dist_launch import cpu_env

pytestmark = pytest.mark.distributed
REPO = Path(__file__).resolve().parents[2]
LAYOUTS = ["dp4", "tp2xpp2-1f1b"]


@pytest.mark.timeout(240)
def test_harness_table_is_complete_and_finite(tmp_path: Path) -> None:
    out = tmp_path / "pvm.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "predicted_vs_measured.py"), "--quick",
                           "--cluster", "local-cpu", "--model", "tiny", "--layouts", ",".join(LAYOUTS),
                           "--out", str(tmp_path / "run"), "--json", str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=230, env=cpu_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    table = doc["table"]
    assert [row["layout"] for row in table] == LAYOUTS
    for row in table:
        assert row["predicted_ms"] > 0 and row["measured_ms"] > 0 and math.isfinite(row["error"]), row
        assert row["steps"] == len(doc["step_times_s"][row["layout"]]) > 0
    s = doc["summary"]
    assert math.isfinite(s["mean_abs_error"]) and -1.0 <= s["spearman"] <= 1.0
    assert s["pick"] in LAYOUTS and s["measured_best"] in LAYOUTS
    assert "mean absolute error" in proc.stdout and "Spearman" in proc.stdout
