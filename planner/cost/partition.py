"""Layer-to-stage partition: the min-max split of L layers over p pipeline ranks, vectorised over layouts.

The first pipeline rank also runs the embedding and the last one the final norm, LM head and loss, so an even
split makes the end ranks the bottleneck (Narayanan et al. 2021 Sec. 3.2 and Megatron's uneven
`--decoder-first/last-pipeline-num-layers`). With per-layer time u and extra times e0 (first) and el (last),
rank j holds n_j = floor((T - e_j) / u) layers at a makespan T; the optimal T* is the smallest T of the form
n*u + e_j with sum_j n_j(T) >= L. Since sum_j n_j(T_lb) >= L - p at the lower bound
T_lb = (L*u + e0 + el) / p, T* lies in [T_lb, T_lb + u], so two candidates per family suffice (exact).

When capacity exceeds L, surplus layers are taken from the middle ranks evenly (whole rounds, then one more
from ranks 1, 2, ..., which hold the most in-flight micro-batches, so this also lowers peak memory), then
from rank 0, then the last rank.
Layer types (dense vs MoE) enter through their mean time: exact for uniform layers. For models with several
layer types and for heterogeneous clusters, the plan's partition is refined per type and per rank by the
CP-SAT model in `planner.solver.partition_cpsat` (the search still ranks layouts with this mean-layer split).

Rows marked `even` take the even split L/p on every rank instead: an every-k recompute policy with pipelining
recomputes 1/k of every chunk's layers exactly when every chunk holds the same multiple of k layers (the layout
rule `partial_recompute_even_chunks`; Megatron's `--recompute-method block` recomputes the same number of layers in
every chunk, megatron/core/recompute.py at core_v0.19.0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class StageSplit:
    """Layers per pipeline rank, in compact form (all arrays are per layout row)."""

    n_first: np.ndarray  # layers on rank 0
    n_mid: np.ndarray  # layers on an untrimmed middle rank
    n_last: np.ndarray  # layers on rank p-1 (== n_first when p == 1)
    mid_trimmed: np.ndarray  # how many middle ranks (from rank 1 on) hold n_mid - 1 layers

    def counts(self, row: int, pp: int) -> list[int]:
        """Explicit layers per pipeline rank for one row."""
        if pp == 1:
            return [int(self.n_first[row])]
        mids = [int(self.n_mid[row]) - (1 if j < int(self.mid_trimmed[row]) else 0) for j in range(pp - 2)]
        return [int(self.n_first[row]), *mids, int(self.n_last[row])]


def _fit(T: np.ndarray, e: np.ndarray, u: np.ndarray) -> np.ndarray:
    return np.maximum(np.floor((T - e) / u + 1e-9), 0.0)


def balanced_split(num_layers: int, pp: np.ndarray, u: np.ndarray, e_first: np.ndarray, e_last: np.ndarray,
                   even: np.ndarray | None = None) -> StageSplit:
    """Exact min-max contiguous split of `num_layers` identical layers with end-rank extras (see module doc);
    rows where `even` is set get num_layers / pp layers on every rank (pp divides num_layers there)."""
    pp, u, e_first, e_last = (np.asarray(x) for x in np.broadcast_arrays(pp, u, e_first, e_last))
    if even is not None and np.any(even):
        out = balanced_split(num_layers, pp, u, e_first, e_last)
        even = np.broadcast_to(np.asarray(even, dtype=bool), pp.shape) & (pp > 1)
        share = num_layers // np.maximum(pp, 1)
        for arr in (out.n_first, out.n_mid, out.n_last):
            arr[even] = share[even]
        out.mid_trimmed[even] = 0
        return out
    piped = np.nonzero(pp > 1)[0]
    if len(piped) < len(pp):  # one rank holds every layer: nothing to split (the search's pp = 1 rows)
        whole = np.full(len(pp), num_layers, dtype=np.int64)
        out = StageSplit(whole, np.zeros(len(pp), dtype=np.int64), whole.copy(), np.zeros(len(pp), dtype=np.int64))
        if len(piped):
            part = _split(num_layers, pp[piped], u[piped], e_first[piped], e_last[piped])
            for mine, theirs in zip((out.n_first, out.n_mid, out.n_last, out.mid_trimmed),
                                    (part.n_first, part.n_mid, part.n_last, part.mid_trimmed)):
                mine[piped] = theirs
        return out
    return _split(num_layers, pp, u, e_first, e_last)


def _split(num_layers: int, pp: np.ndarray, u: np.ndarray, e_first: np.ndarray, e_last: np.ndarray) -> StageSplit:
    L = float(num_layers)
    p = pp.astype(float)
    u = np.maximum(u.astype(float), 1e-30)
    single = pp == 1
    # p == 2: no middle ranks; p == 1 handled separately.
    n_mid_ranks = np.maximum(p - 2, 0)
    # The end ranks always carry their extras, so T >= max(e0, el) as well as the average load.
    T_lb = np.maximum((L * u + e_first + e_last) / np.maximum(p, 1), np.maximum(e_first, e_last))
    best = np.full_like(u, np.inf)
    for e in (e_first, e_last, np.zeros_like(u)):
        n0 = np.ceil((T_lb - e) / u - 1e-9)
        for k in (0, 1):
            T = (n0 + k) * u + e
            cap = _fit(T, e_first, u) + _fit(T, e_last, u) + n_mid_ranks * _fit(T, np.zeros_like(u), u)
            ok = (cap >= L) & (T_lb - 1e-12 * np.abs(T_lb) <= T)
            best = np.where(ok & (best > T), T, best)
    nf, nl = _fit(best, e_first, u), _fit(best, e_last, u)
    nm = np.where(n_mid_ranks > 0, _fit(best, np.zeros_like(u), u), 0.0)
    surplus = nf + nl + n_mid_ranks * nm - L
    # Trim middle ranks evenly (whole rounds, then one more layer from ranks 1, 2, ...), then rank 0, then last.
    k = np.maximum(n_mid_ranks, 1)
    rounds = np.where(n_mid_ranks > 0, np.minimum(surplus // k, nm), 0.0)
    nm = nm - rounds
    surplus = surplus - rounds * n_mid_ranks
    take_mid = np.where((n_mid_ranks > 0) & (nm > 0), np.minimum(surplus, n_mid_ranks), 0.0)
    surplus -= take_mid
    take_first = np.minimum(surplus, nf)
    surplus -= take_first
    nf -= take_first
    nl -= surplus
    nf = np.where(single, L, nf)
    nl = np.where(single, L, nl)
    nm = np.where(single, 0.0, nm)
    take_mid = np.where(single, 0.0, take_mid)
    return StageSplit(nf.astype(np.int64), nm.astype(np.int64), nl.astype(np.int64), take_mid.astype(np.int64))


def chunk_partition(rank_layers: list[int], virtual_stages: int) -> tuple[int, ...]:
    """Layers per chunk (chunk c on rank c % pp) from layers per rank, split as evenly as possible per rank."""
    pp = len(rank_layers)
    per_rank = []
    for n in rank_layers:
        base, extra = divmod(n, virtual_stages)
        per_rank.append([base + (1 if j < extra else 0) for j in range(virtual_stages)])
    return tuple(per_rank[c % pp][c // pp] for c in range(pp * virtual_stages))
