"""Figures: the drawn quantities come from the plan and the cost model, and the files are real PNG/SVG.

The schedule simulator is checked against the closed forms it must reproduce (equal stages), the
per-stage times against the plan's own breakdown (every schedule), the memory bars against
`StageMemory.total_bytes`, the mesh cells against the world size, and the Pareto front against a brute-force
dominance check.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import hardware_profiles
from planner.api import search, search_result
from planner.cost.schedule_times import plan_stage_times
from planner.errors import UserError
from planner.figures import write_all
from planner.figures._common import PNG_MAGIC
from planner.figures.memory import COMPONENTS, draw_memory
from planner.figures.mesh import draw_mesh
from planner.figures.mesh_large import coordinate_matrix, host_patterns
from planner.figures.pareto import draw_pareto, feasible_table, pareto_front
from planner.figures.schedule import draw_schedule, schedule_data
from planner.figures.timeline import makespan_s, simulate
from planner.layout import SCHEDULES, Workload
from planner.model import preset
from planner.plan import Plan

SMALL_CLUSTER = ("dgx-h100", {"nodes": 2})
SMALL_WORKLOAD = Workload(global_batch=32, seq_len=4096)


def _small(**pins) -> Plan:
    return search(preset("llama3-8b"), hardware_profiles.cluster(SMALL_CLUSTER[0], **SMALL_CLUSTER[1]), SMALL_WORKLOAD,
                  **pins)[0]


@pytest.fixture(scope="module")
def plans() -> dict[str, Plan]:
    """One small plan per schedule (llama3-8b on 2 x DGX H100), plus recompute and CP variants."""
    return {
        "gpipe": _small(pp=4, tp=2, schedule="gpipe", num_microbatches=8),
        "1f1b": _small(pp=4, tp=2, schedule="1f1b", num_microbatches=8),
        "interleaved": _small(pp=4, tp=2, schedule="interleaved", virtual_stages=2, num_microbatches=8),
        "zb-h1": _small(pp=4, tp=2, schedule="zb-h1", num_microbatches=8),
        "zb-h1-full": _small(pp=4, tp=2, schedule="zb-h1", num_microbatches=8, recompute="full"),
        "cp": _small(pp=2, cp=2, tp=2, schedule="1f1b", recompute="selective"),
        "cp-full": _small(pp=2, cp=2, tp=1, schedule="interleaved", virtual_stages=2, recompute="full"),
        "cp-exposed": _small(pp=1, cp=8, tp=2, recompute="full"),  # K/V all-gather not hidden by attention
        # ZB-H1's bubble reads the forward times; CP outermost puts each CP group across both hosts (exposed)
        "cp-exposed-zb": _small(pp=2, cp=8, tp=1, schedule="zb-h1", mesh_axes=("cp", "pp", "dp_replicate", "dp_shard", "tp")),
        "pp1": _small(pp=1),
    }


# --- the schedule simulator ---------------------------------------------------------------------------

@pytest.mark.parametrize("p,m", [(1, 3), (2, 2), (3, 7), (4, 8), (8, 16)])
def test_gpipe_and_1f1b_match_the_closed_form(p: int, m: int) -> None:
    f, b = 1.25, 2.5
    for sched in ("gpipe", "1f1b"):
        assert makespan_s(simulate(sched, m, [f] * p, [b] * p)) == pytest.approx((m + p - 1) * (f + b), rel=1e-12)


@pytest.mark.parametrize("p,m,v", [(2, 4, 2), (4, 8, 2), (4, 12, 3), (8, 16, 4)])
def test_interleaved_bubble_is_divided_by_v(p: int, m: int, v: int) -> None:
    f, b = 1.0, 2.0
    ms = makespan_s(simulate("interleaved", m, [f] * p, [b] * p, v=v))
    assert ms == pytest.approx(m * (f + b) + (p - 1) * (f + b) / v, rel=1e-12)


@pytest.mark.parametrize("p,m", [(2, 2), (4, 4), (4, 9), (8, 16)])
def test_zb_h1_bubble(p: int, m: int) -> None:
    # T_B = T_W <= T_F: the paper's (p - 1)(T_F + T_B - T_W) = (p - 1) T_F
    for f, bw in ((1.0, 1.0), (1.0, 0.6)):
        ms = makespan_s(simulate("zb-h1", m, [f] * p, [bw] * p, weight_grad_s=[bw] * p))
        assert ms == pytest.approx(m * (f + 2 * bw) + (p - 1) * f, rel=1e-12)
    # T_B > T_F: the first B reaches rank 0 after (p - 1) T_B, so the bubble is (p - 1) T_B
    ms = makespan_s(simulate("zb-h1", m, [0.5] * p, [1.0] * p, weight_grad_s=[1.0] * p))
    assert ms == pytest.approx(m * 2.5 + (p - 1) * 1.0, rel=1e-12)


@pytest.mark.parametrize("sched,v", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("interleaved", 3), ("zb-h1", 1)])
def test_timeline_respects_dependencies_and_runs_every_op_once(sched: str, v: int) -> None:
    rng = np.random.default_rng(7)
    p, m = 4, 8
    f = list(rng.uniform(0.5, 1.5, p))
    b = list(rng.uniform(0.5, 2.5, p))
    ops = simulate(sched, m, f, b, v=v, weight_grad_s=list(rng.uniform(0.3, 1.0, p)) if sched == "zb-h1" else None)
    end = {(o.kind, o.microbatch, o.chunk): o.end_s for o in ops}
    kinds = "FBW" if sched == "zb-h1" else "FB"
    assert len(end) == len(ops) == len(kinds) * m * p * v
    chunks = p * v
    for o in ops:
        assert o.rank == o.chunk % p
        deps = {"F": [("F", o.microbatch, o.chunk - 1)] if o.chunk else [],
                "B": [("B", o.microbatch, o.chunk + 1)] if o.chunk < chunks - 1 else [("F", o.microbatch, o.chunk)],
                "W": [("B", o.microbatch, o.chunk)]}[o.kind]
        assert all(end[d] <= o.start_s + 1e-12 for d in deps)
    for r in range(p):  # one op at a time per rank
        mine = sorted((o for o in ops if o.rank == r), key=lambda o: o.start_s)
        assert all(a.end_s <= b_.start_s + 1e-12 for a, b_ in itertools.pairwise(mine))


def test_gpipe_with_unequal_stages_is_two_flow_shops() -> None:
    f, b, m = [1.0, 3.0, 2.0], [2.0, 1.0, 5.0], 5
    expected = sum(f) + (m - 1) * max(f) + sum(b) + (m - 1) * max(b)
    assert makespan_s(simulate("gpipe", m, f, b)) == pytest.approx(expected, rel=1e-12)


# --- per-stage times and the schedule figure --------------------------------------------------------------

def test_stage_times_reproduce_the_plan_breakdown(plans: dict[str, Plan]) -> None:
    assert plans["cp-exposed"].prediction.breakdown.cp_comm_s > 0
    assert plans["cp-exposed-zb"].prediction.breakdown.cp_comm_s > 0
    for name, plan in plans.items():
        st = plan_stage_times(plan)
        assert st.check_against(plan) is None, name
        b = plan.prediction.breakdown
        assert st.busy_s == pytest.approx(b.compute_s + b.tp_comm_s + b.cp_comm_s + b.ep_comm_s, rel=1e-9), name
        assert st.bubble_s == pytest.approx(b.bubble_s, rel=1e-9, abs=1e-12), name
        assert len(st.forward_s) == plan.layout.pp


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_stage_times_for_moe_with_expert_parallelism(recompute: str) -> None:
    plan = search(preset("tiny-moe"), hardware_profiles.cluster("local-cpu", gpus=8), Workload(global_batch=16, seq_len=64),
                  ep=2, pp=2, schedule="1f1b", recompute=recompute, framework="any")[0]
    assert plan.layout.ep == 2 and plan.prediction.breakdown.ep_comm_s > 0
    assert plan_stage_times(plan).check_against(plan) is None


def test_schedule_figure_prints_the_cost_model_bubble(plans: dict[str, Plan]) -> None:
    for name, plan in plans.items():
        data = schedule_data(plan)
        assert data.bubble_fraction == plan.prediction.bubble_fraction, name
        assert data.times_note is None, name
        assert data.step_time_s == plan.prediction.step_time_s
        st, lay = plan_stage_times(plan), plan.layout
        t, g = st.total_s, st.zero_bubble_s  # the registry's makespan, evaluated again on the stage times (scalars)
        again = SCHEDULES[lay.schedule].makespan(lay.num_microbatches, lay.virtual_stages, max(t), sum(t), max(g),
                                                 sum(g), lay.pp)
        assert data.model_pipeline_s == pytest.approx(again, rel=1e-12), name
    # the title carries exactly the printed (model) fraction
    fig, data = draw_schedule(plans["1f1b"])
    assert f"bubble {plans['1f1b'].prediction.bubble_fraction:.1%} of the" in fig.axes[0].get_title()


def test_schedule_figure_ops_use_the_cost_model_times(plans: dict[str, Plan]) -> None:
    plan = plans["interleaved"]
    data = schedule_data(plan)
    st = plan_stage_times(plan)
    v = plan.layout.virtual_stages
    for o in data.ops:
        want = (st.forward_s if o.kind == "F" else st.backward_s)[o.rank] / v
        assert o.end_s - o.start_s == pytest.approx(want, rel=1e-12)
    zb = schedule_data(plans["zb-h1-full"])
    st = plan_stage_times(plans["zb-h1-full"])
    # B and W as the cost model splits the backward: W = the weight-gradient GEMMs, B = the rest (T_B > T_W)
    assert zb.weight_grad_s == st.weight_grad_s
    assert zb.backward_s == pytest.approx(tuple(b - w for b, w in zip(st.backward_s, st.weight_grad_s)), rel=1e-12)
    assert all(b > w > 0 for b, w in zip(zb.backward_s, zb.weight_grad_s))
    # GPipe: the simulation is two flow shops; with these plans the model formula coincides
    g = schedule_data(plans["gpipe"])
    m = plans["gpipe"].layout.num_microbatches
    expected = sum(g.forward_s) + (m - 1) * max(g.forward_s) + sum(g.backward_s) + (m - 1) * max(g.backward_s)
    assert g.simulated_pipeline_s == pytest.approx(expected, rel=1e-12)


# --- memory -----------------------------------------------------------------------------------------------

def test_memory_bars_are_the_stage_totals(plans: dict[str, Plan]) -> None:
    for plan in (plans["1f1b"], plans["pp1"], plans["zb-h1-full"]):
        _, data = draw_memory(plan)
        for i, stage in enumerate(plan.prediction.memory_per_stage):
            assert data.totals_bytes[i] == pytest.approx(stage.total_bytes, rel=1e-12)
            assert data.capacity_bytes[i] == stage.capacity_bytes
            for c in COMPONENTS:
                assert data.components[c][i] == getattr(stage, f"{c}_bytes")


# --- mesh -------------------------------------------------------------------------------------------------

def test_mesh_small_draws_every_gpu_with_its_link(plans: dict[str, Plan]) -> None:
    plan = plans["interleaved"]  # dp2 x tp2 x pp4 on 2 DGX H100
    _, data = draw_mesh(plan)
    assert not data.aggregated and data.aggregation == ""
    lay = plan.layout
    assert {p.axis for p in data.panels} == {a for a, s in zip(lay.mesh_axes, lay.mesh_shape) if s > 1}
    for p in data.panels:
        assert p.gpu_cells == plan.world_size == 16
        assert p.num_groups == plan.world_size // p.size
    links = {p.axis: p.link for p in data.panels}
    assert links["tp"] == "NVLink"  # tp inside a DGX
    spans_hosts = lay.mesh_axes.index("dp_shard") < lay.mesh_axes.index("pp")  # dp outermost: its groups cross hosts
    assert links["dp_shard"] == ("network (infiniband)" if spans_hosts else "NVLink")


def test_mesh_counts_idle_gpus_and_pcie_links() -> None:
    plan = search(preset("tiny"), hardware_profiles.cluster("pcie-4xl40s"), Workload(global_batch=4, seq_len=64),
                  dp=2, tp=1, pp=1)[0]
    _, data = draw_mesh(plan)
    assert data.world_size == 2 and data.idle_gpus == 2
    assert [p.gpu_cells for p in data.panels] == [2]
    assert data.panels[0].link == "PCIe"


def test_mesh_aggregates_large_clusters() -> None:
    cluster = hardware_profiles.cluster("dgx-h100", nodes=64)  # 512 GPUs
    plan = search(preset("llama3-70b"), cluster, Workload(global_batch_tokens=8 * 2**20, seq_len=8192), tp=8, pp=4)[0]
    fig, data = draw_mesh(plan)
    assert data.aggregated and "64 hosts drawn as cells" in data.aggregation
    assert data.aggregation in fig._suptitle.get_text()
    assert all(p.host_cells == 64 and p.gpu_cells == 0 for p in data.panels)
    # the aggregated encoding is exact: host colour + in-host pattern = every GPU's coordinate
    lay = plan.layout
    for axis, size in zip(lay.mesh_axes, lay.mesh_shape):
        M = coordinate_matrix(plan, 64, 8, axis)
        for rank in (0, 7, 8, 100, 511):
            pl = plan.placement[rank]
            assert M[pl.host, pl.gpu] == lay.rank_coords(rank)[axis]
        base, pats, counts = host_patterns(M, size)
        assert counts.sum() == 64
        for h in range(64):
            rel = (M[h] - base[h]) % size
            assert any((rel == p).all() for p in pats)


# --- Pareto -----------------------------------------------------------------------------------------------

def test_pareto_front_is_exactly_the_non_dominated_set() -> None:
    rng = np.random.default_rng(3)
    t = rng.integers(1, 30, 400).astype(float)
    m = rng.integers(1, 30, 400).astype(float)
    front = set(pareto_front(t, m).tolist())
    for i in range(len(t)):
        dominated = np.any((t <= t[i]) & (m <= m[i]) & ((t < t[i]) | (m < m[i])))
        duplicate_kept = any(j in front for j in np.nonzero((t == t[i]) & (m == m[i]))[0] if j != i)
        assert (i in front) == (not dominated and not duplicate_kept)


def test_pareto_figure_of_a_search(plans: dict[str, Plan]) -> None:
    plan = _small()
    table = feasible_table(plan)
    _, data = draw_pareto(plan, table, others={"1f1b pp4": plans["1f1b"]})
    t, peak = data.step_time_s, data.peak_bytes
    for i in data.front:
        assert not np.any((t <= t[i]) & (peak <= peak[i]) & ((t < t[i]) | (peak < peak[i])))
    assert data.chosen_on_front
    assert data.chosen_step_time_s == plan.prediction.step_time_s
    assert t.min() == pytest.approx(plan.prediction.step_time_s, rel=1e-9)  # the search's best is the fastest point
    # the whole space: at least what the pruned keep_all search saw
    _, res = search_result(plan.inputs.model, hardware_profiles.cluster(SMALL_CLUSTER[0], **SMALL_CLUSTER[1]),
                           plan.inputs.workload, keep_all=True)
    assert len(t) >= len(res.all_feasible["peak"])


# --- files and CLI ----------------------------------------------------------------------------------------

def _check_files(paths: list[Path]) -> None:
    for p in paths:
        data = p.read_bytes()
        assert len(data) > 1000, p
        if p.suffix == ".png":
            assert data.startswith(PNG_MAGIC), p
        else:
            assert ET.fromstring(data).tag.endswith("svg"), p


def test_write_all_writes_png_and_svg_and_never_overwrites(plans: dict[str, Plan], tmp_path: Path) -> None:
    plan = plans["zb-h1"]
    paths = write_all(plan, tmp_path / "figs", search=feasible_table(plan, pp=4, tp=2))
    assert sorted(p.name for p in paths) == sorted(f"{s}.{e}" for s in ("mesh", "schedule", "memory", "pareto")
                                                   for e in ("png", "svg"))
    _check_files(paths)
    before = {p: p.read_bytes() for p in paths}
    with pytest.raises(UserError, match="file exists"):
        write_all(plan, tmp_path / "figs")
    assert all(p.read_bytes() == b for p, b in before.items())
    assert not list((tmp_path / "figs").glob(".*tmp"))


def test_cli_show(plans: dict[str, Plan], tmp_path: Path) -> None:
    from planner.cli.app import app
    from planner.cli.main import _register_commands

    _register_commands()
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(plans["1f1b"].to_json())
    env = {"COLUMNS": "200", "NO_COLOR": "1"}
    res = CliRunner().invoke(app, ["show", str(plan_file), "--figures", str(tmp_path / "f"), "--no-compare"], env=env)
    assert res.exit_code == 0, res.stderr
    listed = [Path(x) for x in res.stdout.split()]
    assert sorted(p.name for p in listed) == sorted(f"{s}.{e}" for s in ("mesh", "schedule", "memory") for e in ("png", "svg"))
    _check_files(listed)
    again = CliRunner().invoke(app, ["show", str(plan_file), "--figures", str(tmp_path / "f")], env=env)
    assert again.exit_code == 2 and "file exists" in again.stderr and "Traceback" not in again.stderr
    missing = CliRunner().invoke(app, ["show", str(tmp_path / "nope.json"), "--figures", str(tmp_path / "g")], env=env)
    assert missing.exit_code == 2 and "cannot read plan" in missing.stderr


def test_import_planner_does_not_import_matplotlib() -> None:
    code = ("import sys, planner, planner.figures, planner.cli.show, planner.cost.schedule_times\n"
            "sys.exit(1 if any(m == 'matplotlib' or m.startswith('matplotlib.') for m in sys.modules) else 0)\n")
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


def test_cli_plan_figures_keeps_stdout_for_json(tmp_path: Path) -> None:
    from planner.cli.app import app
    from planner.cli.main import _register_commands

    _register_commands()
    args = ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "2", "--global-batch", "32",
            "--seq-len", "4096", "--pp", "2", "--figures", str(tmp_path / "f"), "--json", "-"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert res.exit_code == 0, res.stderr
    plan = Plan.model_validate_json(res.stdout)  # stdout is still exactly the plan
    assert plan.layout.pp == 2
    written = sorted((tmp_path / "f").iterdir())
    assert [p.name for p in written] == sorted(f"{s}.{e}" for s in ("mesh", "schedule", "memory", "pareto")
                                               for e in ("png", "svg"))
    assert all(f"wrote {p}" in res.stderr for p in written)
    _check_files(written)
