"""The (shape, micro-batch) bound given a recompute policy (`bounds.micro_batch_bounds(..., rc=)`, which the
search uses to bound rows before evaluating them) is below the step time of every layout with that policy,
dominated options included, and never below the policy-free bound."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings

from planner.api import make_context
from planner.cost.comm import AxisBandwidth
from planner.layout.table import RecomputeCode
from planner.solver.bounds import dp_bound_s, micro_batch_bounds
from planner.solver.exact import brute_force
from planner.solver.space import Pins, SearchLimits
from tests.unit.test_search_bounds import setups


@settings(max_examples=30, deadline=None)
@given(setups())
def test_recompute_bound_is_below_every_layout_with_that_policy(setup) -> None:
    model, cluster, workload, flash, pin_values = setup
    ctx = make_context(model, cluster, workload, flash_attention=flash)
    limits, pins = SearchLimits(max_micro_batch=8), Pins(dict(pin_values))
    table, res = brute_force(ctx, pins, limits)  # every option, selective recomputation included
    if not len(table["dp"]):
        return
    cols = [table[k] for k in ("tp", "cp", "pp", "dp", "ep")]
    bw = AxisBandwidth(ctx.topology)
    plain = micro_batch_bounds(ctx, bw, pins, *cols, table["mb"], limits)
    given_rc = micro_batch_bounds(ctx, bw, pins, *cols, table["mb"], limits, rc=table["rc"])
    assert np.all(given_rc <= res.step_time_s), "a recompute-policy bound exceeds a layout's step time"
    assert np.all(given_rc + dp_bound_s(ctx, table) <= res.step_time_s), "a row's own bound exceeds its step time"
    assert np.all((given_rc >= plain) | ~np.isfinite(plain))
    none = table["rc"] == RecomputeCode.NONE
    np.testing.assert_array_equal(given_rc[none], plain[none])  # no recomputation: the same numbers


def test_full_recomputation_raises_the_bound() -> None:
    """Full recomputation redoes every layer's forward: its bound is well above the policy-free one."""
    from tests.unit.test_search_prepared import _ctx

    ctx = _ctx()
    table, res = brute_force(ctx, Pins({"recompute": "full"}), SearchLimits(max_micro_batch=4))
    cols = [table[k] for k in ("tp", "cp", "pp", "dp", "ep")]
    bw = AxisBandwidth(ctx.topology)
    plain = micro_batch_bounds(ctx, bw, Pins(), *cols, table["mb"])
    full = micro_batch_bounds(ctx, bw, Pins(), *cols, table["mb"], rc=table["rc"])
    assert np.all(full > plain * 1.1) and np.all(full <= res.step_time_s)


def test_op_recomputation_bound_lies_between_none_and_full() -> None:
    """Per-op recomputation repeats some matmuls and the element-wise forward: its bound rises above the
    policy-free one, stays below every "op" layout's step time and below the full-recomputation bound."""
    from tests.unit.test_search_prepared import _ctx

    ctx = _ctx()
    table, res = brute_force(ctx, Pins({"recompute": "op"}), SearchLimits(max_micro_batch=4))
    assert len(table["rc"]) and np.all(table["rc"] == RecomputeCode.OP)
    cols = [table[k] for k in ("tp", "cp", "pp", "dp", "ep")]
    bw = AxisBandwidth(ctx.topology)
    plain = micro_batch_bounds(ctx, bw, Pins(), *cols, table["mb"])
    op = micro_batch_bounds(ctx, bw, Pins(), *cols, table["mb"], rc=table["rc"])
    full = micro_batch_bounds(ctx, bw, Pins(), *cols, table["mb"], rc=np.full_like(table["rc"], RecomputeCode.FULL))
    assert np.all(op > plain) and np.all(op < full) and np.all(op <= res.step_time_s)
