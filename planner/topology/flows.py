"""Traffic of collectives on the layout's edges, counted with numpy (no per-GPU Python loops).

Model (units: each GPU of a ring sends at the ring's bus bandwidth B; a load of 1 on an edge means B flows
over it, so the bus bandwidth is min over used edges of capacity / load):

* Ring (all-reduce, all-gather, reduce-scatter): the group's GPUs in rank order (node-major). A hop between
  GPUs of one unit (scale-up domain, or host without NVLink) carries load 1 over that unit's fabric. A hop
  between units is split over C channels, C = min over the group's units of the number of distinct NICs
  nearest the group's GPUs in that unit (NCCL runs one channel per NIC rail it can use: on a DGX, g GPUs of a
  group on a host cross hosts through min(g, nics) NICs). Channel c leaves through the unit's c-th NIC and
  enters the next unit through its c-th NIC, load 1/C, via PCIe and the switch tree (up to the lowest common
  switch group).
* p2p: each consecutive pair of the group in the given order (a pipeline chain) sends at the same time,
  load 1 each, between the GPUs' own NICs when they are in different units.
* All-to-all: each GPU sends 1/(n-1) to every other member, intra-unit over the unit fabric, else from its
  own NIC to the peer's NIC; loads are counted per subtree (k members inside, n-k outside), not per pair.

Hop latency: a hop costs the largest per-step latency of the fabrics on its path (NCCL's per-step hwLat by
transport). Ring latency per step is the mean over the ring's hops (a chunk visits every hop).
"""

from __future__ import annotations

import numpy as np

from planner.topology.layout import Layout


def _skew(idx: np.ndarray) -> np.ndarray:
    """Edge index i -> i + i // 1024: one pad slot per 1024 entries.

    Mesh axes index edges with power-of-two strides, which make `np.bincount` write to addresses that
    share cache sets (10x slower at 65,536 GPUs); the padding breaks the stride. Inverse: s - s // 1025.
    """
    return idx + (idx >> 10)


