"""`meshplan replan` and `hardware_profiles.cluster(embedded, ...)`: re-planning from a plan's own inputs.

The oracle is the planner itself: re-planning local-cpu 8 -> 4 must give exactly the plan a fresh search on
`hardware_profiles.cluster("local-cpu", gpus=4)` gives (same model, workload and hardware content), and
re-planning to the same size must give the plan back.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_inputs import check_refusal, invoke, write

import hardware_profiles as hp
from planner import search
from planner.layout import Workload
from planner.model import preset
from planner.plan import Plan
from planner.replan import changes, replan

WORKLOAD = Workload(global_batch=16, seq_len=64, dtype="fp32")


@pytest.fixture(scope="module")
def plan8() -> Plan:
    return search(preset("tiny"), hp.cluster("local-cpu", gpus=8), WORKLOAD)[0]


@pytest.mark.parametrize(("name", "size", "new"), [
    ("local-cpu", {"gpus": 8}, [{"gpus": 4}, {"gpus": 3}, {"gpus": 16}, {"nodes": 1}]),
    ("dgx-h100", {"nodes": 4}, [{"gpus": 8}, {"gpus": 4}, {"nodes": 2}, {"nodes": 64}]),
    ("hetero-a100-h100", {"nodes": 4}, [{"nodes": 2}, {"gpus": 8}]),
    ("gb200-nvl72", {"nodes": 18}, [{"nodes": 36}, {"gpus": 8}]),
])
def test_embedded_cluster_resizes_like_the_profile(name: str, size: dict, new: list[dict]) -> None:
    embedded = hp.Cluster.model_validate(hp.cluster(name, **size).model_dump(mode="json"))
    assert hp.cluster(embedded).fingerprint() == embedded.fingerprint()  # no size: as it is
    for kw in new:
        assert hp.cluster(embedded, **kw).fingerprint() == hp.cluster(name, **kw).fingerprint(), kw


def test_replan_8_to_4_is_a_fresh_search_on_4(tmp_path: Path, plan8: Plan) -> None:
    old = write(tmp_path / "p8.json", plan8.to_json())
    code, out, err = invoke(["replan", old, "--gpus", "4", "--json", tmp_path / "p4.json"])
    assert code == 0, err
    fresh = search(preset("tiny"), hp.cluster("local-cpu", gpus=4), WORKLOAD)[0]
    new = Plan.load(tmp_path / "p4.json")
    assert new == fresh
    assert new.world_size + new.prediction.idle_gpus == 4
    assert new.inputs.model == plan8.inputs.model and new.inputs.workload == plan8.inputs.workload
    # The table: old and new side by side, changed rows marked.
    rows = {what: (a, b) for what, a, b in changes(plan8, new)}
    assert rows["GPUs (used / in all)"] == ("8 / 8", f"{new.world_size} / 4")
    for line in out.splitlines():
        if line.strip().startswith("GPUs (used / in all)"):
            assert line.rstrip().endswith("*")
        if line.strip().startswith("tp ") and plan8.layout.tp == new.layout.tp:
            assert not line.rstrip().endswith("*")
    assert f"meshplan run {tmp_path / 'p4.json'} --resume" in err


def test_replan_to_the_same_size_gives_the_plan_back(plan8: Plan) -> None:
    again = replan(plan8, gpus=8)
    assert again.layout == plan8.layout
    assert again.prediction == plan8.prediction


def test_replan_uses_the_plans_hardware_not_the_files(tmp_path: Path, plan8: Plan) -> None:
    """A plan made on hardware that differs from today's profile (here: half the memory) keeps its hardware."""
    data = json.loads(plan8.to_json())
    cpu = data["inputs"]["cluster"]["gpus"]["cpu"]
    cpu["memory_bytes"] //= 2
    edited = Plan.model_validate(data)
    new = replan(edited, gpus=4)
    # Per-process share: the plan's host total (8 x its share), split over 4 processes.
    assert new.prediction.memory_per_stage[0].capacity_bytes == cpu["memory_bytes"] * 8 // 4
    assert new.prediction.memory_per_stage[0].capacity_bytes != hp.cluster("local-cpu", gpus=4).gpus["cpu"].memory_bytes


@pytest.mark.parametrize(("args", "needs"), [
    (["--gpus", "2000000"], ("2000000 devices", "1048576")),
    ([], ("--gpus N or --nodes N",)),
    (["--gpus", "4", "--nodes", "1"], ("--gpus N or --nodes N",)),
    (["--gpus", "0"], ("--gpus", "'0'")),
    (["--nodes", "2"], ("nodes=2", "single-host")),
])
def test_replan_refusals(tmp_path: Path, plan8: Plan, args: list[str], needs: tuple[str, ...]) -> None:
    line = check_refusal(*invoke(["replan", write(tmp_path / "p.json", plan8.to_json()), *args])[::2])
    for needle in needs:
        assert needle in line, line


def test_replan_that_fits_nowhere(tmp_path: Path) -> None:
    """llama3-70b planned on 4 DGX H100 nodes, re-planned for one: the states alone do not fit."""
    big = search(preset("llama3-70b"), hp.cluster("dgx-h100", nodes=4), Workload(global_batch=64, seq_len=4096))[0]
    line = check_refusal(*invoke(["replan", write(tmp_path / "p.json", big.to_json()), "--nodes", "1"])[::2])
    assert "llama3-70b fits nowhere on 8 x h100-sxm" in line and "GPUs" in line
