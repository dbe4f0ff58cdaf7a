"""The search's second pass (`passes.exact_pass`: exact times in increasing first-pass bound, stopping once the
bound passes the K-th best) keeps exactly the top K that evaluating every row gives, ties included."""

from __future__ import annotations

import numpy as np
import pytest

import hardware_profiles
from planner.api import make_context
from planner.cost.comm import AxisBandwidth
from planner.cost.evaluate import evaluate_fitting, evaluate_table
from planner.layout import Workload
from planner.model import preset
from planner.solver.bounds import optimistic_bw
from planner.solver.passes import exact_pass as _exact_pass
from planner.solver.passes import score_multiplier
from planner.solver.passes import take as _take
from planner.solver.space import Pins, SearchLimits, expand_shapes, shape_candidates, space_of


def _top(score: np.ndarray, fits: np.ndarray, prior: np.ndarray, top: int) -> list[tuple[int, float]]:
    """(index in the merged order, score) of the top K: the previous best first, then the rows that fit."""
    merged = np.concatenate([prior, score[fits]])
    keep = np.lexsort((np.arange(len(merged)), merged))[:top]
    ids = np.concatenate([-1 - np.arange(len(prior)), np.nonzero(fits)[0]]).astype(np.int64)
    return [(int(ids[k]), float(merged[k])) for k in keep]


@pytest.mark.parametrize("top", [1, 3, 10, 20])  # 20: a probe (2 x top) above EXACT_CHUNK_ROWS
@pytest.mark.parametrize("objective", ["expected", "pessimistic"])
@pytest.mark.parametrize("duplicated", [False, True])
def test_second_pass_keeps_the_top_k_of_every_row(top: int, objective: str, duplicated: bool) -> None:
    ctx = make_context(preset("llama3-8b"), hardware_profiles.cluster("dgx-h100", gpus=64),
                       Workload(global_batch=64, seq_len=4096))
    space = space_of(ctx, Pins(), SearchLimits(max_micro_batch=2))
    table = expand_shapes(space, shape_candidates(space))
    fits, _, first = evaluate_fitting(ctx, table, optimistic_bw(ctx.topology, table))
    table = _take(table, np.nonzero(fits)[0])
    if duplicated:  # every row twice: exact ties everywhere
        table = {k: np.repeat(v, 2) for k, v in table.items()}
        first_step = np.repeat(first.step_time_s, 2)
    else:
        first_step = first.step_time_s
    lower = first_step * score_multiplier(ctx, table, objective)
    whole = evaluate_table(ctx, table, AxisBandwidth(ctx.topology))
    score = whole.step_time_s * score_multiplier(ctx, table, objective)
    assert len(lower) > 200 and np.all(lower <= score)
    table["_row"] = np.arange(len(lower))  # an extra column the cost model does not read: which row is which
    for prior in (np.zeros(0), np.sort(score)[[5]], np.sort(score)[:top] + 0.0):
        expected = _top(score, whole.fits, prior, top)
        sub, step, got_score, ok = _exact_pass(ctx, table, AxisBandwidth(ctx.topology), lower, prior, top, objective)
        rows = sub["_row"]
        assert len(rows) < len(lower) and np.all(np.diff(rows) > 0)  # rows left out; the rest in table order
        assert step.tobytes() == whole.step_time_s[rows].tobytes() and ok.tolist() == whole.fits[rows].tolist()
        assert got_score.tobytes() == score[rows].tobytes()
        got = _top(got_score, ok, prior, top)
        assert [s for _, s in got] == [s for _, s in expected]
        assert [i if i < 0 else int(rows[i]) for i, _ in got] == [i for i, _ in expected]
