"""The order in which the branch and bound visits shapes, with (shape, micro-batch) bounds computed lazily.

The search visits shapes in increasing bound (the least of their (shape, micro-batch) bounds, ties by shape
index) and stops at the first one that cannot beat the K-th best. On large clusters it visits well under 1 %
of the shapes, yet computing the pair bounds of every shape (`bounds.micro_batch_bounds`, ~10^5 pairs) was a
third of a warm search. A shape's bound is never below its FLOP bound (exact.py takes the larger), so a shape
whose FLOP bound is at least T has a bound of at least T: once every shape with a FLOP bound below T has its
pair bounds, the shapes among them whose bound is below T are, in order, exactly the start of the full visit
order. `VisitOrder` widens T (in increasing FLOP bound, in growing chunks) only as far as the search asks:
up to the next batch, or up to the K-th best. The pair bounds it computes are the same numbers, row by row, as
one call over every pair gives, so the search visits the same shapes in the same batches.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

FIRST_CHUNK = 256  # shapes whose pair bounds the first widening computes (at least; a sixteenth of all)


class VisitOrder:
    """Shapes in visit order and their bounds, computed as far as needed (module docstring).

    `pair_bounds(pairs)` returns, for the pair indices `pairs`, (score bound, step-time bound, score
    multiplier) arrays; `shape_flop_lb` is each shape's FLOP bound on the score, `pair_shape` each pair's shape
    (pairs grouped by shape, in shape order)."""

    def __init__(self, shape_flop_lb: np.ndarray, pair_shape: np.ndarray,
                 pair_bounds: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        n, n_pair = len(shape_flop_lb), len(pair_shape)
        self.flop_lb, self.pair_bounds = shape_flop_lb, pair_bounds
        self.first_pair = np.searchsorted(pair_shape, np.arange(n))
        self.n_pairs = np.bincount(pair_shape, minlength=n)
        self.pair_lb, self.pair_step_lb, self.pair_mult = np.full(n_pair, np.inf), np.full(n_pair, np.inf), np.ones(n_pair)
        self.shape_lb = np.full(n, np.inf)  # a shape with no valid micro-batch has no layout at all
        self.by_flops = np.argsort(shape_flop_lb, kind="stable")
        self.by_flops = self.by_flops[(self.n_pairs[self.by_flops] > 0) & np.isfinite(shape_flop_lb[self.by_flops])]
        self.with_layout = len(self.by_flops)  # shapes with a finite bound: the others are never visited
        self.known = 0  # shapes by_flops[:known] have their pair bounds
        self.chunk = max(FIRST_CHUNK, n // 16)

    def pairs_of(self, shapes: np.ndarray) -> np.ndarray:
        """Indices of every pair of `shapes`, shape by shape."""
        counts = self.n_pairs[shapes]
        return np.repeat(self.first_pair[shapes] - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())

    def _frontier(self) -> float:
        """Every shape without pair bounds yet has a bound of at least this."""
        return float(self.flop_lb[self.by_flops[self.known]]) if self.known < self.with_layout else np.inf

    def _widen(self) -> None:
        new = self.by_flops[self.known : self.known + self.chunk]
        pairs = self.pairs_of(new)
        lb, step, mult = self.pair_bounds(pairs)
        self.pair_lb[pairs], self.pair_step_lb[pairs], self.pair_mult[pairs] = lb, step, mult
        np.minimum.at(self.shape_lb, np.repeat(new, self.n_pairs[new]), lb)
        self.known += len(new)
        self.chunk *= 2

    def order(self, need: int, kth: float) -> np.ndarray:
        """The start of the visit order: at least its first `need` shapes, or every shape whose bound is below
        `kth`, or all shapes with a layout (whichever comes first)."""
        while True:
            frontier = self._frontier()
            seen = np.sort(self.by_flops[: self.known])
            seen = seen[self.shape_lb[seen] < frontier]
            if len(seen) >= need or frontier >= kth or self.known >= self.with_layout:
                return seen[np.argsort(self.shape_lb[seen], kind="stable")]
            self._widen()
