"""Translation symmetry of a cluster layout: answer an axis query from one representative slice of its groups.

A homogeneous cluster repeats itself: shifting every rank by P GPUs (P = one leaf unit of a fat tree, say)
maps hosts, NVLink domains, PCIe switches, NICs and switch groups onto copies with the same capacities and
latencies. `period(layout)` finds the smallest such P (among the structure's natural sizes: NVLink domain,
leaf unit, pod) for which also every shared edge (PCIe switch, NIC, switch-group uplink) serves GPUs of one
aligned P-window only, and checks both facts on the arrays themselves (None when the cluster is not periodic,
e.g. mixed node types).

For the groups of a row-major mesh axis (outer, n, stride), ranks o*B + s + j*stride (B = n*stride), the
groups then fall into classes that use disjoint edges and are shifted copies of each other:
  - stride % P == 0: class (o, s // P), and class 0 is rows s < P of block 0 (n*P GPUs);
  - else, with C = lcm(B, P) no larger than the world: super-blocks of C ranks, class 0 the first C / B
    blocks.
The loads of class 0's edges are then exactly those of the full query, every other edge carries a shifted
copy of them, so the bottleneck (capacity / load), the latencies and even the first bottleneck edge (class 0
holds the lowest edge indices) are the same: `representative_rows` returns how many leading rows of the
query's group block to route, or None for "all of them".

A world that is not a multiple of C (a layout leaving GPUs idle) ends in a partial super-block: the first r
blocks of one, shifted by a multiple of C (so of P). Its edges are shifted copies of class-0 edges carrying a
subset of the same contributions, summed in the same order; floating-point addition is monotone, so each
load is at most its class-0 twin's and each ratio at least (capacities are equal), its rows' latencies are
their twins', and its rows take the same code paths (every row is a copy of a class-0 row). The bottleneck,
the first edge reaching it and the slowest latency are again class 0's, so C <= world is enough.

A ring over many windows (`ring_periods`): with S = lcm(P, stride) (a period too) dividing B, each group
(s + j*stride, j < n) holds q = S / stride ranks in every S-window of its block, so the groups routed (class 0's)
are themselves made of shifted copies: the hops whose sender lies in window w are the window-0 hops shifted by
w*S (the hop that leaves the last window closes the ring into window 0, a copy of the hop from window 0 into
window 1: every edge serves one window, so both cross at every network level, and the capacities and latencies
are shift-invariant). Each edge class then gets, per addition, integer counts that repeat window by window. A
ring over the first two windows only (2q ranks per group, its last hop closing from window 1 back into window 0)
adds, on the edges of windows 0 and 1, exactly the counts the whole ring adds there, in the same order and with
the same weight (its closing hop enters window 0 where the whole ring's last hop enters it, and leaves window 1
where the hop from window 1 into window 2 leaves it), and nothing elsewhere; so the bottleneck and the first
edge reaching it are the whole ring's (window 0 holds the lowest index of each shifted set), and each group's
hop latencies are its window-0 hops' repeated once per window (`planner.topology.flows.ring`, `periods`).
"""

from __future__ import annotations

import math

import numpy as np

from planner.topology.layout import Layout


def _owners(lay: Layout) -> dict[str, list[np.ndarray]]:
    """Per edge class, arrays mapping each GPU to the edges of that class its traffic can use (-1: none)."""
    nic = lay.nic
    has_nic = nic >= 0
    safe = np.where(has_nic, nic, 0)

    def via_nic(arr: np.ndarray) -> np.ndarray:
        return np.where(has_nic, arr[safe], -1) if len(arr) else np.full(len(nic), -1)

    out = {
        "su": [np.arange(lay.num_gpus)], "pcie": [np.arange(lay.num_gpus)],
        "sw": [lay.sw, via_nic(lay.nic_sw)], "nicpcie": [nic], "nic": [nic],
    }
    for k in range(lay.num_levels - 1):
        out[f"lvl{k}"] = [via_nic(lay.anc[k])]
    return out


