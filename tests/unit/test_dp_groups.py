"""The data-parallel collectives run over the groups meshplan run reduces over: FSDP's reduce-scatter and
all-gather over dp_shard x cp (one ring where the two axes are adjacent, axis by axis where pp lies between
them), HSDP's all-reduce over dp_replicate, DDP's over every data rank."""

from __future__ import annotations

import numpy as np
import pytest

import hardware_profiles as hp
from planner.cost.comm import AxisBandwidth
from planner.cost.dp_groups import _dp_group_columns, axis_groups, dp_group_coeffs, replicate_coeffs
from planner.layout import MESH_ORDERS, SEARCHED_ORDERS, Layout, layout_to_row
from planner.solver.bounds import optimistic_bw
from planner.topology import Topology


def _coeffs(layout: Layout, bw: AxisBandwidth):
    table = layout_to_row(layout)
    world = np.array([layout.world_size])
    return table, axis_groups(table), dp_group_coeffs(bw, table, world)


def _ring(bw: AxisBandwidth, kind: str, size: int, stride: int, world: int) -> tuple[float, float]:
    a, b = bw.columns(kind, np.array([size]), np.array([stride]), np.array([world]))
    return float(a[0]), float(b[0])


def test_adjacent_shard_axes_form_one_ring_over_dp_shard_times_cp() -> None:
    """Default order (pp, dp_replicate, dp_shard, cp, tp) on 32 H100s: dp_shard 2 x cp 4 with tp 2 is one ring of 8
    ranks at stride 2 (it spans two hosts), not a ring over dp_shard alone."""
    bw = AxisBandwidth(Topology(hp.cluster("dgx-h100", gpus=32)))
    layout = Layout(dp=4, cp=4, tp=2, zero=3, dp_shard=2)
    _, _, (rs, ag, hsdp, ddp) = _coeffs(layout, bw)
    assert (rs[0][0], rs[1][0]) == pytest.approx(_ring(bw, "reduce_scatter", 8, 2, 32))
    assert (ag[0][0], ag[1][0]) == pytest.approx(_ring(bw, "all_gather", 8, 2, 32))
    assert (hsdp[0][0], hsdp[1][0]) == pytest.approx(_ring(bw, "all_reduce", 2, 16, 32))
    assert rs[1][0] != pytest.approx(_ring(bw, "reduce_scatter", 2, 8, 32)[1])  # not dp_shard's own ring
    chosen = replicate_coeffs(hsdp, ddp, np.array([3]))
    assert (chosen[0][0], chosen[1][0]) == (hsdp[0][0], hsdp[1][0])


def test_pp_between_the_shard_axes_reduces_axis_by_axis() -> None:
    """Order (dp_replicate, dp_shard, pp, cp, tp) with pp 2: the dp_shard x cp ranks are not one block, so the
    reduce-scatter runs over cp (stride tp) on all bytes, then over dp_shard (stride pp x cp x tp) on 1/cp of them."""
    bw = AxisBandwidth(Topology(hp.cluster("dgx-h100", gpus=32)))
    layout = Layout(dp=4, cp=2, tp=2, pp=2, zero=1, dp_shard=4, num_microbatches=2,
                    mesh_axes=list(SEARCHED_ORDERS[1]))
    _, groups, (rs, _, _, _) = _coeffs(layout, bw)
    assert int(groups["dp_shard"][1][0]) == 8 and int(groups["cp"][1][0]) == 2
    a_cp, b_cp = _ring(bw, "reduce_scatter", 2, 2, 32)
    a_ds, b_ds = _ring(bw, "reduce_scatter", 4, 8, 32)
    assert (rs[0][0], rs[1][0]) == pytest.approx((a_cp + a_ds, b_cp + b_ds / 2))


def test_ddp_all_reduces_over_every_data_rank() -> None:
    """ZeRO-0: one all-reduce over dp x cp (cp inside dp in the default order: one ring of dp x cp at stride tp);
    an order with tp between them reduces hierarchically: reduce-scatter over the inner axis, all-reduce the rest
    over the outer one, all-gather back."""
    bw = AxisBandwidth(Topology(hp.cluster("dgx-h100", gpus=16)))
    _, _, (_, _, hsdp, ddp) = _coeffs(Layout(dp=2, cp=4, tp=2, zero=0), bw)
    chosen = replicate_coeffs(hsdp, ddp, np.array([0]))
    assert (chosen[0][0], chosen[1][0]) == pytest.approx(_ring(bw, "all_reduce", 8, 2, 16))
    order = next(o for o in MESH_ORDERS if o == ("pp", "dp_replicate", "dp_shard", "tp", "cp"))
    _, _, (_, _, _, ddp) = _coeffs(Layout(dp=2, cp=4, tp=2, zero=0, mesh_axes=list(order)), bw)
    rs_a, rs_b = _ring(bw, "reduce_scatter", 4, 1, 16)
    ag_a, ag_b = _ring(bw, "all_gather", 4, 1, 16)
    ar_a, ar_b = _ring(bw, "all_reduce", 2, 8, 16)
    assert (ddp[0][0], ddp[1][0]) == pytest.approx((rs_a + ag_a + ar_a, rs_b + ag_b + ar_b / 4))


