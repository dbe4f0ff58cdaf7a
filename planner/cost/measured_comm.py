"""Collective times from measurements (`meshplan calibrate`) instead of the ring model, where they apply.

The topology's ring model (planner.topology.estimate) derives every kind from one link bandwidth and a
per-step latency, the way NCCL's tuning model does. Other backends implement each kind their own way:
gloo's reduce-scatter, for one, costs several times its all-reduce on a CPU host, and the per-call cost of
CPU processes that share cores is scheduling latency, not wire latency. When the intra-host link of every
host carries `measured_collectives` (LinkProfile, each with its source), a group that lies inside one host
is costed from the measurement of its kind:

    time(S) = latency(kind, n) + bytes_factor(kind, n) * S / busbw(kind, n)

For a group size that was not measured the nearest measured size is used, its latency scaled by the kind's
sequential step count (latency_steps(kind, n) / latency_steps(kind, n_measured), the ring model's scaling)
and its bus bandwidth kept. Groups spanning hosts keep the ring model.
"""

from __future__ import annotations

import numpy as np

from planner.topology.estimate import bytes_factor, latency_steps


class MeasuredComm:
    """Affine coefficients (seconds at 0 bytes, seconds per byte) from a cluster's measured collectives."""

    def __init__(self, topology) -> None:
        self.topology = topology
        self.table: dict[str, dict[int, tuple[float, float]]] = {}
        cluster = topology.cluster
        names = {g.node.scaleup_link or g.node.pcie_link for g in cluster.host_groups}
        if len(names) != 1 or None in names:
            return
        link = cluster.links[names.pop()]
        for m in getattr(link, "measured_collectives", None) or []:
            self.table.setdefault(m.kind, {})[int(m.group_size)] = (float(m.latency_s), float(m.bus_bandwidth_Bps))

    def coeffs(self, kind: str, mesh_shape: tuple[int, ...], axis: int) -> tuple[float, float] | None:
        """(a, b) for `kind` along `axis` of `mesh_shape` when measured and every group is inside a host."""
        sizes = self.table.get(kind)
        n = int(mesh_shape[axis])
        if not sizes or n < 2 or not self._intra_host(mesh_shape, axis):
            return None
        ref = min(sizes, key=lambda s: (abs(s - n), -s))
        latency, busbw = sizes[ref]
        if ref != n and kind != "p2p":
            latency *= latency_steps(kind, n) / latency_steps(kind, ref)
        factor = 1.0 if kind == "p2p" else bytes_factor(kind, n)
        return latency, factor / busbw

    def _intra_host(self, mesh_shape: tuple[int, ...], axis: int) -> bool:
        topo = self.topology
        if topo.num_gpus <= topo.gpus_per_node:
            return True
        groups = np.asarray(topo.mesh_groups(mesh_shape, axis))
        per = topo.gpus_per_node
        return bool(np.all(groups.min(axis=1) // per == groups.max(axis=1) // per))
