"""Oracle: the documented traffic model evaluated slowly on the networkx graph, pair by pair.

The oracle takes NIC affinity from the cluster profile (not from the layout arrays), routes every flow with
`nx.shortest_path` in the graph (PCIe tree inside a host, switch tree between NICs: both are trees, so the
path is unique), sums loads per edge, and takes min bandwidth/load over the target group's edges. The
vectorised `Topology.collective` must agree on random groups of several clusters.
"""

from __future__ import annotations

import random
from collections import defaultdict

import networkx as nx
import pytest

import hardware_profiles as hp
from planner.topology import Topology

HOST_CLS = {"pcie_up", "pcie_down", "sw_up", "sw_down", "nicpcie_up", "nicpcie_down"}


class Oracle:
    def __init__(self, topo: Topology) -> None:
        self.t, self.g, c = topo, topo.graph, topo.cluster
        self.gpn = c.gpus_per_node
        self.nic_of, self.unit_of = {}, {}
        nic_base, host = 0, 0
        for grp in c.host_groups:
            for _ in range(grp.hosts):
                dom = None
                if grp.node.scaleup_link:
                    dom = host // c.nvlink_domain.hosts if c.nvlink_domain else host
                for local in range(self.gpn):
                    r = host * self.gpn + local
                    self.nic_of[r] = f"nic{nic_base + grp.node.nic_index(local)}" if grp.node.nics else None
                    self.unit_of[r] = ("d", dom) if dom is not None else ("h", host)
                nic_base += grp.node.nics
                host += 1
        self.host_g = self._sub(lambda cls: cls in HOST_CLS)
        self.fab_g = self._sub(lambda cls: cls.startswith(("nic_", "lvl")))

    def _sub(self, keep) -> nx.DiGraph:
        return self.g.edge_subgraph([(u, v) for u, v, d in self.g.edges(data=True) if keep(d["cls"])])

    @staticmethod
    def _edges(path: list[str]) -> list[tuple[str, str]]:
        return list(zip(path, path[1:], strict=False))

    def _intra(self, a: int, b: int) -> list[tuple[str, str]]:
        u, v = f"gpu{a}", f"gpu{b}"
        if self.unit_of[a][0] == "d":
            (sw,) = [n for n in self.g.successors(u) if n.startswith("nvswitch")]
            return [(u, sw), (sw, v)]
        return self._edges(nx.shortest_path(self.host_g, u, v))

    def _net(self, a: int, x: str, y: str, b: int) -> list[tuple[str, str]]:
        return (self._edges(nx.shortest_path(self.host_g, f"gpu{a}", x)) + self._edges(nx.shortest_path(self.fab_g, x, y))
                + self._edges(nx.shortest_path(self.host_g, y, f"gpu{b}")))

    def flows(self, kind: str, group: list[int]) -> list[tuple[list[tuple[str, str]], float]]:
        n, out = len(group), []
        if kind == "p2p":
            for a, b in zip(group, group[1:], strict=False):
                same = self.unit_of[a] == self.unit_of[b]
                out.append((self._intra(a, b) if same else self._net(a, self.nic_of[a], self.nic_of[b], b), 1.0))
            return out
        if kind == "all_to_all":
            for a in group:
                for b in group:
                    if a != b:
                        same = self.unit_of[a] == self.unit_of[b]
                        path = self._intra(a, b) if same else self._net(a, self.nic_of[a], self.nic_of[b], b)
                        out.append((path, 1 / (n - 1)))
            return out
        ring = sorted(group)
        runs: list[list[int]] = []
        for r in ring:
            if runs and self.unit_of[runs[-1][-1]] == self.unit_of[r]:
                runs[-1].append(r)
            else:
                runs.append([r])
        # distinct NICs of each run, in order, each with the first GPU that uses it
        nics = [list(dict.fromkeys(self.nic_of[r] for r in run)) for run in runs]
        owner = [{self.nic_of[r]: r for r in reversed(run)} for run in runs]
        C = min(len(x) for x in nics)
        for run in runs:
            for a, b in zip(run, run[1:], strict=False):
                out.append((self._intra(a, b), 1.0))
        if len(runs) == 1:
            if len(ring) > 1:
                out.append((self._intra(ring[-1], ring[0]), 1.0))
            return out
        for i in range(len(runs)):
            j = (i + 1) % len(runs)
            for c in range(C):
                x, y = nics[i][c], nics[j][c]
                out.append((self._net(owner[i][x], x, y, owner[j][y]), 1.0 / C))
        return out

    def busbw(self, kind: str, group: list[int], concurrent: list[list[int]]) -> float:
        load: dict[tuple[str, str], float] = defaultdict(float)
        for grp in concurrent:
            for path, w in self.flows(kind, grp):
                for e in path:
                    load[e] += w
        used = {e for path, _ in self.flows(kind, group) for e in path}
        return min(self.g.edges[e]["bandwidth_Bps"] / load[e] for e in used)


CASES = [
    ("dgx-h100", {"nodes": 3}),
    ("dgx-a100", {"nodes": 3}),
    ("dgx-h100-oversub", {"nodes": 8}),
    ("pcie-4xl40s", {"nodes": 3}),
    ("gb200-nvl72", {"nodes": 36}),
    ("hetero-a100-h100", {"nodes": 3}),
    ("dgx-h100", {"gpus": 12}),
]


@pytest.mark.parametrize(("name", "kw"), CASES)
@pytest.mark.parametrize("kind", ["all_reduce", "all_to_all", "p2p"])
def test_vectorised_matches_graph_oracle(name, kw, kind):
    t = Topology(hp.cluster(name, **kw))
    oracle = Oracle(t)
    rng = random.Random(f"{name}{kw}{kind}")
    n = t.num_gpus
    for _ in range(6):
        # a random partition of a random subset into equal groups, all concurrent
        size = rng.choice([2, 3, 4, 5, 8])
        count = max(1, min(4, n // size))
        ranks = rng.sample(range(n), size * count)
        groups = [ranks[i * size : (i + 1) * size] for i in range(count)]
        target = groups[0]
        est = t.collective(kind, target, concurrent=groups)
        assert est.bus_bandwidth_Bps == pytest.approx(oracle.busbw(kind, target, groups), rel=1e-9)


@pytest.mark.parametrize(("shape", "axis"), [((3, 8), 0), ((3, 2, 4), 1), ((6, 4), 0), ((24,), 0)])
def test_axis_collective_matches_slowest_group(shape, axis):
    t = Topology(hp.cluster("dgx-h100", nodes=3))
    oracle = Oracle(t)
    groups = t.mesh_groups(shape, axis)
    for kind in ("all_reduce", "all_to_all", "p2p"):
        slowest = min(oracle.busbw(kind, g, groups) for g in groups)
        assert t.axis_collective(kind, shape, axis).bus_bandwidth_Bps == pytest.approx(slowest, rel=1e-9)