class Loads:
    """Load (in units of the bus bandwidth) on the edges of every class, stored at skewed indices.

    Arrays cover only the index range touched so far (they grow on demand): a query on a few hundred GPUs
    of a 65,536-GPU cluster costs what its own edges cost, not the whole cluster's.
    """

    def __init__(self, lay: Layout) -> None:
        self.lay = lay
        self.arr = {k: np.zeros(0) for k in lay.cap}

    def add(self, cls: str, idx: np.ndarray, w: np.ndarray | float) -> None:
        if len(idx) == 0:
            return
        if np.isscalar(w):
            self.add_counts(cls, self.counts(idx), w)
        else:
            self._add_to(cls, np.bincount(_skew(idx), weights=w))

    @staticmethod
    def counts(idx: np.ndarray) -> np.ndarray:
        """How often each edge occurs in `idx`, at skewed indices: for `add_counts`, where several classes take
        loads over the same edges (a ring's hops leave and enter through the same NICs)."""
        return np.bincount(_skew(idx)) if len(idx) else np.zeros(0, dtype=np.int64)

    def add_counts(self, cls: str, counts: np.ndarray, w: float) -> None:
        """Add `w` per occurrence (`counts` from `Loads.counts`)."""
        self._add_to(cls, counts if w == 1.0 else counts * w)  # integer counts add exactly: x * 1.0 is x

    def _add_to(self, cls: str, skewed: np.ndarray) -> None:
        """Add loads given at skewed indices 0..len-1 (the slots above get nothing: the same as adding 0.0)."""
        top = len(skewed)
        if top == 0:
            return
        arr = self.arr[cls]
        if top > len(arr):
            arr = self.arr[cls] = np.concatenate([arr, np.zeros(top - len(arr))])
        arr[:top] += skewed

    def load(self, cls: str) -> np.ndarray:
        """Loads of class `cls` at plain edge indices."""
        n = len(self.lay.cap[cls])
        arr = self.arr[cls]
        full = np.concatenate([arr, np.zeros(max(0, _skew(np.int64(n)) + 1 - len(arr)))])
        return full[_skew(np.arange(n))]

    def min_ratio(self, used: Loads | None = None) -> tuple[float, str, int]:
        """(min capacity/load over loaded edges [of `used`], edge class, index); classes in path order.

        Computed in place over the skewed arrays (capacity / load where loaded, +inf elsewhere) rather than on
        the gathered loaded edges: the same quotients in the same order, so the same minimum and the same
        first index of it (an unloaded slot's +inf never beats a loaded edge, nor `best`'s initial +inf)."""
        best = (np.inf, "", -1)
        for cls, load in self.arr.items():
            mark = load if used is None else used.arr[cls]
            n = min(len(mark), len(load))
            if n == 0:
                continue
            loaded = mark[:n] != 0
            if not loaded.any():
                continue
            ratio = np.divide(_skewed_capacity(self.lay, cls)[:n], load[:n], out=np.full(n, np.inf), where=loaded)
            i = int(np.argmin(ratio))
            if ratio[i] < best[0]:
                best = (float(ratio[i]), cls, i - i // 1025)
        return best


def _skewed_capacity(lay: Layout, cls: str) -> np.ndarray:
    """The capacities of class `cls` at skewed indices (+inf in the pad slots), built once per layout."""
    cache = lay.__dict__.setdefault("_skewed_capacity", {})
    cap = lay.cap[cls]
    hit = cache.get(cls)
    if hit is None or hit[0] is not cap:  # keyed by the capacity array itself
        out = np.full(int(_skew(np.int64(len(cap)))) + 1 if len(cap) else 0, np.inf)
        out[_skew(np.arange(len(cap)))] = cap
        hit = cache[cls] = (cap, out)
    return hit[1]


def _pick(w, mask):
    """`w` restricted to `mask` (a scalar weight stays a scalar)."""
    return w if np.isscalar(w) else w[mask]


def _add_intra(loads: Loads, a: np.ndarray, b: np.ndarray, w) -> None:
    """Hops a -> b inside one unit: over the scale-up fabric, or the host's PCIe tree."""
    lay = loads.lay
    su = lay.dom[a] >= 0
    loads.add("su_up", a[su], _pick(w, su))
    loads.add("su_down", b[su], _pick(w, su))
    a, b, w = a[~su], b[~su], _pick(w, ~su)
    loads.add("pcie_up", a, w)
    loads.add("pcie_down", b, w)
    cross = lay.sw[a] != lay.sw[b]
    loads.add("sw_up", lay.sw[a][cross], _pick(w, cross))
    loads.add("sw_down", lay.sw[b][cross], _pick(w, cross))


def _add_net(loads: Loads, sg: np.ndarray, x: np.ndarray, y: np.ndarray, dg: np.ndarray, w, *,
             mirrored: bool = False) -> None:
    """Flows GPU sg -> NIC x -> switch tree -> NIC y -> GPU dg.

    `mirrored`: the (dg, y) pairs are the (sg, x) pairs in another order (a ring's hops: every member is entered
    once and left once). With one weight for all, the receiving ends then load the same edges as many times as
    the sending ends, and their counts are taken once; each class gets the same additions in the same order."""
    lay = loads.lay
    if len(sg) and ((x < 0).any() or (y < 0).any()):
        raise ValueError("a group spans hosts without NICs; the cluster profile needs nics on every host")
    s1, t1 = lay.sw[sg], lay.nic_sw[x]
    m = s1 != t1
    up_sw, down_sw = s1[m], t1[m & (t1 >= 0)]
    shared = mirrored and np.isscalar(w)
    if shared:
        gpus, nics, ups, downs = (loads.counts(a) for a in (sg, x, up_sw, down_sw))
        loads.add_counts("pcie_up", gpus, w)
        loads.add_counts("sw_up", ups, w)
        loads.add_counts("sw_down", downs, w)
        loads.add_counts("nicpcie_down", nics, w)
        loads.add_counts("nic_up", nics, w)
    else:
        loads.add("pcie_up", sg, w)
        loads.add("sw_up", up_sw, _pick(w, m))
        loads.add("sw_down", down_sw, _pick(w, m & (t1 >= 0)))
        loads.add("nicpcie_down", x, w)
        loads.add("nic_up", x, w)
    for k in range(lay.num_levels - 1):
        ax, ay = lay.anc[k][x], lay.anc[k][y]
        c = ax != ay
        loads.add(f"lvl{k}_up", ax[c], _pick(w, c))
        loads.add(f"lvl{k}_down", ay[c], _pick(w, c))
    if shared:  # the same multisets as the sending side's (docstring)
        loads.add_counts("nic_down", nics, w)
        loads.add_counts("nicpcie_up", nics, w)
        loads.add_counts("sw_up", downs, w)
        loads.add_counts("sw_down", ups, w)
        loads.add_counts("pcie_down", gpus, w)
        return
    loads.add("nic_down", y, w)
    loads.add("nicpcie_up", y, w)
    t2, s2 = lay.nic_sw[y], lay.sw[dg]
    m = t2 != s2
    loads.add("sw_up", t2[m & (t2 >= 0)], _pick(w, m & (t2 >= 0)))
    loads.add("sw_down", s2[m], _pick(w, m))
    loads.add("pcie_down", dg, w)


def _intra_latency(lay: Layout, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    su = lay.dom[a] >= 0
    return np.where(su, lay.lat["su_up"][a], np.maximum(lay.lat["pcie_up"][a], lay.lat["pcie_down"][b]))


def _net_latency(lay: Layout, sg: np.ndarray, x: np.ndarray, y: np.ndarray, dg: np.ndarray) -> np.ndarray:
    lat = np.maximum.reduce([lay.lat["nic_up"][x], lay.lat["nic_down"][y], lay.lat["pcie_up"][sg], lay.lat["pcie_down"][dg]])
    for k in range(lay.num_levels - 1):
        ax, ay = lay.anc[k][x], lay.anc[k][y]
        lat = np.where(ax != ay, np.maximum(lat, lay.lat[f"lvl{k}_up"][ax]), lat)
    return lat


def ring(loads: Loads, G: np.ndarray, periods: int = 1) -> np.ndarray:
    """Add the ring traffic of groups G (m, n) (rows sorted by rank); return each row's mean hop latency (s).

    `periods` > 1: each row is the first two of `periods` windows of a ring whose windows are shifted copies
    (`planner.topology.symmetry.ring_periods`). The two windows are routed as a ring of their own, which loads
    their edges as the whole ring does; the latency is the whole ring's: the hop latencies of window 0 (the
    senders in its n / 2 columns) repeated `periods` times, summed by the same reductions in the same order."""
    lay = loads.lay
    m, n = G.shape
    sent = n // 2 if periods > 1 else n  # columns whose hops repeat (all of them for a whole ring)
    members = sent * periods if periods > 1 else n  # ranks per row of the whole ring

    def repeated(rows: np.ndarray, cols: np.ndarray, lat: np.ndarray) -> np.ndarray:
        """Each row's sum of hop latencies (in column order within a row), over the whole ring."""
        if periods == 1:
            return np.bincount(rows, weights=lat, minlength=m)
        first = cols < sent
        return np.bincount(np.tile(rows[first], periods), weights=np.tile(lat[first], periods), minlength=m)

    U = lay.unit[G]
    nxt = np.roll(G, -1, axis=1)
    same = np.roll(U, -1, axis=1) == U
    a, b = G[same], nxt[same]
    _add_intra(loads, a, b, 1.0)
    lat_sum = np.zeros(m)
    rows_same, cols_same = np.nonzero(same)
    lat_sum += repeated(rows_same, cols_same, _intra_latency(lay, a, b))
    if same.all():
        return lat_sum / members
    run_start = np.ones((m, n), dtype=bool)
    run_start[:, 1:] = U[:, 1:] != U[:, :-1]
    nics = lay.nic[G]
    if not same.any():  # every GPU in its own unit (e.g. data parallel across hosts): one channel per hop
        g, x = G.ravel(), nics.ravel()
        gd, xd = nxt.ravel(), np.roll(nics, -1, axis=1).ravel()
        _add_net(loads, g, x, xd, gd, 1.0, mirrored=True)
        hop = _net_latency(lay, g, x, xd, gd).reshape(m, n)
        if periods > 1:  # (m, members), C order: the same pairwise row sums as the whole ring's
            hop = np.tile(hop[:, :sent], (1, periods))
        return (lat_sum + hop.sum(axis=1)) / members
    new = run_start.copy()
    new[:, 1:] |= nics[:, 1:] != nics[:, :-1]
    cs = np.cumsum(new, axis=1)
    start_cs = np.maximum.accumulate(np.where(run_start, cs, 0), axis=1)
    k = cs - start_cs  # index of the element's NIC among its run's distinct NICs (0-based)
    run_id = np.cumsum(run_start, axis=1) - 1
    run_end = np.ones((m, n), dtype=bool)
    run_end[:, :-1] = run_start[:, 1:]
    C = np.where(run_end, k + 1, np.iinfo(np.int64).max).min(axis=1)
    runs = run_id[:, -1] + 1
    sel = new & (k < C[:, None]) & (runs > 1)[:, None]
    rows, cols = np.nonzero(sel)  # ordered by (row, run, channel)
    g, x = G[rows, cols], nics[rows, cols]
    cr, rr = C[rows], runs[rows]
    pos = run_id[rows, cols] * cr + k[rows, cols]
    row_start = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=m))[:-1]])[rows]
    dst = row_start + (pos + cr) % (rr * cr)
    w = 1.0 / cr[0] if (cr == cr[0]).all() else 1.0 / cr
    _add_net(loads, g, x, x[dst], g[dst], w, mirrored=True)
    c0 = k[rows, cols] == 0
    lat_sum += repeated(rows[c0], cols[c0], _net_latency(lay, g[c0], x[c0], x[dst][c0], g[dst][c0]))
    return lat_sum / members


