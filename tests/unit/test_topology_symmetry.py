"""Axis queries answered from one class of groups (translation symmetry) equal the full routing, exactly.

`Topology.axis_collective` routes only a representative slice of an axis's groups when the cluster is
periodic (planner.topology.symmetry); the same query with the period switched off routes every group. Bus
bandwidth, latency, bottleneck edge and group count must be identical, on fat trees with and without rails,
oversubscription, rack-scale NVLink domains and three network levels, for meshes that tile the cluster and
meshes that leave GPUs idle.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hardware_profiles as hp
from planner.topology import Topology
from planner.topology.symmetry import representative_rows, ring_periods

CLUSTERS = {
    "dgx-h100": dict(gpus=2048),
    "dgx-h100-oversub": dict(nodes=64),
    "gb200-nvl72": dict(gpus=2304),
    "dgx-a100": dict(gpus=1280),
    "selene": {},
}
_TOPOS: dict[str, tuple[Topology, Topology]] = {}


def _pair(name: str) -> tuple[Topology, Topology]:
    if name not in _TOPOS:
        cluster = hp.cluster(name, **CLUSTERS[name])
        full = Topology(cluster)
        full.period = None  # route every group
        _TOPOS[name] = (Topology(cluster), full)
    return _TOPOS[name]


def test_periods_of_the_shipped_clusters() -> None:
    # One leaf unit (32 DGX = 256 GPUs), one 4-node leaf (oversubscribed profile), one NVL72 rack pair's lcm
    # with the 32-tray leaf (18 and 32 trays of 4 GPUs), and a Selene pod (7 leaf units of 20 DGX A100).
    assert _pair("dgx-h100")[0].period == 256
    assert _pair("dgx-h100-oversub")[0].period == 32
    assert _pair("gb200-nvl72")[0].period == math.lcm(18, 32) * 4
    assert _pair("selene")[0].period == 20 * 7 * 8
    assert Topology(hp.cluster("hetero-a100-h100")).period is None  # two node types: not periodic


def test_representative_rows() -> None:
    assert representative_rows(None, 4, 2, 8) is None
    assert representative_rows(256, 64, 8, 1) == 32  # TP groups: the 32 groups of one leaf unit
    assert representative_rows(256, 1, 2, 1024) == 256  # DP across units: the groups with base < 256
    assert representative_rows(256, 32, 5, 16) == 256  # PP of 5 over 16-GPU blocks: super-blocks of lcm(80, 256)
    assert representative_rows(256, 16, 5, 16) is None  # ... which is the whole 1,280-rank world here
    assert representative_rows(256, 3, 5, 16) is None  # 240 ranks: less than one super-block of lcm(80, 256)
    assert representative_rows(256, 17, 5, 16) == 256  # 1,360 ranks: one super-block and a partial one
    assert representative_rows(160, 200, 3, 1) == 160  # TP of 3 on 600 ranks: super-blocks of lcm(3, 160)
    assert representative_rows(160, 150, 3, 1) is None  # 450 ranks: less than one super-block


@pytest.mark.parametrize("name,n,stride", [("dgx-a100", 3, 1), ("dgx-a100", 6, 1), ("dgx-a100", 12, 2),
                                          ("dgx-h100", 5, 16), ("dgx-h100-oversub", 3, 8), ("dgx-h100", 3, 1)])
def test_partial_super_blocks_equal_full_routing(name: str, n: int, stride: int) -> None:
    """Worlds that end in a partial super-block (layouts leaving GPUs idle) route one super-block only."""
    fast, full = _pair(name)
    per_block = math.lcm(n * stride, fast.period) // (n * stride)
    checked = 0
    most = fast.num_gpus // (n * stride)
    for outer in range(per_block + 1, most + 1, max(1, (most - per_block) // 6)):
        if representative_rows(fast.period, outer, n, stride) is None:
            continue
        for kind in ("all_reduce", "p2p", "all_to_all"):
            assert fast.axis_collective(kind, (outer, n, stride), 1) == full.axis_collective(kind, (outer, n, stride), 1)
        checked += 1
    assert checked >= 3


def test_ring_periods() -> None:
    assert ring_periods(None, 2048, 1) is None
    assert ring_periods(256, 2048, 1) == 8  # one ring over 2,048 GPUs: eight leaf units
    assert ring_periods(256, 512, 4) == 8
    assert ring_periods(256, 4, 512) == 4  # one rank per 512-GPU window (lcm(256, 512))
    assert ring_periods(256, 384, 2) == 3  # three windows: the least worth routing two of
    assert ring_periods(256, 256, 2) is None  # two windows: the two-window ring is the whole ring
    assert ring_periods(256, 100, 3) is None  # 300 ranks: not whole windows of lcm(256, 3)
    assert ring_periods(160, 40, 32) == 8  # dgx-a100: windows of lcm(160, 32) = 160 GPUs


@pytest.mark.parametrize("name,n,stride", [
    ("dgx-h100", 2048, 1), ("dgx-h100", 512, 4), ("dgx-h100", 256, 8), ("dgx-h100", 64, 32), ("dgx-h100", 8, 256),
    ("dgx-h100", 4, 512), ("dgx-h100", 1024, 2), ("dgx-h100-oversub", 128, 4), ("dgx-h100-oversub", 16, 32),
    ("dgx-a100", 40, 32), ("dgx-a100", 16, 80), ("dgx-a100", 256, 5), ("dgx-a100", 128, 10),
    ("gb200-nvl72-4608", 2304, 2), ("gb200-nvl72-4608", 1152, 4), ("gb200-nvl72-4608", 64, 72),
])
def test_rings_over_many_windows_equal_full_routing(name: str, n: int, stride: int) -> None:
    """A ring routed over its first two windows (`ring_periods`) gives the whole ring's bus bandwidth, bottleneck
    edge and latency, bit for bit, in blocks that tile the cluster or leave GPUs idle."""
    if name == "gb200-nvl72-4608" and name not in _TOPOS:  # rack-scale NVLink domains: four windows of 1,152 GPUs
        cluster = hp.cluster("gb200-nvl72", gpus=4608)
        _TOPOS[name] = (Topology(cluster), Topology(cluster))
        _TOPOS[name][1].period = None
    fast, full = _pair(name)
    assert ring_periods(fast.period, n, stride) is not None  # the two-window path is what this checks
    for outer in sorted({1, fast.num_gpus // (n * stride)}):
        for kind in ("all_reduce", "all_gather", "reduce_scatter"):
            assert fast.axis_collective(kind, (outer, n, stride), 1) == full.axis_collective(kind, (outer, n, stride), 1)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(CLUSTERS)),
    kind=st.sampled_from(["all_reduce", "p2p", "all_to_all"]),
    n=st.sampled_from([2, 3, 4, 5, 8, 16]),
    stride=st.sampled_from([1, 2, 4, 8, 12, 16, 32, 40, 64, 128, 256, 512]),
    outer=st.integers(1, 64),
)
def test_symmetric_query_equals_full_routing(name: str, kind: str, n: int, stride: int, outer: int) -> None:
    fast, full = _pair(name)
    if outer * n * stride > fast.num_gpus:
        outer = max(1, fast.num_gpus // (n * stride))
    if outer * n * stride > fast.num_gpus:
        return
    mesh = (outer, n, stride)
    a = fast.axis_collective(kind, mesh, 1)
    b = full.axis_collective(kind, mesh, 1)
    assert a == b


@pytest.mark.parametrize("mesh,axis", [((8, 32, 8), 1), ((8, 32, 8), 0), ((2, 4, 8, 32), 2), ((256, 8), 0)])
def test_symmetric_query_on_four_dimensional_meshes(mesh, axis) -> None:
    fast, full = _pair("dgx-h100")
    for kind in ("all_reduce", "p2p", "all_to_all"):
        assert fast.axis_collective(kind, mesh, axis) == full.axis_collective(kind, mesh, axis)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(CLUSTERS) + ["hetero-a100-h100", "pcie-4xl40s"]),
    kind=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "p2p", "all_to_all"]),
    n=st.sampled_from([2, 3, 4, 8, 16]),
    stride=st.sampled_from([1, 2, 3, 4, 8, 16, 24, 64, 72, 256]),
    outer=st.integers(1, 16),
)
def test_optimistic_bound_is_never_slower(name: str, kind: str, n: int, stride: int, outer: int) -> None:
    topo = _pair(name)[0] if name in CLUSTERS else Topology(hp.cluster(name))
    while outer > 1 and outer * n * stride > topo.num_gpus:
        outer //= 2
    if outer * n * stride > topo.num_gpus:
        return
    mesh = (outer, n, stride)
    real, bound = topo.axis_collective(kind, mesh, 1), topo.axis_collective_bound(kind, mesh, 1)
    assert bound.bus_bandwidth_Bps >= real.bus_bandwidth_Bps
    assert bound.latency_s <= real.latency_s
    for size in (0.0, 1e3, 1e9):
        assert bound.time_s(size) <= real.time_s(size)
