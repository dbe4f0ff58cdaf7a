"""Warm searches: the prepared tables (solver/prepared.py) are served only for the very same input, and rows whose
model states cannot fit are never evaluated unless nothing fits at all (then the least-memory layout is the one
evaluating every row gives)."""

from __future__ import annotations

import numpy as np
import pytest

import hardware_profiles
from planner.api import make_context
from planner.layout import Workload
from planner.model import ModelSpec
from planner.solver import exact, prepared
from planner.solver.bounds import shape_bounds
from planner.solver.exact import brute_force, exact_search
from planner.solver.space import Pins, SearchLimits

LIMITS = SearchLimits(max_micro_batch=8)


def _model(layers: int = 8, hidden: int = 1024) -> ModelSpec:
    return ModelSpec(name="m", num_layers=layers, hidden_size=hidden, num_heads=16, num_kv_heads=4,
                     ffn_hidden_size=4 * hidden, vocab_size=32000, max_seq_len=32768, mlp="swiglu", norm="rmsnorm",
                     position="rope", tied_embeddings=False)


def _ctx(gpus: int = 16, cluster: str = "dgx-h100", **workload):
    workload = {"global_batch": 16, "seq_len": 2048, **workload}
    return make_context(_model(), hardware_profiles.cluster(cluster, gpus=gpus), Workload(**workload))


def _same(a, b) -> None:
    assert a.stats == b.stats
    assert np.array_equal(a.step_time_s, b.step_time_s) and np.array_equal(a.score, b.score)
    assert all(np.array_equal(a.table[k], b.table[k]) for k in a.table)
    assert repr(a.rejected) == repr(b.rejected)  # the rules' tally is not counted twice
    assert a.best_infeasible == b.best_infeasible


@pytest.mark.parametrize("objective", ["expected", "pessimistic"])
def test_warm_search_equals_cold_search(objective: str) -> None:
    prepared.clear()
    cold = exact_search(_ctx(), Pins(), LIMITS, top=3, objective=objective)
    key = prepared.cache_key(_ctx(), Pins(), LIMITS, objective)
    assert key in prepared._CACHE  # a fresh context of the same inputs has the same key
    for _ in range(2):
        _same(exact_search(_ctx(), Pins(), LIMITS, top=3, objective=objective), cold)


@pytest.mark.parametrize("change", ["memory", "pin", "limit", "objective", "workload", "gpus"])
def test_a_changed_input_is_not_served_from_the_cache(change: str) -> None:
    """Each input the tables depend on changes the key, and the search then equals a cold one of that input."""
    prepared.clear()
    exact_search(_ctx(), Pins(), LIMITS, top=2)  # fills the cache with the base input
    ctx, pins, limits, objective = _ctx(), Pins(), LIMITS, "expected"
    if change == "memory":  # another GPU, hence another memory limit: H200s instead of H100s
        ctx = _ctx(cluster="hgx-h200")
        assert ctx.memory_capacity_bytes != _ctx().memory_capacity_bytes
    elif change == "pin":
        pins = Pins({"tp": 2})
    elif change == "limit":
        limits = SearchLimits(max_micro_batch=2)
    elif change == "objective":
        objective = "pessimistic"
    elif change == "workload":
        ctx = _ctx(seq_len=4096)
    else:
        ctx = _ctx(gpus=8)
    assert prepared.cache_key(ctx, pins, limits, objective) not in prepared._CACHE
    warm = exact_search(ctx, pins, limits, top=2, objective=objective)
    prepared.clear()
    _same(warm, exact_search(ctx, pins, limits, top=2, objective=objective))


def test_cache_is_bounded() -> None:
    prepared.clear()
    for mb in range(1, prepared.CACHE_SIZE + 3):
        exact_search(_ctx(gpus=8), Pins(), SearchLimits(max_micro_batch=mb), top=1)
    assert len(prepared._CACHE) == prepared.CACHE_SIZE


def _big(layers: int, seq: int):
    model = ModelSpec(name="big", num_layers=layers, hidden_size=8192, num_heads=32, num_kv_heads=8,
                      ffn_hidden_size=4 * 8192, vocab_size=256000, max_seq_len=32768, mlp="swiglu", norm="rmsnorm",
                      position="rope", tied_embeddings=False)
    return make_context(model, hardware_profiles.cluster("dgx-a100", gpus=8), Workload(global_batch=8, seq_len=seq))


@pytest.mark.parametrize("layers", [32, 36])
def test_nothing_fits_reports_the_least_memory_of_every_row(layers: int, monkeypatch) -> None:
    """Nothing fits: the rows set aside (states alone over capacity) are evaluated after all, so the search
    evaluates every row of every shape its bound lets through and reports the least peak of them all."""
    ctx = _big(layers, 32768 if layers == 32 else 16384)
    set_aside = []
    real = exact._least_memory

    def spy(ctx_, prep, unbounded, cache, stats):
        set_aside.append(stats.rows_skipped_by_bound)
        return real(ctx_, prep, unbounded, cache, stats)

    monkeypatch.setattr(exact, "_least_memory", spy)
    found = exact_search(ctx, Pins(), LIMITS, top=1)
    table, every = brute_force(ctx, Pins(), LIMITS, include_dominated=False)
    assert len(found.step_time_s) == 0 and not every.fits.any()
    assert set_aside and set_aside[0] > 0  # the set-aside path ran
    passed = shape_bounds(ctx, *(table[k] for k in ("tp", "cp", "pp", "dp", "ep")))[1] <= ctx.memory_capacity_bytes
    assert found.stats.rows_evaluated == int(passed.sum()) and found.stats.rows_skipped_by_bound == 0
    row, peak = found.best_infeasible
    assert peak == every.peak_memory_bytes[passed].min()
    at = np.nonzero([all(int(table[k][i]) == v for k, v in row.items()) for i in range(len(every.fits))])[0]
    assert len(at) == 1 and every.peak_memory_bytes[at[0]] == peak


def test_rows_whose_states_do_not_fit_are_not_evaluated_before_a_fit_is_known() -> None:
    """A search that finds layouts evaluates fewer rows than its batches hold, with the same top K."""
    ctx = _big(24, 32768)
    found = exact_search(ctx, Pins(), LIMITS, top=1)
    _, every = brute_force(ctx, Pins(), LIMITS, include_dominated=False)
    assert found.stats.rows_skipped_by_bound > 0
    np.testing.assert_allclose(found.step_time_s[0], every.step_time_s[every.fits].min(), rtol=1e-12)
