"""Per-GPU ancestor arrays of a cluster: the structure both the graph and the collective queries use.

Every GPU rank (host-major: rank = host * gpus_per_node + local) gets its host, scale-up domain (NVSwitch
of its node, or a rack-scale NVLink domain), PCIe switch and nearest NIC; every NIC gets its switch at each
network level. Edge classes (one capacity array each, bytes/s per direction) are:

    su_up/su_down       GPU <-> its scale-up (NVSwitch) fabric          per GPU
    pcie_up/pcie_down   GPU <-> its PCIe switch (or root port)          per GPU
    sw_up/sw_down       PCIe switch <-> host root complex               per PCIe switch
    nicpcie_up/_down    NIC -> its PCIe switch / switch -> NIC          per NIC
    nic_up/nic_down     NIC <-> leaf switch                             per NIC
    lvl{k}_up/_down     level-k switch group <-> level k+1             per level-k group (k < top)

`planner.topology.graph` builds the networkx graph from exactly these arrays, and the queries in
`planner.topology.flows` count loads on them with numpy, so both views agree by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hardware_profiles import Cluster


def _ratio(r: float) -> str:
    return f"{r:g}:1"


@dataclass
class Layout:
    """Arrays describing one cluster (see module docstring)."""

    num_gpus: int
    gpus_per_node: int
    num_hosts: int
    host: np.ndarray
    local: np.ndarray
    dom: np.ndarray
    unit: np.ndarray
    sw: np.ndarray
    nic: np.ndarray
    sw_host: np.ndarray
    nic_host: np.ndarray
    nic_rail: np.ndarray
    nic_sw: np.ndarray
    anc: list[np.ndarray]
    cap: dict[str, np.ndarray] = field(default_factory=dict)
    lat: dict[str, np.ndarray] = field(default_factory=dict)
    label: dict[str, np.ndarray] = field(default_factory=dict)
    link_kind: dict[str, np.ndarray] = field(default_factory=dict)
    level_names: list[str] = field(default_factory=list)
    rails: int = 0

    @property
    def num_levels(self) -> int:
        return len(self.anc)


def build_layout(cluster: Cluster) -> Layout:
    """Vectorised construction of the arrays for `cluster` (fast: 65,536 GPUs in a few ms)."""
    gpn, hosts = cluster.gpus_per_node, cluster.num_nodes
    n = hosts * gpn
    groups = cluster.host_groups
    gi = np.repeat(np.arange(len(groups)), [g.hosts for g in groups])  # group of each host

    def per_group(fn, dtype=float) -> np.ndarray:
        return np.array([fn(g) for g in groups], dtype=dtype)[gi]

    host = np.repeat(np.arange(hosts), gpn)
    local = np.tile(np.arange(gpn), hosts)

    # Scale-up domains: the host's NVSwitch, or `nvlink_domain.hosts` consecutive hosts (NVL72).
    has_su = per_group(lambda g: g.node.scaleup_link is not None, bool)
    dom_of_host = np.arange(hosts) // cluster.nvlink_domain.hosts if cluster.nvlink_domain else np.arange(hosts)
    dom_of_host = np.where(has_su, dom_of_host, -1)
    dom = dom_of_host[host]
    ndom = int(dom_of_host.max()) + 1 if has_su.any() else 0
    unit = np.where(dom >= 0, dom, ndom + host)

    # PCIe switches: node.gpus // gpus_per_pcie_switch per host (the whole shape, used GPUs or not).
    nsw_h = per_group(lambda g: g.node.gpus // g.node.gpus_per_pcie_switch, np.int64)
    sw_off = np.concatenate([[0], np.cumsum(nsw_h)])
    gpps = per_group(lambda g: g.node.gpus_per_pcie_switch, np.int64)
    sw = sw_off[host] + local // gpps[host]
    sw_host = np.repeat(np.arange(hosts), nsw_h)

    # NICs and the NIC nearest each GPU; a NIC sits under the PCIe switch of its GPUs when they share one,
    # else on its own root port (-1).
    nnic_h = per_group(lambda g: g.node.nics, np.int64)
    nic_off = np.concatenate([[0], np.cumsum(nnic_h)])
    nic_local = per_group(lambda g: [g.node.nic_index(i) for i in range(gpn)], np.int64).reshape(hosts, gpn)
    nic = np.where(nnic_h[host] > 0, nic_off[host] + nic_local[host, local], -1)
    nic_host = np.repeat(np.arange(hosts), nnic_h)
    nic_rail = np.arange(len(nic_host)) - nic_off[nic_host]

    def nic_switch_local(g) -> list[int]:
        out = []
        for r in range(g.node.nics):
            sws = {i // g.node.gpus_per_pcie_switch for i in range(g.node.gpus) if g.node.nic_index(i) == r}
            out.append(sws.pop() if len(sws) == 1 else -1)
        return out

    nic_sw_local = [nic_switch_local(g) for g in groups]
    # per-group table padded to the largest NIC count, gathered per NIC
    rmax = int(nnic_h.max()) if len(nnic_h) else 0
    table = np.full((len(groups), max(rmax, 1)), -1, dtype=np.int64)
    for i, row in enumerate(nic_sw_local):
        table[i, : len(row)] = row
    nsl = table[gi[nic_host], nic_rail] if len(nic_host) else np.zeros(0, np.int64)
    nic_sw = np.where(nsl >= 0, sw_off[nic_host] + nsl, -1)

    lay = Layout(n, gpn, hosts, host, local, dom, unit, sw, nic, sw_host, nic_host, nic_rail, nic_sw, [], rails=rmax)
    _capacities(lay, cluster, gi, has_su)
    _network(lay, cluster, rmax)
    return lay


def _capacities(lay: Layout, cluster: Cluster, gi: np.ndarray, has_su: np.ndarray) -> None:
    groups, links = cluster.host_groups, cluster.links
    host = lay.host

    def gval(fn, dtype=float) -> np.ndarray:
        return np.array([fn(g) for g in groups], dtype=dtype)[gi]

    def su_link(g):
        if g.node.scaleup_link is None:
            return None
        return cluster.nvlink_domain.link if cluster.nvlink_domain else g.node.scaleup_link

    def su_cap(g) -> float:
        name = su_link(g)
        if name is None:
            return np.nan
        lk, gp = links[name], cluster.gpus[g.node.gpu]
        line = min(lk.bandwidth_Bps, gp.nvlink_bandwidth_Bps) if lk.kind == "nvlink" and gp.nvlink_bandwidth_Bps > 0 else lk.bandwidth_Bps
        return line * lk.protocol_efficiency

    # Capacities are usable payload rates: line rate x the link's protocol efficiency (NCCL overhead).
    def pcie(g, attr: str, default=np.nan):
        if not g.node.pcie_link:
            return default
        lk = links[g.node.pcie_link]
        return lk.bandwidth_Bps * lk.protocol_efficiency if attr == "bandwidth_Bps" else getattr(lk, attr)

    def gpu_pcie(g) -> float:
        if not g.node.pcie_link:
            return np.nan
        eff = links[g.node.pcie_link].protocol_efficiency
        return min(pcie(g, "bandwidth_Bps"), cluster.gpus[g.node.gpu].pcie_bandwidth_Bps * eff)

    def nic_attr(g, attr: str, default=np.nan):
        if not g.node.nic_link:
            return default
        lk = links[g.node.nic_link]
        return lk.bandwidth_Bps * lk.protocol_efficiency if attr == "bandwidth_Bps" else getattr(lk, attr)

    per_host = {
        "su": (gval(su_cap), gval(lambda g: links[su_link(g)].latency_s if su_link(g) else np.nan), gval(lambda g: su_link(g) or "", object), gval(lambda g: links[su_link(g)].kind if su_link(g) else "", object)),
        "pcie": (gval(gpu_pcie), gval(lambda g: pcie(g, "latency_s")), gval(lambda g: g.node.pcie_link or "", object), gval(lambda g: "pcie", object)),
        "sw": (gval(lambda g: pcie(g, "bandwidth_Bps")), gval(lambda g: pcie(g, "latency_s")), gval(lambda g: f"{g.node.pcie_link} switch uplink", object), gval(lambda g: "pcie", object)),
        "nicpcie": (gval(lambda g: pcie(g, "bandwidth_Bps")), gval(lambda g: pcie(g, "latency_s")), gval(lambda g: f"{g.node.pcie_link} (GPU-NIC)", object), gval(lambda g: "pcie", object)),
        "nic": (gval(lambda g: nic_attr(g, "bandwidth_Bps")), gval(lambda g: nic_attr(g, "latency_s")), gval(lambda g: f"{g.node.nic_link} NIC", object), gval(lambda g: nic_attr(g, "kind", ""), object)),
    }
    index = {"su": host, "pcie": host, "sw": lay.sw_host, "nicpcie": lay.nic_host, "nic": lay.nic_host}
    # Both directions of a class have the same values: one read-only array serves both (65,536 GPUs: 20 arrays
    # of 65,536 entries fewer to build and touch).
    for cls, (cap, lat, label, kind) in per_host.items():
        idx = index[cls]
        for table, per in ((lay.cap, cap), (lay.lat, lat), (lay.label, label), (lay.link_kind, kind)):
            table[f"{cls}_up"] = table[f"{cls}_down"] = _read_only(per[idx])


def _read_only(arr: np.ndarray) -> np.ndarray:
    arr.flags.writeable = False
    return arr


def _network(lay: Layout, cluster: Cluster, rails: int) -> None:
    """Switch group of each NIC per level, and the uplink capacity of each level below the top."""
    net = cluster.network
    if net is None or len(lay.nic_host) == 0:
        return
    levels = net.levels
    lay.level_names = [lv.name for lv in levels]
    nlev = len(levels)
    leaf_unit = lay.nic_host // levels[0].size if nlev >= 2 else np.zeros_like(lay.nic_host)
    lay.anc.append(leaf_unit * rails + lay.nic_rail if net.rail_optimized else leaf_unit)
    div = 1
    for k in range(1, nlev):
        if k == nlev - 1:
            lay.anc.append(np.zeros_like(leaf_unit))
        else:
            div *= levels[k].size
            lay.anc.append(leaf_unit // div)
    cap = 0.0
    for k in range(nlev - 1):
        lv, lk = levels[k], cluster.links[levels[k].link]
        down = lv.size * lk.bandwidth_Bps * lk.protocol_efficiency if k == 0 else lv.size * cap * (rails if (k == 1 and net.rail_optimized) else 1)
        cap = down / lv.oversubscription
        count = int(lay.anc[k].max()) + 1
        ratio = "" if lv.oversubscription == 1 else f" {_ratio(lv.oversubscription)}"
        for d in ("up", "down"):
            key = f"lvl{k}_{d}"
            lay.cap[key] = np.full(count, cap)
            lay.lat[key] = np.full(count, lk.latency_s)
            lay.label[key] = np.full(count, f"{lv.name} uplink{ratio}", dtype=object)
            lay.link_kind[key] = np.full(count, lk.kind, dtype=object)
