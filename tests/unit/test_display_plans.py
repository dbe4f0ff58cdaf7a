"""Plans built only to be shown (`placed=False`, planner.api.build_plan) equal the written plans in every field but
the placement, and render the same tables; what is written (`meshplan plan --json`) is still the placed plan.

`meshplan plan`, `compare` and `sweep` print tables of plans and never their placement (one object per rank,
~0.1 s at 65,536 GPUs), so they skip building it; `--json`/`--figures` build it as before.
"""

from __future__ import annotations

import io
import json

import pytest
from cli_inputs import invoke
from rich.console import Console

import hardware_profiles as hp
from planner import api
from planner.model import preset
from planner.plan import Plan, peak_flops_of_hosts, peak_flops_of_ranks, placement_of
from planner.render import breakdown_table, memory_table, summary_table, top_table
from planner.topology.core import Topology
from planner.workload import Workload

CASES = {
    # one GPU kind, several plans of different world sizes (dp fills what tp x pp leave)
    "dgx-h100": (preset("llama3-8b"), lambda: hp.cluster("dgx-h100", nodes=2), Workload(global_batch=256, seq_len=4096), {}),
    # A100 + H100 hosts: per-rank peaks in MFU, CP-SAT partitions and the re-sort by the refined costing
    "hetero": (preset("llama3-8b"), lambda: hp.cluster("hetero-a100-h100", nodes=4),
               Workload(global_batch=256, seq_len=4096), {"tp": 8}),
}


def _text(*tables) -> str:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    for table in tables:
        console.print(table)
    return console.file.getvalue()


@pytest.mark.parametrize("objective", ["expected", "pessimistic"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_shown_plans_equal_written_plans_but_for_the_placement(case: str, objective: str) -> None:
    model, cluster, workload, pins = CASES[case]
    ctx, result = api.search_result(model, cluster(), workload, top=3, objective=objective, **pins)
    written = api.plans_from_result(ctx, result, pins, objective=objective)
    shown = api.plans_from_result(ctx, result, pins, objective=objective, placed=False)
    assert len(written) == len(shown) == 3
    for full, light in zip(written, shown):
        assert light.placement == () and len(full.placement) == full.world_size
        assert light.model_dump(exclude={"placement"}) == full.model_dump(exclude={"placement"})
        assert light.prediction.mfu.hex() == full.prediction.mfu.hex()  # the same sum, bit for bit
        assert _text(summary_table(light), breakdown_table(light.prediction), memory_table(light.prediction)) == \
            _text(summary_table(full), breakdown_table(full.prediction), memory_table(full.prediction))
    assert _text(top_table(shown)) == _text(top_table(written))


def test_peak_of_hosts_is_the_peak_of_ranks_bit_for_bit() -> None:
    cluster = hp.cluster("hetero-a100-h100", nodes=4)
    topo = Topology(cluster)
    cluster_json = cluster.model_dump(mode="json")
    for world in (1, 7, 8, 9, 17, 32):
        hosts = topo.hosts_of_ranks(world)
        assert hosts == [h for h, _ in topo.hosts_and_indices(world)]
        placement = placement_of(topo.hosts_and_indices(world))
        assert peak_flops_of_hosts(cluster_json, hosts, "bf16").hex() == \
            peak_flops_of_ranks(cluster_json, placement, "bf16").hex()
    with pytest.raises(IndexError):
        topo.hosts_of_ranks(33)


def test_the_cli_writes_the_placed_plan_and_shows_the_same_numbers() -> None:
    args = ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "2", "--global-batch", "256",
            "--seq-len", "4096", "--top", "2"]
    code, written, _ = invoke([*args, "--json", "-"])
    assert code == 0
    plan = Plan.model_validate_json(written)
    model, cluster, workload, _ = CASES["dgx-h100"]
    assert json.loads(written) == json.loads(api.search(model, cluster(), workload, top=2)[0].to_json())
    assert len(plan.placement) == plan.world_size == 16
    code, shown, _ = invoke(args)
    assert code == 0
    assert plan.layout.describe() in shown and f"{100 * plan.prediction.mfu:.1f} %" in shown
    assert f"{plan.prediction.tokens_per_s:,.0f}" in shown
