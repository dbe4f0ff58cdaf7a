"""The predicted-vs-measured benchmark in its quick mode: calibrate, predict 6 layouts, run them on 4 gloo
ranks, compare. Asserts the loop runs and its table is complete and finite; the accuracy targets are read
from the full run (benchmarks/predicted_vs_measured.py without --quick), not asserted on a shared CI host."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed
REPO = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(180)
def test_quick_benchmark_table_is_complete_and_finite(tmp_path: Path) -> None:
    out = tmp_path / "pvm.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "predicted_vs_measured.py"), "--quick",
                           "--out", str(tmp_path / "run"), "--json", str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    table = doc["table"]
    assert len(table) == 6 and len({row["layout"] for row in table}) == 6
    for row in table:
        assert row["predicted_ms"] > 0 and row["measured_ms"] > 0 and math.isfinite(row["error"]), row
        assert row["steps"] == len(doc["step_times_s"][row["layout"]]) > 0
    s = doc["summary"]
    assert math.isfinite(s["mean_abs_error"]) and -1.0 <= s["spearman"] <= 1.0
    assert s["pick"] in {row["layout"] for row in table} and s["measured_best"] in {row["layout"] for row in table}
    assert "mean absolute error" in proc.stdout and "Spearman" in proc.stdout
