"""`meshplan calibrate --quick` end to end on 2 gloo ranks: torchrun measures, the planner fits and writes a
profile set that loads through hardware_profiles (every number sourced) and that `meshplan plan` takes; the
all_to_all it fits is the executor's EP exchange, and an EP layer it ran is reported against the model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dist_launch import cpu_env

import hardware_profiles as hp

pytestmark = pytest.mark.distributed


def meshplan(args: list[str], cwd: Path, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner.cli.main", *args], cwd=cwd, env=cpu_env(),
                          capture_output=True, text=True, timeout=timeout_s)


@pytest.mark.timeout(120)
def test_quick_calibration_on_two_ranks_writes_a_profile_the_planner_uses(tmp_path: Path) -> None:
    (tmp_path / "prof").mkdir()  # meshplan creates no folders for its output files
    proc = meshplan(["calibrate", "--quick", "--nproc", "2", "--out", "prof/cal.yaml", "--json", "cal.json"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "GEMM fp32 plateau" in proc.stdout and "all_reduce n=2" in proc.stdout
    files = [tmp_path / "prof" / name for name in ("cal.yaml", "cal.gpu.yaml", "cal.link.yaml")]
    assert all(f.is_file() for f in files)
    cluster = hp.cluster(str(files[0]))
    assert cluster.num_gpus == 2
    (gpu,) = cluster.gpus.values()
    assert gpu.vendor == "cpu" and gpu.peak_flops["fp32"] > 1e8 and gpu.framework_overhead is not None
    assert 1.0 <= gpu.devices_at_full_speed <= 2.0
    (link,) = cluster.links.values()
    assert {m.kind for m in link.measured_collectives} == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p"}
    for f in files:
        sources = yaml.safe_load(f.read_text())["sources"]
        assert all(v.startswith("measured by meshplan calibrate on ") for v in sources.values()), f
    doc = json.loads((tmp_path / "cal.json").read_text())
    assert doc["processes"] == 2 and doc["raw"]["backend"] == "gloo"
    # The executor's EP layer, executed over the pair, next to the cost model's prediction of it.
    (ep_check,) = [r for r in doc["overhead_report"] if r.get("ep") == 2 and r["tokens"] == 64]
    assert ep_check["measured_forward_s"] > 0 and ep_check["fitted_forward_s"] > 0

    again = meshplan(["calibrate", "--quick", "--nproc", "2", "--out", "prof/cal.yaml"], tmp_path)
    assert again.returncode == 2 and "--force" in again.stderr.strip().splitlines()[-1]

    plan = meshplan(["plan", "--model", "tiny", "--cluster", str(files[0]), "--global-batch", "8", "--seq-len", "64",
                     "--json", "-"], tmp_path)
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert json.loads(plan.stdout)["prediction"]["step_time_s"] > 0
