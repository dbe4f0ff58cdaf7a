"""`meshplan run --calibrate` and `--replan-if-off`: calibrate, (re-)plan on the result, run, report measured
next to predicted. Each test is one quick calibration plus one or two 2-rank launches (2 ranks: the paths are
the same as with 4, at half the processes on the 2-core CI machine)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from dist_launch import cpu_env

from planner.plan import Plan

pytestmark = pytest.mark.distributed


def meshplan(args: list[str], cwd: Path, timeout_s: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner.cli.main", *args], cwd=cwd, env=cpu_env(),
                          capture_output=True, text=True, timeout=timeout_s)


def _metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.timeout(300)
def test_run_calibrate_plans_on_the_calibrated_profile(tmp_path: Path) -> None:
    proc = meshplan(["run", "--calibrate", "--nproc", "2", "--steps", "3", "--run-dir", "r"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "on the calibrated profile" in proc.stderr and "measured vs predicted" in proc.stdout
    plan = Plan.load(tmp_path / "r" / "plan.json")
    assert plan.inputs.cluster["origin"].endswith("calibrated.yaml")
    assert plan.world_size == 2  # --nproc 2 asked for two ranks: the re-plan keeps them
    rows = _metrics(tmp_path / "r" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["predicted_step_time_s"] == pytest.approx(plan.prediction.step_time_s) for r in rows)


@pytest.mark.timeout(300)
def test_replan_if_off_replans_and_continues_from_the_checkpoint(tmp_path: Path) -> None:
    # The built-in local-cpu profile predicts the tiny model's step from FLOPs alone: far too fast on any
    # CPU, so the probe is off by more than 25 % and the run re-plans on a calibrated profile.
    proc = meshplan(["run", "--replan-if-off", "25", "--nproc", "2", "--steps", "8", "--run-dir", "r", "--json",
                     "final.json"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert re.search(r"probe median .* off by more than 25 %", proc.stderr), proc.stderr[-3000:]
    line = next(x for x in proc.stderr.splitlines() if x.startswith("re-planned on the calibrated profile"))
    assert "->" in line and "predicted" in line
    assert "from the step-6 checkpoint" in proc.stderr
    new = Plan.load(tmp_path / "r" / "replanned.json")
    assert new.inputs.cluster["origin"].endswith("calibrated.yaml")
    rows = _metrics(tmp_path / "r" / "continued" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [7, 8]
    assert all(r["predicted_step_time_s"] == pytest.approx(new.prediction.step_time_s) for r in rows)
    summary = json.loads((tmp_path / "final.json").read_text())
    assert summary["layout"] == new.layout.describe() and summary["predicted_step_time_s"] > 0
