"""The best-first first pass (`passes.first_pass`: a batch's rows in increasing bound, in growing chunks) returns
the same top K, rows and tie-breaks included, whatever the chunk size: one row per chunk (the K-th best tightens
after every row) and one chunk per batch (every row of the batch at once) agree with the default."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from planner.api import make_context
from planner.solver import passes, prepared
from planner.solver.exact import exact_search
from planner.solver.space import Pins, SearchLimits
from tests.unit.test_search_oracle import setups


def _search(ctx, objective: str, chunk: int, monkeypatch):
    monkeypatch.setattr(passes, "FIRST_PASS_CHUNK", chunk)
    return exact_search(ctx, Pins(), SearchLimits(max_micro_batch=8), top=4, objective=objective)


@settings(max_examples=25, deadline=None)
@given(setups())
@pytest.mark.parametrize("objective", ["expected", "pessimistic"])
def test_top_k_does_not_depend_on_the_chunks(objective: str, setup) -> None:
    model, cluster, workload, flash = setup
    ctx = make_context(model, cluster, workload, flash_attention=flash)
    with pytest.MonkeyPatch.context() as mp:
        results = [_search(ctx, objective, chunk, mp) for chunk in (passes.FIRST_PASS_CHUNK, 1, 10**9)]
    prepared.clear()
    ref = results[0]
    for other in results[1:]:
        assert np.array_equal(other.step_time_s, ref.step_time_s) and np.array_equal(other.score, ref.score)
        assert all(np.array_equal(other.table[k], ref.table[k]) for k in ref.table)
        assert (other.best_infeasible is None) == (ref.best_infeasible is None)


def test_ties_go_to_the_earlier_arrival_whatever_the_evaluation_order() -> None:
    """`passes.merge_best`: of rows with equal scores the one that arrives first in the visit (smaller key) is kept,
    even when it is evaluated after the other (a later chunk of the same batch)."""
    from planner.layout.table import COLUMNS

    def rows(values):
        return {k: np.array(values, dtype=np.int64) for k in COLUMNS}

    empty = (None, np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64))
    first = passes.merge_best(empty, (rows([1, 2]), np.array([5.0, 7.0]), np.array([5.0, 7.0]), np.array([9, 4])), 2)
    later = passes.merge_best(first, (rows([3]), np.array([5.0]), np.array([5.0]), np.array([2])), 2)
    assert later[0]["dp"].tolist() == [3, 1] and later[3].tolist() == [2, 9]
    again = passes.merge_best(later, (rows([4]), np.array([5.0]), np.array([5.0]), np.array([10])), 2)
    assert again[0]["dp"].tolist() == [3, 1]  # a tie arriving after both does not enter
