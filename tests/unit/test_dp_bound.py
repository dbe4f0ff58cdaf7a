"""`bounds.dp_bound_s` never exceeds a layout's exposed DP/FSDP time, latencies included.

The row bound prices each group's per-call latency at the mean pipeline rank's unit count (L / pp + 1), not at
the L + 1 units of the call it is computed with: every rank's exposure is linear in its units and parameters once
the overlap windows are unbounded, so the busiest rank's is at least the mean rank's. Checked here against every
layout of brute-force spaces (dense, MoE, hetero, CPU, every runtime, the pins of test_search_bounds), and on a
layout family where the latency matters (FSDP over dp_shard x cp on 256 H100s) the bound must stay below and
must not be the bandwidth-only bound it used to be.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings

import hardware_profiles
from planner.api import make_context
from planner.cost.comm import AxisBandwidth
from planner.cost.dp_groups import dp_group_coeffs
from planner.cost.evaluate import evaluate_table
from planner.layout import Workload
from planner.model import preset
from planner.solver import bounds
from planner.solver.bounds import dp_bound_s
from planner.solver.exact import brute_force
from planner.solver.space import Pins, SearchLimits
from planner.topology import Topology
from tests.unit.test_search_bounds import setups


@settings(max_examples=40, deadline=None)
@given(setups())
def test_dp_bound_is_below_every_layouts_dp_time(setup) -> None:
    model, cluster, workload, flash, pin_values = setup
    ctx = make_context(model, cluster, workload, flash_attention=flash)
    table, res = brute_force(ctx, Pins(dict(pin_values)), SearchLimits(max_micro_batch=8), include_dominated=False)
    if len(table["dp"]):
        assert np.all(dp_bound_s(ctx, table) <= res.dp_comm_s * (1 + 1e-12)), "the DP bound exceeds a layout's DP time"


def _fsdp_over_cp_table(ctx) -> dict[str, np.ndarray]:
    """ZeRO-3 layouts of Llama 3 70B on 256 H100s sharding over dp_shard x cp, pp 1..16, both searched orders."""
    rows = []
    for pp in (1, 2, 4, 8, 16):
        for cp in (1, 2, 4, 8):
            dp = 256 // (8 * pp * cp)
            if dp < 1:
                continue
            for order in (0, 1):
                sched = 1  # 1F1B (no zero-bubble chunk units)
                rows.append(dict(dp=dp, tp=8, pp=pp, cp=cp, ep=1, mb=1, m=64 // dp, sched=sched, v=1, zero=3,
                                 dp_shard=dp, rc=0, sp=1, order=order))
    return {k: np.array([r[k] for r in rows], dtype=np.int64) for k in rows[0]}


def test_dp_bound_counts_latency_on_large_sharding_groups(monkeypatch) -> None:
    cluster = hardware_profiles.cluster("dgx-h100", gpus=256)
    ctx = make_context(preset("llama3-70b"), cluster, Workload(global_batch=64, seq_len=8192), flash_attention=True)
    table = _fsdp_over_cp_table(ctx)
    exact = evaluate_table(ctx, table, AxisBandwidth(ctx.topology))
    bound = dp_bound_s(ctx, table)
    assert np.all(bound <= exact.dp_comm_s), "the DP bound exceeds a layout's DP time"
    # The per-combination cache gives, row for row, what one call over every row gives (twice: filled, then read).
    view = AxisBandwidth(bounds._bound_topology(ctx.topology))
    world = table["tp"] * table["cp"] * table["pp"] * table["dp"]
    direct = np.column_stack([c for pair in dp_group_coeffs(view, table, world) for c in pair])
    for _ in range(2):
        np.testing.assert_array_equal(bounds._bound_group_coeffs(view, table), direct)
    # The bandwidth-only bound (latencies dropped) is strictly lower wherever a sharding group exists.
    real, latency = bounds._bound_group_coeffs, np.arange(8) % 2 == 0  # columns a, b of 4 collectives
    monkeypatch.setattr(bounds, "_bound_group_coeffs", lambda view, t: np.where(latency, 0.0, real(view, t)))
    bandwidth_only = dp_bound_s(ctx, table)
    assert np.all(bandwidth_only <= bound)
    assert np.all(bandwidth_only[table["dp"] * table["cp"] > 1] < bound[table["dp"] * table["cp"] > 1])


def test_the_capacity_only_view_asks_each_group_pattern_once_whatever_the_world(monkeypatch) -> None:
    """Its answers depend on a group's size and stride alone, so a pattern is asked of the topology once, across
    calls over different worlds, and each call answers what a fresh view asked about that world alone answers."""
    cluster = hardware_profiles.cluster("dgx-h100", gpus=256)
    topology = Topology(cluster)
    asked = []
    real = topology.axis_collective_bound

    def counted(kind, mesh_shape, axis):
        asked.append((kind, mesh_shape[axis], mesh_shape[axis + 1]))
        return real(kind, mesh_shape, axis)

    monkeypatch.setattr(topology, "axis_collective_bound", counted)
    view = AxisBandwidth(bounds._OptimisticTopology(topology, set()))
    size, stride = np.array([3, 3, 6, 3]), np.array([8, 1, 4, 8])  # size x stride never divides 256 GPUs
    for world in (48, 96, 192):
        for kind in ("all_reduce", "p2p"):
            got = view.columns(kind, size, stride, np.full(4, world))
            fresh = AxisBandwidth(bounds._OptimisticTopology(Topology(cluster), set()))
            want = fresh.columns(kind, size, stride, np.full(4, world))
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert sorted(asked) == sorted(set(asked)) and len(asked) == 6  # 3 patterns x 2 kinds
