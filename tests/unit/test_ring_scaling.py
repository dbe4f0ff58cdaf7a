"""Ring collectives over many nodes: the measured bus-bandwidth curve (planner.topology.ring_scaling) and its use
in the collective coefficients (comm.AxisBandwidth), checked against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

import hardware_profiles as hp
from planner.cost.comm import AxisBandwidth
from planner.topology import Topology
from planner.topology.ring_scaling import nodes_spanned, ring_bandwidth_factor


@pytest.mark.parametrize(("nodes", "factor"), [
    (1, 1.0), (3, 1.0), (4, 1.0),  # up to the first measured point: the link profile's few-node figure
    (8, 345 / 360), (16, 320 / 360), (64, 280 / 360), (128, 260 / 360),  # the measured points
    (12, (345 - 25 * math.log2(1.5)) / 360),  # log2(12) = 3 + log2(1.5): between 8 (345) and 16 (320) GB/s
    (192, 260 / 360), (10_000, 260 / 360),  # beyond the last point: held at 128 nodes, not extrapolated
])
def test_ring_bandwidth_factor_follows_the_measured_points(nodes: int, factor: float) -> None:
    assert ring_bandwidth_factor(nodes) == pytest.approx(factor, rel=1e-12)


@pytest.mark.parametrize(("size", "stride", "per_node", "nodes"), [
    (1, 8, 8, 1),  # one rank
    (8, 1, 8, 1),  # a TP group inside a DGX
    (16, 1, 8, 2),  # tp 16 over two DGX
    (4, 4, 8, 2),  # 4 ranks 4 apart: ranks 0, 4, 8, 12 on two nodes
    (48, 8, 8, 48),  # a DP group of a tp8 layout: one GPU per node
    (6, 16, 8, 6),
])
def test_nodes_spanned(size: int, stride: int, per_node: int, nodes: int) -> None:
    assert nodes_spanned(size, stride, per_node) == nodes


def test_dp_ring_coefficients_lose_the_measured_share_and_keep_their_latency() -> None:
    """On 256 DGX A100 GPUs a DP ring of 16 ranks 8 apart crosses 16 nodes: its per-byte time is the topology's
    divided by 320/360, for all-reduce and the all-gather / reduce-scatter that reuse it; the latency is kept.
    A ring of 4 nodes and an in-node group are left as the topology gives them."""
    topo = Topology(hp.cluster("dgx-a100", gpus=256))
    bw = AxisBandwidth(topo)
    for size, stride, factor in ((16, 8, 320 / 360), (4, 8, 1.0), (8, 1, 1.0)):
        mesh = (256 // (size * stride), size, stride)
        est = topo.axis_collective("all_reduce", mesh, 1)
        t0, t1 = float(est.time_s(1e-30)), float(est.time_s(1e9))
        a, b, _ = bw.coeffs("all_reduce", mesh, 1)
        assert a == pytest.approx(t0, rel=1e-12)
        assert b == pytest.approx((t1 - t0) / 1e9 / factor, rel=1e-9)
        a_rs, b_rs, _ = bw.coeffs("reduce_scatter", mesh, 1)
        assert (a_rs, b_rs) == pytest.approx((a / 2, b / 2), rel=1e-12)
    # The vectorised columns give the same numbers.
    _, per_byte = bw.columns("all_reduce", np.array([16]), np.array([8]), np.array([256]))
    assert per_byte[0] == pytest.approx(bw.coeffs("all_reduce", (2, 16, 8), 1)[1], rel=1e-12)
