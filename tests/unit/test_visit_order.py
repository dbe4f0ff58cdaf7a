"""VisitOrder: the lazily computed visit order is, as far as the search asks, the start of the order that
bounding every pair first gives (planner.solver.visit), and each pair is bounded at most once."""

from __future__ import annotations

import numpy as np
import pytest

from planner.solver.visit import VisitOrder


def _space(seed: int, n_shapes: int):
    rng = np.random.default_rng(seed)
    flop_lb = rng.choice([1.0, 2.0, 3.0, 5.0, 8.0], n_shapes) * rng.uniform(1, 1.5, n_shapes).round(1)
    counts = rng.integers(0, 4, n_shapes)  # some shapes have no valid micro-batch
    pair_shape = np.repeat(np.arange(n_shapes), counts)
    # Pair bounds at or above their shape's FLOP bound, with ties (rounded) to check the tie order.
    pair_lb = np.maximum(flop_lb[pair_shape] + rng.exponential(3.0, len(pair_shape)).round(0), flop_lb[pair_shape])
    return flop_lb, pair_shape, pair_lb


@pytest.mark.parametrize("seed", range(6))
def test_lazy_order_is_the_start_of_the_full_order(seed: int) -> None:
    flop_lb, pair_shape, pair_lb = _space(seed, 3000)
    full = np.full(len(flop_lb), np.inf)
    np.minimum.at(full, pair_shape, pair_lb)
    expected = np.argsort(full, kind="stable")
    expected = expected[np.isfinite(full[expected])]
    asked: list[np.ndarray] = []

    def bounds(pairs: np.ndarray):
        asked.append(pairs)
        return pair_lb[pairs], pair_lb[pairs] / 2, np.ones(len(pairs))

    visit = VisitOrder(flop_lb, pair_shape, bounds)
    assert visit.with_layout == len(expected)
    for need in (1, 4, 40, 400):
        got = visit.order(need, np.inf)
        assert len(got) >= min(need, len(expected))
        assert np.array_equal(got, expected[: len(got)])
    kth = float(full[expected[1000]])
    got = visit.order(len(expected), kth)  # stops once every shape below kth is known
    below = expected[full[expected] < kth]
    assert np.array_equal(got[: len(below)], below)
    every = np.concatenate(asked)
    assert len(every) == len(np.unique(every))  # each pair bounded at most once
    assert len(every) < len(pair_shape)  # and not all of them: the shapes far above kth were never bounded
    assert np.array_equal(visit.pair_step_lb[every], pair_lb[every] / 2)
    pairs = visit.pairs_of(got[:5])
    assert np.array_equal(pair_shape[pairs], np.repeat(got[:5], visit.n_pairs[got[:5]]))
