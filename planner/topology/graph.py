"""The networkx view of a layout: nodes are GPUs, switches and NICs; edges carry capacity and latency.

Built from the same arrays the queries use (`planner.topology.layout`), so an edge's `cls` and `idx`
attributes name the array entry it stands for. Every edge is directed (one direction of a link) with
`bandwidth_Bps` (bytes/s), `latency_s` (s), `kind` (link technology) and `link` (a human label).

Node names: gpu<r>, host<h> (PCIe root complex), pcie<s> (PCIe switch), nvswitch<d> (scale-up domain),
nic<x>, and <level name><id> for switch groups (leaf0, spine0, ...).
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np

from hardware_profiles import Cluster
from planner.topology.layout import Layout


def build_graph(lay: Layout, cluster: Cluster) -> nx.DiGraph:
    """DiGraph of the whole cluster (about 6 edges per GPU; seconds for 65,536 GPUs)."""
    g = nx.DiGraph(name=cluster.name, num_gpus=lay.num_gpus, num_hosts=lay.num_hosts)
    names = lay.level_names

    def level_node(k: int, i: int) -> str:
        return f"{names[k]}{i}"

    for r in range(lay.num_gpus):
        g.add_node(f"gpu{r}", kind="gpu", rank=r, host=int(lay.host[r]), local=int(lay.local[r]),
                   gpu=cluster.host_gpu_names[int(lay.host[r])])
    for h in range(lay.num_hosts):
        g.add_node(f"host{h}", kind="host", host=h)
    for d in np.unique(lay.dom[lay.dom >= 0]):
        g.add_node(f"nvswitch{d}", kind="nvswitch", domain=int(d))
    for s, h in enumerate(lay.sw_host):
        g.add_node(f"pcie{s}", kind="pcie_switch", host=int(h))
    for x, (h, rail) in enumerate(zip(lay.nic_host, lay.nic_rail, strict=True)):
        g.add_node(f"nic{x}", kind="nic", host=int(h), rail=int(rail))
    for k, anc in enumerate(lay.anc):
        for i in np.unique(anc):
            g.add_node(level_node(k, int(i)), kind="switch", level=k, tier=names[k])

    def link(u: str, v: str, cls: str, idx: int) -> None:
        cap = float(lay.cap[cls][idx])
        if math.isnan(cap):
            return
        g.add_edge(u, v, bandwidth_Bps=cap, latency_s=float(lay.lat[cls][idx]), kind=str(lay.link_kind[cls][idx]),
                   link=str(lay.label[cls][idx]), cls=cls, idx=int(idx))

    for r in range(lay.num_gpus):
        gpu = f"gpu{r}"
        if lay.dom[r] >= 0:
            link(gpu, f"nvswitch{lay.dom[r]}", "su_up", r)
            link(f"nvswitch{lay.dom[r]}", gpu, "su_down", r)
        link(gpu, f"pcie{lay.sw[r]}", "pcie_up", r)
        link(f"pcie{lay.sw[r]}", gpu, "pcie_down", r)
    for s, h in enumerate(lay.sw_host):
        link(f"pcie{s}", f"host{h}", "sw_up", s)
        link(f"host{h}", f"pcie{s}", "sw_down", s)
    for x, h in enumerate(lay.nic_host):
        parent = f"pcie{lay.nic_sw[x]}" if lay.nic_sw[x] >= 0 else f"host{h}"
        link(f"nic{x}", parent, "nicpcie_up", x)
        link(parent, f"nic{x}", "nicpcie_down", x)
        if lay.anc:
            link(f"nic{x}", level_node(0, int(lay.anc[0][x])), "nic_up", x)
            link(level_node(0, int(lay.anc[0][x])), f"nic{x}", "nic_down", x)
    for k in range(len(lay.anc) - 1):
        pairs = np.unique(np.stack([lay.anc[k], lay.anc[k + 1]], axis=1), axis=0)
        for a, b in pairs:
            link(level_node(k, int(a)), level_node(k + 1, int(b)), f"lvl{k}_up", int(a))
            link(level_node(k + 1, int(b)), level_node(k, int(a)), f"lvl{k}_down", int(a))
    return g


def node_link_json(graph: nx.DiGraph) -> dict:
    """JSON-ready node-link form of the graph."""
    return nx.node_link_data(graph, edges="edges")