def _shift_constant(f: np.ndarray, P: int) -> bool:
    """f[g + P] - f[g] is one positive constant wherever f is defined, and f is defined at g + P exactly
    where it is at g (positive: shifted copies of an edge have higher indices)."""
    a, b = f[:-P], f[P:]
    if not np.array_equal(a < 0, b < 0):
        return False
    d = (b - a)[a >= 0]
    return len(d) == 0 or bool(d[0] > 0 and (d == d[0]).all())


def _same(x: np.ndarray, y: np.ndarray) -> bool:
    if x.shape == y.shape and bool((x == y).all()):  # the common case, without the NaN masks
        return True
    return bool(np.array_equal(x, y, equal_nan=True)) if x.dtype.kind == "f" else bool(np.array_equal(x, y))


def _is_period(lay: Layout, owners: dict[str, list[np.ndarray]], P: int) -> bool:
    """Whether shifting by P GPUs maps the layout onto itself (module docstring). The cheap whole-array checks
    run first, so a candidate that is not a period (the smaller ones usually) is refused early."""
    N = lay.num_gpus
    if P >= N:
        return False
    for arr in (lay.host, lay.unit, lay.dom, lay.sw, lay.nic):
        if not _shift_constant(arr, P):
            return False
    if not np.array_equal(lay.local[:-P], lay.local[P:]):
        return False
    maps = [(cls, f) for cls, fs in owners.items() for f in fs]
    if not all(_shift_constant(f, P) for _, f in maps):
        return False
    window = np.arange(N) // P
    for cls, f in maps:
        ok = f >= 0
        if not ok.any():
            continue
        used, used_window = f[ok], window[ok]
        # Every edge serves one aligned P-window only: each edge's GPUs all have the window one of them left
        # in `seen` (whichever write lands last, a second window on the same edge differs from it somewhere).
        seen = np.empty(int(used.max()) + 1, dtype=np.int64)
        seen[used] = used_window
        if not np.array_equal(seen[used], used_window):
            return False
        # Shifted edges have the same capacity and latency. f[g + P] = f[g] + shift wherever f is defined
        # (checked above), so the pairs to compare are (e, e + shift) for the edges e of GPUs g < N - P.
        lower = f[:-P][ok[:-P]]
        if not len(lower):
            continue
        shift = int(f[P:][ok[:-P]][0] - lower[0])
        edges = np.zeros(len(seen), dtype=bool)
        edges[lower] = True
        e = np.flatnonzero(edges)
        first, last = int(e[0]), int(e[-1])
        span = slice(first, last + 1) if len(e) == last + 1 - first else e  # a run of edges: compare views
        shifted = slice(first + shift, last + 1 + shift) if isinstance(span, slice) else e + shift
        for d in ("up", "down"):
            for table in (lay.cap, lay.lat):
                vals = table[f"{cls}_{d}"]
                if not _same(vals[span], vals[shifted]):
                    return False
    return True


def period(lay: Layout, domain_hosts: int, level_sizes: list[int]) -> int | None:
    """Smallest verified translation period in GPUs (see the module docstring), or None."""
    gpn = lay.gpus_per_node
    candidates = set()
    prefix = 1
    for size in [1, *level_sizes[:-1]]:
        prefix *= size
        candidates.add(math.lcm(max(domain_hosts, 1), prefix) * gpn)
    owners = _owners(lay)
    for P in sorted(candidates):
        if _is_period(lay, owners, P):
            return P
    return None


def ring_periods(P: int | None, n: int, stride: int) -> int | None:
    """How many lcm(P, stride)-windows each group of a ring axis (n ranks `stride` apart) spans, where the ring can
    be routed over its first two windows only (module docstring), or None. Worth it from three windows on."""
    if P is None:
        return None
    window = math.lcm(P, stride)
    periods = n * stride // window
    return periods if (n * stride) % window == 0 and periods > 2 else None


def representative_rows(P: int | None, outer: int, n: int, stride: int) -> int | None:
    """Leading rows of the (outer * stride, n) group block whose routing answers the whole axis query."""
    if P is None:
        return None
    B = n * stride
    W = outer * B
    if stride % P == 0:
        rows = P
    else:
        C = math.lcm(B, P)
        if W < C:
            return None
        rows = C // B * stride
    return rows if rows < outer * stride else None
