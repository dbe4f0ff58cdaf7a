"""Collective times from measurements instead of the ring model, where they apply.

The topology's ring model (planner.topology.estimate) derives every kind from one link bandwidth and a
per-step latency, the way NCCL's tuning model does. Measurements (`LinkProfile.measured_collectives`, each
with its source) enter in two places:

- Inside one host (`meshplan calibrate`). Other backends implement each kind their own way: gloo's
  reduce-scatter, for one, costs several times its all-reduce on a CPU host, and the per-call cost of CPU
  processes that share cores is scheduling latency, not wire latency. When the intra-host link of every host
  carries measured collectives, a group that lies inside one host is costed from the measurement of its kind
  (`MeasuredComm.coeffs`): it REPLACES the ring model, since it measured the whole path.
- Across hosts (entered by hand from a multi-host run, with its source: calibrate measures one host). When
  the NIC link of every host carries measured collectives, a group that spans hosts (and, where the cluster
  has a rack-scale NVLink domain, spans domains: only then does it cross the network) gets the measured
  figure as a FLOOR on its time (`MeasuredComm.network_floor`): the seconds at zero bytes and the seconds
  per byte each at least the ring model's. A multi-host measurement shows a bottleneck the model lacks
  (NCCL over Omni-Path on Jean Zay: a per-channel limit of its verbs transport, docs/cost_sources.md), so it
  caps the bus bandwidth; but it was taken for one group pattern, and the model's own limits (groups that
  share a NIC, rings over many nodes, oversubscribed tiers) can be tighter for another, so it never makes a
  collective faster than the model says (bus bandwidth min(measured, model)). That also keeps the search's
  capacity-only pass a lower bound: a floor applied to a faster estimate stays at most the floored one.

In both, per kind:

    time(S) = latency(kind, n) + bytes_factor(kind, n) * S / busbw(kind, n)

For a group size that was not measured the nearest measured size is used, its latency scaled by the kind's
sequential step count (latency_steps(kind, n) / latency_steps(kind, n_measured), the ring model's scaling)
and its bus bandwidth kept. Across hosts, all-gather and reduce-scatter without their own measurement take
the all-reduce's (planner.cost.comm: the same ring and channels move the same bytes per step, LESS SURE);
p2p and all-to-all without one keep the model (NCCL runs them over other connections than the ring's).
"""

from __future__ import annotations

import numpy as np

from planner.topology.estimate import bytes_factor, latency_steps

Table = dict[str, dict[int, tuple[float, float]]]


def _link_table(cluster, link_of) -> Table:
    """Measured (latency, busbw) per kind and group size of the one link `link_of(node)` names on every host;
    empty when hosts name different links, none, or one without measurements."""
    names = {link_of(g.node) for g in cluster.host_groups}
    table: Table = {}
    if len(names) != 1 or None in names:
        return table
    for m in getattr(cluster.links[names.pop()], "measured_collectives", None) or []:
        table.setdefault(m.kind, {})[int(m.group_size)] = (float(m.latency_s), float(m.bus_bandwidth_Bps))
    return table


def _nearest(sizes: dict[int, tuple[float, float]], kind: str, n: int) -> tuple[float, float]:
    """(a, b) for `kind` over `n` ranks from the nearest measured group size (the larger on a tie)."""
    ref = min(sizes, key=lambda s: (abs(s - n), -s))
    latency, busbw = sizes[ref]
    if ref != n and kind != "p2p":
        latency *= latency_steps(kind, n) / latency_steps(kind, ref)
    factor = 1.0 if kind == "p2p" else bytes_factor(kind, n)
    return latency, factor / busbw


class MeasuredComm:
    """Affine coefficients (seconds at 0 bytes, seconds per byte) from a cluster's measured collectives."""

    def __init__(self, topology) -> None:
        self.topology = topology
        cluster = topology.cluster
        self.table: Table = _link_table(cluster, lambda node: node.scaleup_link or node.pcie_link)
        self.network: Table = _link_table(cluster, lambda node: node.nic_link)
        domain = getattr(cluster, "nvlink_domain", None)
        self._network_unit = None if domain is None else int(domain.hosts)

    @property
    def any(self) -> bool:
        """Whether any measurement applies on this cluster (the answers then depend on the ranks in use)."""
        return bool(self.table or self.network)

    def coeffs(self, kind: str, mesh_shape: tuple[int, ...], axis: int) -> tuple[float, float] | None:
        """(a, b) for `kind` along `axis` of `mesh_shape` when measured and every group is inside a host."""
        sizes = self.table.get(kind)
        n = int(mesh_shape[axis])
        if not sizes or n < 2 or not self._within(mesh_shape, axis, 1):
            return None
        return _nearest(sizes, kind, n)

    def network_floor(self, kind: str, mesh_shape: tuple[int, ...], axis: int) -> tuple[float, float] | None:
        """(a, b) below which `kind` along `axis` cannot go when its groups cross the measured network."""
        sizes = self.network.get(kind)
        n = int(mesh_shape[axis])
        if not sizes or n < 2:
            return None
        if self._within(mesh_shape, axis, self._network_unit or 1):
            return None
        return _nearest(sizes, kind, n)

    def _within(self, mesh_shape: tuple[int, ...], axis: int, hosts: int) -> bool:
        """Whether every group along `axis` lies inside one block of `hosts` consecutive hosts."""
        topo = self.topology
        per = topo.gpus_per_node * hosts
        if topo.num_gpus <= per:
            return True
        groups = np.asarray(topo.mesh_groups(mesh_shape, axis))
        return bool(np.all(groups.min(axis=1) // per == groups.max(axis=1) // per))
