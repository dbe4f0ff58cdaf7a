"""An optimistic estimate of an axis collective, from capacities alone: bus bandwidth never below, latency never
above what `Topology.axis_collective` returns (for ring kinds and p2p; all-to-all gets the trivial bound).

Why it holds (planner.topology.flows' traffic model; groups of a row-major mesh axis: members spaced `stride`
ranks apart; units = scale-up domains or hosts, contiguous rank ranges):
- Every hop of a ring or chain puts load >= 1 on some edge next to its sender: an intra-unit hop on the
  sender's scale-up (or PCIe) uplink; a net hop with one channel (C = 1) on the sender's PCIe uplink and NIC
  uplink. With C >= 2 channels the unit holds >= 2 members, so an intra-unit hop with load 1 exists too.
  Other groups only add load. So bus bandwidth <= the largest capacity of those edge classes.
- When stride >= the largest unit, no two members share a unit: every hop is a net hop with C = 1, so bus
  bandwidth <= min(largest PCIe uplink, largest NIC uplink), and every hop's latency >= the smallest NIC
  latency; otherwise a hop's latency is at least the smallest latency of any edge.
The search (planner.solver.exact) evaluates layouts with these for DP and PP groups first: a layout whose
optimistic step time already exceeds the best found needs no exact query.
"""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np

from planner.topology.estimate import CollectiveEstimate, latency_steps
from planner.topology.layout import Layout


def _largest(lay: Layout, *classes: str) -> float:
    vals = [np.nanmax(lay.cap[c]) for c in classes if c in lay.cap and np.isfinite(lay.cap[c]).any()]
    return float(max(vals)) if vals else math.inf


def _smallest_latency(lay: Layout, *classes: str) -> float:
    vals = [np.nanmin(lay.lat[c]) for c in classes if c in lay.lat and np.isfinite(lay.lat[c]).any()]
    return float(min(vals)) if vals else 0.0


class OptimisticBounds:
    """Per-layout constants of the bound (computed once) and the bound itself."""

    def __init__(self, lay: Layout) -> None:
        self.lay = lay

    @cached_property
    def _constants(self) -> tuple[int, float, float, float, float]:
        lay = self.lay
        largest_unit = int(np.bincount(lay.unit).max()) if lay.num_gpus else 1
        per_gpu = _largest(lay, "su_up", "pcie_up", "nic_up")
        net = min(_largest(lay, "pcie_up"), _largest(lay, "nic_up"))
        lat_net = _smallest_latency(lay, "nic_up", "nic_down")
        lat_any = _smallest_latency(lay, *lay.lat)
        return largest_unit, per_gpu, net, lat_net, lat_any

    def estimate(self, kind: str, mesh_shape: tuple[int, ...], axis: int) -> CollectiveEstimate:
        n = int(mesh_shape[axis])
        groups = math.prod(mesh_shape) // max(n, 1)
        if n <= 1:
            return CollectiveEstimate.trivial(kind, groups)
        if kind == "all_to_all":
            return CollectiveEstimate(kind, n, math.inf, 0.0, "optimistic bound", 0.0, groups)
        stride = math.prod(mesh_shape[axis % len(mesh_shape) + 1:])
        largest_unit, per_gpu, net, lat_net, lat_any = self._constants
        busbw, hop = (net, lat_net) if stride >= largest_unit else (per_gpu, lat_any)
        return CollectiveEstimate(kind, n, busbw, latency_steps(kind, n) * hop, "optimistic bound", hop, groups)
