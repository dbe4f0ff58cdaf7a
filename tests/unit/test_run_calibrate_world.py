"""`meshplan run --calibrate` keeps the world size the user asked for, or says why it runs fewer ranks.

The calibration itself (a torchrun job, tested in tests/distributed/test_run_replan.py) is replaced by a
profile whose gloo link is a thousand times slower than this machine's: on it, one rank is the fastest plan
of the tiny model, which is what real calibrations of busy 2-core machines measure.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cli_inputs import profile_data

import hardware_profiles as hp
from planner.cli import run as run_cli
from planner.cli import run_replan


@pytest.fixture
def slow_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    link = profile_data("links", "loopback-gloo")
    link.update(name="slow-loopback", bandwidth_Bps=link["bandwidth_Bps"] / 1000, latency_s=link["latency_s"] * 1000)
    cluster = profile_data("clusters", "local-cpu")
    cluster["name"] = "calibrated"
    cluster["node_groups"][0]["node"]["scaleup_link"] = "slow.link.yaml"
    (tmp_path / "slow.link.yaml").write_text(yaml.safe_dump(link))
    path = tmp_path / "calibrated.yaml"
    path.write_text(yaml.safe_dump(cluster))
    monkeypatch.setattr(run_replan, "calibrate_here", lambda run_dir, nproc: path)
    return path


def test_the_requested_world_size_is_kept(tmp_path: Path, slow_profile: Path) -> None:
    path = run_replan.calibrated_plan_file(None, tmp_path / "run", 4, run_cli._default_plan, keep_world=True)
    from planner.plan import Plan

    plan = Plan.load(path)
    assert plan.world_size == 4 and plan.prediction.idle_gpus == 0
    links = hp.Cluster.model_validate(plan.inputs.cluster).links.values()
    assert any(link.name == "slow-loopback" for link in links)  # planned on the calibrated profile


def test_fewer_ranks_are_explained(tmp_path: Path, slow_profile: Path, capsys: pytest.CaptureFixture) -> None:
    path = run_replan.calibrated_plan_file(None, tmp_path / "run", 4, run_cli._default_plan, keep_world=False)
    from planner.plan import Plan

    plan = Plan.load(path)
    assert plan.world_size < 4  # the slow link makes fewer ranks faster
    err = capsys.readouterr().err
    note = next(ln for ln in err.splitlines() if ln.startswith("note:"))
    assert f"{plan.world_size} rank(s) instead of 4" in note and "pass --nproc 4" in note, note
    assert "communication costs more than the compute it splits" in note