def chain(loads: Loads, G: np.ndarray) -> np.ndarray:
    """Add p2p traffic g0->g1->...->g_{n-1} of each row (given order); return each row's slowest hop latency."""
    lay = loads.lay
    m, n = G.shape
    a, b = G[:, :-1].ravel(), G[:, 1:].ravel()
    rows = np.repeat(np.arange(m), n - 1)
    same = lay.unit[a] == lay.unit[b]
    _add_intra(loads, a[same], b[same], 1.0)
    lat = np.zeros(len(a))
    lat[same] = _intra_latency(lay, a[same], b[same])
    na, nb = a[~same], b[~same]
    _add_net(loads, na, lay.nic[na], lay.nic[nb], nb, 1.0)
    lat[~same] = _net_latency(lay, na, lay.nic[na], lay.nic[nb], nb)
    out = np.zeros(m)
    np.maximum.at(out, rows, lat)
    return out


def _counts(rows: np.ndarray, key: np.ndarray, *more: np.ndarray) -> np.ndarray:
    """For each member, how many members of its row share its key (and the extra keys)."""
    combined = rows.astype(np.int64)
    for k in (key, *more):
        k = k.astype(np.int64)
        combined = combined * (int(k.max()) + 2) + (k + 1)
    _, inv, cnt = np.unique(combined, return_inverse=True, return_counts=True)
    return cnt[inv].astype(float)


