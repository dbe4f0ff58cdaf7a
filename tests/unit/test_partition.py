"""The min-max layer partition is exact: it equals brute force over every contiguous split."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from planner.cost.partition import balanced_split, chunk_partition


def _brute_makespan(L: int, p: int, u: float, e0: float, el: float) -> float:
    best = np.inf
    for cuts in itertools.combinations_with_replacement(range(L + 1), p - 1):
        counts = np.diff([0, *cuts, L])
        times = counts * u
        times[0] += e0
        times[-1] += el
        best = min(best, times.max())
    return best


@given(
    L=st.integers(1, 12),
    p=st.integers(1, 5),
    u=st.floats(0.5, 3.0),
    e0=st.floats(0.0, 6.0),
    el=st.floats(0.0, 9.0),
)
def test_balanced_split_matches_brute_force(L: int, p: int, u: float, e0: float, el: float) -> None:
    split = balanced_split(L, np.array([p]), np.array([u]), np.array([e0]), np.array([el]))
    counts = split.counts(0, p)
    assert sum(counts) == L and all(c >= 0 for c in counts)
    times = np.array(counts, dtype=float) * u
    times[0] += e0
    times[-1] += el
    if p == 1:
        times[0] = L * u + e0 + el
    expected = L * u + e0 + el if p == 1 else _brute_makespan(L, p, u, e0, el)
    assert times.max() <= expected * (1 + 1e-9) + 1e-12


def test_chunk_partition_interleaves_ranks() -> None:
    # 2 ranks x 2 chunks: rank 0 holds chunks 0 and 2, rank 1 holds 1 and 3.
    assert chunk_partition([5, 4], 2) == (3, 2, 2, 2)
    assert sum(chunk_partition([7, 6, 6, 5], 3)) == 24


def test_rows_marked_even_get_the_same_layers_on_every_rank_and_the_others_the_min_max_split() -> None:
    pp = np.array([4, 4, 1, 2])
    u, e0, el = np.ones(4), np.full(4, 3.0), np.full(4, 5.0)  # heavy end ranks: the min-max split trims them
    even = np.array([True, False, True, True])
    split = balanced_split(32, pp, u, e0, el, even=even)
    plain = balanced_split(32, pp, u, e0, el)
    assert split.counts(0, 4) == [8, 8, 8, 8] and split.counts(3, 2) == [16, 16]
    assert split.counts(1, 4) == plain.counts(1, 4) != [8, 8, 8, 8]
    assert split.counts(2, 1) == plain.counts(2, 1) == [32]
