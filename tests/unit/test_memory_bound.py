"""The search's per-row memory bound (`solver.memory_bound.row_memory_bound_bytes`, which drops rows before their
layer times are computed) never exceeds a row's exact peak memory, over every layout of brute-force tables
(dominated options, every recompute policy and schedule included); it equals the peak where the split cannot
matter (one pipeline rank, dense model), and it rejects most of the rows that do not fit a large model."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings

import hardware_profiles
from planner.api import make_context
from planner.layout import Workload
from planner.model import preset
from planner.solver.bounds import state_memory_bound_bytes
from planner.solver.exact import brute_force, exact_search
from planner.solver.memory_bound import cannot_fit, row_memory_bound_bytes
from planner.solver.space import Pins, SearchLimits
from tests.unit.test_search_bounds import setups

SLACK = 1 + 1e-12  # float rounding between two sums of the same terms


@settings(max_examples=40, deadline=None)
@given(setups())
def test_memory_bound_is_below_every_layouts_peak(setup) -> None:
    model, cluster, workload, flash, pin_values = setup
    ctx = make_context(model, cluster, workload, flash_attention=flash)
    table, res = brute_force(ctx, Pins(dict(pin_values)), SearchLimits(max_micro_batch=8))
    if not len(table["dp"]):
        return
    bound = row_memory_bound_bytes(ctx, table)
    assert np.all(bound <= res.peak_memory_bytes * SLACK), "the row memory bound exceeds a layout's peak"
    single = table["pp"] == 1
    if model.moe is None and single.any():  # one rank holds every layer: nothing is left to the split
        np.testing.assert_allclose(bound[single], res.peak_memory_bytes[single], rtol=1e-12)
    assert not np.any(cannot_fit(ctx, table) & res.fits), "a row that fits is called unable to fit"


def _large_model_on_small_cluster():
    """Llama 3 70B on 16 H100 at 8k tokens: most layouts are out of memory, by states or by activations."""
    ctx = make_context(preset("llama3-70b"), hardware_profiles.cluster("dgx-h100", gpus=16),
                       Workload(global_batch=32, seq_len=8192))
    return ctx, *brute_force(ctx, Pins(), SearchLimits(max_micro_batch=4))


def test_memory_bound_rejects_most_rows_that_do_not_fit() -> None:
    """On a large model the bound is below every peak and still rejects well over half of the rows whose model
    states alone fit but which do not fit: the ones the search would otherwise evaluate to reject."""
    ctx, table, res = _large_model_on_small_cluster()
    bound = row_memory_bound_bytes(ctx, table)
    assert np.all(bound <= res.peak_memory_bytes * SLACK)
    states_fit = state_memory_bound_bytes(ctx, table) <= ctx.memory_capacity_bytes
    over = states_fit & ~res.fits
    assert over.sum() > 100 and res.fits.any()
    rejected = cannot_fit(ctx, table)
    assert not np.any(rejected & res.fits)
    assert rejected[over].mean() > 0.5, f"only {rejected[over].mean():.0%} of the rows over the GPU rejected"


def test_search_with_memory_bound_finds_the_brute_force_optimum() -> None:
    ctx, table, res = _large_model_on_small_cluster()
    found = exact_search(ctx, Pins(), SearchLimits(max_micro_batch=4), top=3)
    np.testing.assert_allclose(found.step_time_s, np.sort(res.step_time_s[res.fits])[:3], rtol=1e-12)