def all_to_all(loads: Loads, G: np.ndarray) -> np.ndarray:
    """Add all-to-all traffic of groups G (m, n); return each row's step latency (s)."""
    lay = loads.lay
    m, n = G.shape
    g = G.ravel()
    rows = np.repeat(np.arange(m), n)
    w = 1.0 / (n - 1)
    ku = _counts(rows, lay.unit[g])
    kh = _counts(rows, lay.host[g])
    ks = _counts(rows, lay.sw[g])
    su = lay.dom[g] >= 0
    loads.add("su_up", g[su], (ku[su] - 1) * w)
    loads.add("su_down", g[su], (ku[su] - 1) * w)
    loads.add("pcie_up", g[~su], (kh[~su] - 1) * w)
    loads.add("pcie_down", g[~su], (kh[~su] - 1) * w)
    loads.add("sw_up", lay.sw[g][~su], (kh[~su] - ks[~su]) * w)
    loads.add("sw_down", lay.sw[g][~su], (kh[~su] - ks[~su]) * w)
    lat = np.where(su, lay.lat["su_up"][g], lay.lat["pcie_up"][g])
    remote = n - ku
    r = remote > 0
    if r.any():
        gr, R, x = g[r], remote[r] * w, lay.nic[g[r]]
        if (x < 0).any():
            raise ValueError("a group spans hosts without NICs; the cluster profile needs nics on every host")
        for d in ("up", "down"):
            loads.add(f"pcie_{d}", gr, R)
            loads.add(f"nicpcie_{d}", x, R)
            loads.add(f"nic_{d}", x, R)
        s, t = lay.sw[gr], lay.nic_sw[x]
        m2 = s != t
        for d in ("up", "down"):
            loads.add(f"sw_{d}", s[m2], R[m2])
            loads.add(f"sw_{d}", t[m2 & (t >= 0)], R[m2 & (t >= 0)])
        lat[r] = np.maximum(lat[r], np.maximum(lay.lat["nic_up"][x], lay.lat["pcie_up"][gr]))
        rr, ur = rows[r], lay.unit[gr]
        for k in range(lay.num_levels - 1):
            a = lay.anc[k][x]
            outside = remote[r] - (_counts(rr, a) - _counts(rr, a, ur))
            c = outside > 0
            loads.add(f"lvl{k}_up", a[c], outside[c] * w)
            loads.add(f"lvl{k}_down", a[c], outside[c] * w)
            lat[r] = np.where(c, np.maximum(lat[r], lay.lat[f"lvl{k}_up"][a]), lat[r])
    out = np.zeros(m)
    np.maximum.at(out, rows, lat)
    return out
