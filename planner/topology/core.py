"""`Topology`: the cluster as a graph, and what bandwidth/latency a collective over a GPU group gets.

    topo = Topology(hardware_profiles.cluster("dgx-h100", nodes=4))
    est = topo.collective("all_reduce", range(8))           # NVLink4 inside one DGX
    est.time_s(1e9)
    topo.axis_collective("all_reduce", (4, 8), axis=0)       # DP over 4 nodes, all 8 groups at once

Construction builds per-GPU ancestor arrays (planner.topology.layout) in milliseconds even for 65,536 GPUs;
`graph` (networkx) is built from the same arrays on first use. Queries count edge loads with numpy
(planner.topology.flows): bus bandwidth = min over the edges the group uses of capacity / load, with the
loads of every concurrent group added in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

import planner.topology.flows as flows
import planner.topology.symmetry as symmetry
from hardware_profiles import Cluster, GPUProfile
from planner.topology.estimate import KINDS, CollectiveEstimate, latency_steps
from planner.topology.layout import Layout, build_layout
from planner.topology.optimistic import OptimisticBounds

if TYPE_CHECKING:
    import networkx as nx  # imported with the graph, on first use: the queries work on arrays


class Topology:
    """Graph view and collective queries of one resolved cluster."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.layout: Layout = build_layout(cluster)
        self._axis_cache: dict[tuple, CollectiveEstimate] = {}
        self._route_cache: dict[tuple, tuple[tuple[float, str, int], float]] = {}
        net = cluster.network
        domain = cluster.nvlink_domain.hosts if cluster.nvlink_domain else 1
        # Translation period of the layout (None: not periodic); axis queries route one class of groups.
        self.period: int | None = symmetry.period(self.layout, domain, [lv.size for lv in net.levels] if net else [])
        self._optimistic = OptimisticBounds(self.layout)

    @property
    def num_gpus(self) -> int:
        return self.layout.num_gpus

    @property
    def gpus_per_node(self) -> int:
        return self.layout.gpus_per_node

    def host_of(self, rank: int) -> int:
        """Host index of GPU `rank` (ranks are host-major)."""
        self._check_rank(rank)
        return rank // self.layout.gpus_per_node

    def local_index(self, rank: int) -> int:
        """Index of GPU `rank` within its host."""
        self._check_rank(rank)
        return rank % self.layout.gpus_per_node

    def hosts_and_indices(self, count: int) -> list[tuple[int, int]]:
        """(host_of, local_index) of GPUs 0..count-1, at once (a plan places up to every GPU of the cluster)."""
        ranks = self._first_ranks(count)  # divmod(rank, per_host), vectorised; back as Python ints
        per_host = int(self.layout.gpus_per_node)
        return list(zip((ranks // per_host).tolist(), (ranks % per_host).tolist()))

    def hosts_of_ranks(self, count: int) -> list[int]:
        """host_of of GPUs 0..count-1, at once (what MFU's per-GPU peak needs, without the local indices)."""
        return (self._first_ranks(count) // int(self.layout.gpus_per_node)).tolist()

    def _first_ranks(self, count: int) -> np.ndarray:
        if not 0 <= count <= self.num_gpus:
            raise IndexError(f"{count} ranks do not fit the cluster's {self.num_gpus} GPUs")
        return np.arange(count, dtype=np.int64)

    def gpu_profile(self, rank: int) -> GPUProfile:
        """GPU profile of `rank` (differs by host in a heterogeneous cluster)."""
        return self.cluster.gpu_profile_of_host(self.host_of(rank))

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.num_gpus:
            raise IndexError(f"rank {rank} out of range 0..{self.num_gpus - 1}")

    @cached_property
    def graph(self) -> nx.DiGraph:
        """networkx DiGraph of GPUs, switches and NICs (built on first use from the layout arrays)."""
        from planner.topology.graph import build_graph

        return build_graph(self.layout, self.cluster)

    # ---- queries -------------------------------------------------------------------------------------

    def _as_block(self, group: Iterable[int]) -> np.ndarray:
        arr = np.asarray(list(group), dtype=np.int64)
        if arr.ndim != 1:
            raise ValueError("a group is a flat sequence of GPU ranks")
        if len(arr) and (arr.min() < 0 or arr.max() >= self.num_gpus):
            raise ValueError(f"group ranks must be in 0..{self.num_gpus - 1}")
        if len(np.unique(arr)) != len(arr):
            raise ValueError("a group lists a GPU twice")
        return arr

    def _route(self, kind: str, blocks: list[np.ndarray], *, rows_sorted: bool = False,
               periods: int = 1) -> tuple[flows.Loads, list[np.ndarray]]:
        """Loads and per-row latencies of `blocks` (`periods`: rings given by their first two windows, `flows.ring`)."""
        loads = flows.Loads(self.layout)
        lats = []
        for G in blocks:
            if G.shape[1] <= 1:
                lats.append(np.zeros(G.shape[0]))
            elif kind == "p2p":
                lats.append(flows.chain(loads, G))
            elif kind == "all_to_all":
                lats.append(flows.all_to_all(loads, G))
            else:
                lats.append(flows.ring(loads, G if rows_sorted else np.sort(G, axis=1), periods))
        return loads, lats

    def _estimate(self, kind: str, n: int, ratio: tuple[float, str, int], hop: float, groups: int) -> CollectiveEstimate:
        busbw, cls, idx = ratio
        label = str(self.layout.label[cls][idx]) if cls else "none"
        return CollectiveEstimate(kind, n, busbw, latency_steps(kind, n) * hop, label, hop, groups)

    def collective(
        self, kind: str, group: Sequence[int], *, concurrent: Sequence[Sequence[int]] | None = None
    ) -> CollectiveEstimate:
        """Bandwidth and latency of collective `kind` over `group` while `concurrent` groups also run.

        `concurrent` lists every group running at the same time (it may include `group`; it is added if
        missing). Ring kinds order the group by rank; p2p uses the given order as a chain.
        """
        if kind not in KINDS:
            raise ValueError(f"unknown collective kind {kind!r}; allowed: {', '.join(KINDS)}")
        target = self._as_block(group)
        others = [self._as_block(g) for g in (concurrent or [])]
        same = (lambda o: (o == target).all()) if kind == "p2p" else (lambda o: (np.sort(o) == np.sort(target)).all())
        if not any(len(o) == len(target) and same(o) for o in others):
            others.append(target)
        if len(target) <= 1:
            return CollectiveEstimate.trivial(kind, len(others))
        by_size: dict[int, list[np.ndarray]] = {}
        for o in others:
            by_size.setdefault(len(o), []).append(o)
        total, _ = self._route(kind, [np.stack(v) for v in by_size.values()])
        alone, lat = self._route(kind, [target[None, :]])
        return self._estimate(kind, len(target), total.min_ratio(used=alone), float(lat[0][0]), len(others))

    def mesh_groups(self, mesh_shape: tuple[int, ...], axis: int, ranks: Sequence[int] | None = None) -> list[list[int]]:
        """Groups along `axis` of a row-major mesh laid over ranks 0..prod-1 (or over `ranks`)."""
        return self._mesh_block(tuple(mesh_shape), axis, ranks).tolist()

    def _mesh_block(self, mesh_shape: tuple[int, ...], axis: int, ranks: Sequence[int] | None) -> np.ndarray:
        size = self._check_mesh(mesh_shape, axis, ranks is None)
        if ranks is None:
            arr = np.arange(size, dtype=np.int64)
        else:
            arr = self._as_block(ranks)
            if len(arr) != size:
                raise ValueError(f"mesh {mesh_shape} needs {size} ranks; got {len(arr)}")
        return np.moveaxis(arr.reshape(mesh_shape), axis, -1).reshape(-1, mesh_shape[axis])

    def _check_mesh(self, mesh_shape: tuple[int, ...], axis: int, on_ranks: bool) -> int:
        """The mesh's size, after checking its shape and axis (and, `on_ranks`, that ranks 0..size-1 exist)."""
        if not mesh_shape or any(int(s) < 1 for s in mesh_shape):
            raise ValueError(f"mesh_shape {mesh_shape} must be positive integers")
        size = math.prod(mesh_shape)
        if not -len(mesh_shape) <= axis < len(mesh_shape):
            raise ValueError(f"axis {axis} out of range for a {len(mesh_shape)}-d mesh")
        if on_ranks and size > self.num_gpus:
            raise ValueError(f"mesh {mesh_shape} needs {size} GPUs; the cluster has {self.num_gpus}")
        return size


    def axis_collective(
        self, kind: str, mesh_shape: tuple[int, ...], axis: int, ranks: Sequence[int] | None = None
    ) -> CollectiveEstimate:
        """The slowest group's estimate for `kind` along `axis`, with all groups of that axis concurrent."""
        if kind not in KINDS:
            raise ValueError(f"unknown collective kind {kind!r}; allowed: {', '.join(KINDS)}")
        key = (kind, tuple(int(s) for s in mesh_shape), int(axis), None if ranks is None else tuple(ranks))
        hit = self._axis_cache.get(key)
        if hit is not None:
            return hit
        if ranks is not None:
            G = self._mesh_block(key[1], key[2], ranks)
            outer, n, stride = 1, G.shape[1], 0
        else:  # groups of a mesh over ranks 0..: built only as far as they are routed (`_leading_groups`)
            shape, a = key[1], key[2] % max(len(key[1]), 1)
            self._check_mesh(shape, key[2], True)
            outer, n, stride = math.prod(shape[:a]), shape[a], math.prod(shape[a + 1:])
        groups = outer * stride if ranks is None else G.shape[0]
        if n <= 1:
            est = CollectiveEstimate.trivial(kind, groups)
        else:
            rows, periods = None, None
            if ranks is None:
                rows = symmetry.representative_rows(self.period, outer, n, stride)
                if kind not in ("p2p", "all_to_all"):  # a ring whose windows repeat: route two of them
                    periods = symmetry.ring_periods(self.period, n, stride)
            route_key = (kind, n, stride, rows) if rows is not None else None
            routed = self._route_cache.get(route_key) if route_key else None
            if routed is None:
                if ranks is not None:
                    part = G
                else:  # rows of a mesh over ascending ranks are already ascending
                    # periods: the rows are those of the first block (rows = stride), over their first two windows
                    part = _leading_groups(outer, n, stride, groups if rows is None else rows,
                                           2 * n // periods if periods else n)
                loads, lat = self._route(kind, [part], rows_sorted=ranks is None, periods=periods or 1)
                routed = (loads.min_ratio(), float(lat[0].max()))
                if route_key:
                    self._route_cache[route_key] = routed
            est = self._estimate(kind, n, routed[0], routed[1], groups)
        self._axis_cache[key] = est
        return est

    def clear_cache(self) -> None:
        """Forget every answered axis query (benchmarks time uncached queries with it)."""
        self._axis_cache.clear()
        self._route_cache.clear()

    def axis_collective_bound(self, kind: str, mesh_shape: tuple[int, ...], axis: int) -> CollectiveEstimate:
        """An estimate never slower than `axis_collective` (planner.topology.optimistic), from capacities only."""
        if kind not in KINDS:
            raise ValueError(f"unknown collective kind {kind!r}; allowed: {', '.join(KINDS)}")
        return self._optimistic.estimate(kind, tuple(int(s) for s in mesh_shape), int(axis))


def _leading_groups(outer: int, n: int, stride: int, rows: int, cols: int) -> np.ndarray:
    """Rows 0..rows-1, columns 0..cols-1 of `Topology._mesh_block` over ranks 0.. of the mesh (outer, n, stride),
    axis 1 (row o * stride + s holds ranks o * n * stride + s + j * stride), without building the whole block."""
    r = np.arange(rows, dtype=np.int64)
    return (r // stride * (n * stride) + r % stride)[:, None] + np.arange(cols, dtype=np.int64) * stride


def build_topology(cluster: Cluster) -> Topology:
    """Same as `Topology(cluster)`."""
    return Topology(cluster)
