"""Measured collectives of a network link (planner.cost.measured_comm.network_floor): groups that cross hosts
on a link with a multi-host measurement are costed no faster than it (and no faster than the ring model),
unmeasured links and groups inside a host keep what they had, and the search's optimistic view stays below."""

from __future__ import annotations

import pytest

import hardware_profiles as hp
from hardware_profiles.measured import MeasuredCollective
from planner.cost.comm import AxisBandwidth
from planner.solver.bounds import _bound_topology
from planner.topology import Topology
from planner.topology.estimate import bytes_factor, latency_steps

# BLOOM's layout on Jean Zay (DeepSpeed's rank order: model innermost, then data, then pipe): pp12 x dp8 x tp4.
BLOOM_MESH, DP_AXIS, TP_AXIS, PP_AXIS = (12, 8, 4), 1, 2, 0


def _jean_zay(measured: list[MeasuredCollective] | None, nodes: int = 48):
    """jean-zay-a100 with the Omni-Path link's measured collectives replaced by `measured`."""
    cluster = hp.cluster("jean-zay-a100", nodes=nodes)
    link = cluster.links["omnipath-100g"].model_copy(update={"measured_collectives": measured})
    return cluster.model_copy(update={"links": {**cluster.links, "omnipath-100g": link}})


def _entry(kind: str = "all_reduce", n: int = 32, latency_s: float = 2.93e-4, busbw: float = 5.06e9):
    return MeasuredCollective(kind=kind, group_size=n, latency_s=latency_s, bus_bandwidth_Bps=busbw)


@pytest.fixture(scope="module")
def bloom() -> AxisBandwidth:
    return AxisBandwidth(Topology(hp.cluster("jean-zay-a100")))


@pytest.fixture(scope="module")
def unmeasured() -> AxisBandwidth:
    return AxisBandwidth(Topology(_jean_zay(None)))


def test_omnipath_carries_the_bigscience_measurement() -> None:
    link = hp.cluster("jean-zay-a100").links["omnipath-100g"]
    (m,) = link.measured_collectives
    assert (m.kind, m.group_size, m.bus_bandwidth_Bps) == ("all_reduce", 32, 5.06e9)
    assert "all_reduce_bench-a100-n4" in link.sources["measured_collectives"]


def test_the_measured_collective_itself_runs_at_its_measured_busbw() -> None:
    """32 ranks on 4 nodes, as measured: the model said 48 GB/s; the cost is now the measurement."""
    a, b, where = AxisBandwidth(Topology(hp.cluster("jean-zay-a100", nodes=4))).coeffs("all_reduce", (1, 32), 1)
    assert b == pytest.approx(bytes_factor("all_reduce", 32) / 5.06e9, rel=1e-12)
    assert a == pytest.approx(2.93e-4, rel=1e-12) and where == "measured network"


def test_bloom_dp_all_reduce_is_the_measured_busbw_formula(bloom: AxisBandwidth, unmeasured: AxisBandwidth) -> None:
    """DP groups of 8 (2 GPUs per node on 4 nodes): the nearest measured size (32), its busbw kept, its latency
    scaled by the ring steps; the ring model's latency is larger here, and a floor never lowers it."""
    a, b, _ = bloom.coeffs("all_reduce", BLOOM_MESH, DP_AXIS)
    a_model, b_model, _ = unmeasured.coeffs("all_reduce", BLOOM_MESH, DP_AXIS)
    assert b == pytest.approx(bytes_factor("all_reduce", 8) / 5.06e9, rel=1e-12)
    assert b > b_model  # the model's 12 GB/s, capped at the measured 5.06 GB/s
    scaled = 2.93e-4 * latency_steps("all_reduce", 8) / latency_steps("all_reduce", 32)
    assert a == pytest.approx(max(a_model, scaled), rel=1e-12)
    # The search's vectorised lookup (group size 8, stride 4, all 384 GPUs) gives the same.
    col_a, col_b = bloom.columns("all_reduce", [8], [4], [384])
    assert (col_a[0], col_b[0]) == (a, b)


def test_reduce_scatter_and_all_gather_take_the_all_reduce_busbw(bloom: AxisBandwidth) -> None:
    for kind in ("reduce_scatter", "all_gather"):
        a, b, _ = bloom.coeffs(kind, BLOOM_MESH, DP_AXIS)
        assert b == pytest.approx(bytes_factor(kind, 8) / 5.06e9, rel=1e-12)


