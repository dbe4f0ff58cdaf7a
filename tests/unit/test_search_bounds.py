"""The search's lower bounds never exceed what they bound, and the search stays exact with pins and MoE.

For random small dense and MoE models (dense first layers, so two layer types) on small clusters (fat trees,
an oversubscribed one, mixed A100/H100 hosts, CPU processes with measured collectives), every layout of the
space is evaluated (`brute_force`): each (shape, micro-batch) bound and each shape bound must be <= the step
time of every layout it covers, and the optimistic first pass (DP/PP collectives at capacity-only cost) <=
the exact step time of every layout; then the branch-and-bound search must return the brute-force optimum
under pins that change the bounds' assumptions (GPipe only, a mesh order with TP outermost, ZeRO stages,
interleaving, SP off).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import hardware_profiles
from planner.api import make_context
from planner.cost.comm import AxisBandwidth
from planner.cost.evaluate import evaluate_table
from planner.layout import Workload
from planner.layout.names import RUNTIME_NAMES
from planner.model import ModelSpec
from planner.model.spec import MoESpec
from planner.solver.bounds import (
    dp_bound_s,
    micro_batch_bounds,
    optimistic_bw,
    shape_bounds,
    state_memory_bound_bytes,
)
from planner.solver.exact import brute_force, exact_search
from planner.solver.space import Pins, SearchLimits

PINS = [
    {},
    {"schedule": "gpipe"},
    {"mesh_axes": ("tp", "pp", "dp_replicate", "dp_shard", "cp")},
    {"zero": 0},
    {"zero": 3},
    {"schedule": "interleaved"},
    {"sequence_parallel": False},
]


@st.composite
def setups(draw):
    heads = draw(st.sampled_from([2, 4, 8]))
    kv = draw(st.sampled_from([k for k in (1, 2, 4, 8) if heads % k == 0]))
    hidden = heads * draw(st.sampled_from([16, 64, 128]))
    layers = draw(st.integers(1, 8))
    moe = None
    if draw(st.booleans()):
        experts = draw(st.sampled_from([2, 4, 8]))
        moe = MoESpec(num_experts=experts, top_k=draw(st.integers(1, experts)),
                      num_shared_experts=draw(st.integers(0, 1)), expert_ffn_hidden_size=hidden,
                      first_k_dense=draw(st.integers(0, min(2, layers - 1))))
    model = ModelSpec(
        name="rand", num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=kv,
        ffn_hidden_size=draw(st.sampled_from([2, 4])) * hidden, vocab_size=draw(st.sampled_from([512, 32000])),
        max_seq_len=4096, mlp=draw(st.sampled_from(["swiglu", "gelu"])), norm="rmsnorm", position="rope",
        tied_embeddings=draw(st.booleans()), moe=moe,
    )
    name = draw(st.sampled_from(["dgx-h100", "dgx-a100", "dgx-h100-oversub", "hetero-a100-h100", "local-cpu"]))
    gpus = draw(st.sampled_from([2, 4, 8] if name == "local-cpu" else [2, 4, 8, 16]))
    cluster = hardware_profiles.cluster(name) if name == "hetero-a100-h100" else hardware_profiles.cluster(name, gpus=gpus)
    runtime = draw(st.sampled_from(RUNTIME_NAMES))  # element-wise counts, TP overlap and DP semantics differ by runtime
    workload = Workload(global_batch=draw(st.sampled_from([1, 2, 4, 6, 8, 16])), seq_len=draw(st.sampled_from([512, 2048])),
                        runtime=runtime, tp_comm_overlap=runtime != "pytorch" and draw(st.booleans()))
    return model, cluster, workload, draw(st.booleans()), draw(st.sampled_from(PINS))


@settings(max_examples=30, deadline=None)
@given(setups())
def test_bounds_are_below_every_layout_and_search_is_exact(setup) -> None:
    model, cluster, workload, flash, pin_values = setup
    ctx = make_context(model, cluster, workload, flash_attention=flash)
    limits = SearchLimits(max_micro_batch=8)
    pins = Pins(dict(pin_values))
    table, res = brute_force(ctx, pins, limits, include_dominated=False)
    if len(table["dp"]):
        cols = [table[k] for k in ("tp", "cp", "pp", "dp", "ep")]
        pair = micro_batch_bounds(ctx, AxisBandwidth(ctx.topology), pins, *cols, table["mb"], limits)
        shape_time, shape_mem = shape_bounds(ctx, *cols)
        assert np.all(pair <= res.step_time_s), "a (shape, micro-batch) bound exceeds a layout's step time"
        row = pair + dp_bound_s(ctx, table)
        assert np.all(row <= res.step_time_s), "a row's own bound exceeds its step time"
        states = state_memory_bound_bytes(ctx, table)
        assert np.all(states <= res.peak_memory_bytes * (1 + 1e-12)), "a row's state-memory bound exceeds its peak"
        assert np.all(shape_time <= res.step_time_s), "a shape's time bound exceeds a layout's step time"
        assert np.all(shape_mem[res.fits] <= res.peak_memory_bytes[res.fits] * (1 + 1e-12))
        first = evaluate_table(ctx, table, optimistic_bw(ctx.topology, table, {}))
        assert np.all(first.step_time_s <= res.step_time_s * (1 + 1e-12)), "the optimistic pass is not a bound"
        np.testing.assert_array_equal(first.fits, res.fits)
    found = exact_search(ctx, pins, limits, top=2)
    if not res.fits.any():
        assert len(found.step_time_s) == 0
        return
    np.testing.assert_allclose(found.step_time_s, np.sort(res.step_time_s[res.fits])[:2], rtol=1e-12)