def _mixed_table(gpus: int) -> dict[str, np.ndarray]:
    """Every (tp, cp, pp, dp_shard, order) of `gpus` ranks with tp <= 8, in both searched orders, ZeRO 0 and 3,
    each twice (rows that share their groups), shuffled."""
    rows = []
    for tp in (1, 2, 4, 8):
        for cp in (1, 2, 4):
            for pp in (1, 2, 4):
                dp = gpus // (tp * cp * pp)
                if dp < 1:
                    continue
                for dp_shard in (d for d in (1, 2, 4, 8, 16, 32, 64) if dp % d == 0):
                    for order in SEARCHED_ORDERS:
                        for zero in (0, 3):
                            rows += 2 * [dict(dp=dp, tp=tp, pp=pp, cp=cp, dp_shard=dp_shard if zero else 1,
                                              order=MESH_ORDERS.index(order), zero=zero)]
    shuffled = np.random.default_rng(0).permutation(len(rows))
    return {k: np.array([rows[i][k] for i in shuffled], dtype=np.int64) for k in rows[0]}


def _one_by_one(bw, table: dict[str, np.ndarray], world: np.ndarray) -> np.ndarray:
    """The uncached coefficients, asked one row at a time: 8 columns."""
    out = []
    for i in range(len(world)):
        groups = {axis: (size[i:i + 1], stride[i:i + 1]) for axis, (size, stride) in axis_groups(table).items()}
        out.append([c[0] for pair in _dp_group_columns(bw, groups, world[i:i + 1]) for c in pair])
    return np.array(out)


def _stacked(coeffs) -> np.ndarray:
    return np.column_stack([c for pair in coeffs for c in pair])


@pytest.mark.parametrize("optimistic", [False, True])
def test_cached_coefficients_equal_each_rows_own(optimistic: bool) -> None:
    """`dp_group_coeffs` costs each distinct group once and keeps it per topology (per set of exact pairs for the
    search's optimistic pass): every row gets, bit for bit, what costing it alone gives, on the call that fills
    the cache, on one that reads it, on a subset, and with a world other than the ranks in use."""
    topology = Topology(hp.cluster("dgx-h100", gpus=64))
    table = _mixed_table(64)
    bw = optimistic_bw(topology, table) if optimistic else AxisBandwidth(topology)
    world = table["tp"] * table["cp"] * table["pp"] * table["dp"]
    expected = _one_by_one(bw, table, world)
    assert len(bw.group_coeffs) == 0
    for _ in range(2):
        np.testing.assert_array_equal(_stacked(dp_group_coeffs(bw, table, world)), expected)
    assert 0 < len(bw.group_coeffs) <= len(world) // 2  # each distinct group once (every row is there twice)
    half = {k: v[::2] for k, v in table.items()}
    np.testing.assert_array_equal(_stacked(dp_group_coeffs(bw, half, world[::2])), expected[::2])
    whole = np.full(len(world), 64)
    np.testing.assert_array_equal(_stacked(dp_group_coeffs(bw, table, whole)), _one_by_one(bw, table, whole))


def test_optimistic_caches_are_kept_apart_per_set_of_exact_pairs() -> None:
    """The optimistic pass answers exactly for its table's TP and CP groups: two tables with other exact pairs
    must not share coefficients, and one with the same pairs (a later warm search) must."""
    topology = Topology(hp.cluster("dgx-h100", gpus=64))
    table = _mixed_table(64)
    tp8 = {k: v[table["tp"] == 8] for k, v in table.items()}
    assert optimistic_bw(topology, table).group_coeffs is not optimistic_bw(topology, tp8).group_coeffs
    assert optimistic_bw(topology, tp8).group_coeffs is optimistic_bw(topology, tp8).group_coeffs