def test_a_kind_with_its_own_measurement_uses_it() -> None:
    own = AxisBandwidth(Topology(_jean_zay([_entry(), _entry("all_gather", busbw=2.0e9)])))
    _, b_ag, _ = own.coeffs("all_gather", BLOOM_MESH, DP_AXIS)
    _, b_rs, _ = own.coeffs("reduce_scatter", BLOOM_MESH, DP_AXIS)
    assert b_ag == pytest.approx(bytes_factor("all_gather", 8) / 2.0e9, rel=1e-12)
    assert b_rs == pytest.approx(bytes_factor("reduce_scatter", 8) / 5.06e9, rel=1e-12)


def test_unmeasured_kinds_and_links_and_intra_host_groups_keep_the_model(bloom, unmeasured) -> None:
    # p2p (pipeline sends) and all-to-all have no measurement on this link.
    for kind, axis in (("p2p", PP_AXIS), ("all_to_all", DP_AXIS)):
        assert bloom.coeffs(kind, BLOOM_MESH, axis) == unmeasured.coeffs(kind, BLOOM_MESH, axis)
    # TP groups stay inside a node: NVLink's ring model, whatever the network measured.
    assert bloom.coeffs("all_reduce", BLOOM_MESH, TP_AXIS) == unmeasured.coeffs("all_reduce", BLOOM_MESH, TP_AXIS)
    assert bloom.coeffs("all_reduce", BLOOM_MESH, TP_AXIS)[2] == "nvlink3"
    # The unmeasured link: the ring model's 12 GB/s bus bandwidth for the DP rings (one NIC per ring).
    _, b, where = unmeasured.coeffs("all_reduce", BLOOM_MESH, DP_AXIS)
    assert bytes_factor("all_reduce", 8) / b == pytest.approx(12.0e9, rel=1e-9) and where == "omnipath-100g NIC"


def test_a_measurement_never_makes_a_collective_faster_than_the_model(unmeasured: AxisBandwidth) -> None:
    fast = AxisBandwidth(Topology(_jean_zay([_entry(latency_s=1e-9, busbw=1e12)])))
    for kind in ("all_reduce", "reduce_scatter", "all_gather"):
        assert fast.coeffs(kind, BLOOM_MESH, DP_AXIS) == unmeasured.coeffs(kind, BLOOM_MESH, DP_AXIS)


def test_groups_inside_an_nvlink_domain_do_not_cross_the_network() -> None:
    """GB200 NVL72: a group over 2 trays of one rack stays on NVLink; one over 2 racks crosses the network."""
    cluster = hp.cluster("gb200-nvl72", nodes=36)
    per = Topology(cluster).gpus_per_node
    nic = cluster.host_groups[0].node.nic_link
    slow = cluster.links[nic].model_copy(update={"measured_collectives": [_entry(n=2 * per, latency_s=0.0, busbw=1e9)]})
    measured = AxisBandwidth(Topology(cluster.model_copy(update={"links": {**cluster.links, nic: slow}})))
    plain = AxisBandwidth(Topology(cluster))
    total = 36 * per
    inside = (total // (2 * per), 2 * per)
    assert measured.coeffs("all_reduce", inside, 1) == plain.coeffs("all_reduce", inside, 1)
    across = (1, 2, total // 2)  # 2 ranks, 18 trays apart: one in each rack
    _, b, where = measured.coeffs("all_reduce", across, 1)
    assert b == pytest.approx(bytes_factor("all_reduce", 2) / 1e9, rel=1e-12) and where == "measured network"


def test_the_optimistic_view_stays_at_or_below_the_real_costs(bloom: AxisBandwidth) -> None:
    """The search's capacity-only pass must stay a lower bound with the floor applied in both passes."""
    view = AxisBandwidth(_bound_topology(bloom.topology))
    for kind in ("all_reduce", "reduce_scatter", "all_gather", "p2p"):
        for axis in (PP_AXIS, DP_AXIS):
            a, b, _ = view.coeffs(kind, BLOOM_MESH, axis)
            a_real, b_real, _ = bloom.coeffs(kind, BLOOM_MESH, axis)
            assert a <= a_real * (1 + 1e-12) and b <= b_real * (1 + 1e-12)  # the same sums, rounded apart
