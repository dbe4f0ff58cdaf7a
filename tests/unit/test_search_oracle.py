"""The exact search returns the brute-force optimum of the same space (hypothesis over small models/clusters).

The oracle enumerates every layout (including the options the search drops as dominated: SP off, GPipe when
1F1B is valid, selective recomputation with FlashAttention), evaluates each one with no bounds and takes the
fastest that fits; the branch-and-bound search must find the same step time (ties may pick another row).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import hardware_profiles
from planner.api import make_context
from planner.layout import Workload
from planner.layout.names import RUNTIME_NAMES
from planner.model import ModelSpec
from planner.solver.exact import brute_force, exact_search
from planner.solver.space import Pins, SearchLimits


@st.composite
def setups(draw):
    heads = draw(st.sampled_from([2, 4, 8]))
    kv = draw(st.sampled_from([k for k in (1, 2, 4, 8) if heads % k == 0]))
    head_dim = draw(st.sampled_from([16, 64, 128]))
    hidden = heads * head_dim
    layers = draw(st.integers(1, 8))
    model = ModelSpec(
        name="rand", num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=kv,
        ffn_hidden_size=draw(st.sampled_from([2, 4])) * hidden, vocab_size=draw(st.sampled_from([512, 32000])),
        max_seq_len=4096, mlp=draw(st.sampled_from(["swiglu", "gelu"])),
        norm=draw(st.sampled_from(["rmsnorm", "layernorm"])), position="rope", tied_embeddings=draw(st.booleans()),
    )
    name = draw(st.sampled_from(["dgx-h100", "dgx-a100", "pcie-4xl40s", "dgx-h100-oversub"]))
    gpus = draw(st.sampled_from([1, 2, 4, 8, 16]))
    if name == "pcie-4xl40s":
        gpus = min(gpus, 4)
    cluster = hardware_profiles.cluster(name, gpus=gpus)
    seq = draw(st.sampled_from([512, 2048, 4096]))
    batch = draw(st.sampled_from([1, 2, 4, 6, 8, 16]))
    flash = draw(st.booleans())
    runtime = draw(st.sampled_from(RUNTIME_NAMES))
    overlap = runtime != "pytorch" and draw(st.booleans())
    return model, cluster, Workload(global_batch=batch, seq_len=seq, runtime=runtime, tp_comm_overlap=overlap), flash


@settings(max_examples=40)
@given(setups())
def test_search_equals_brute_force(setup) -> None:
    model, cluster, workload, flash = setup
    ctx = make_context(model, cluster, workload, flash_attention=flash)
    limits = SearchLimits(max_micro_batch=8)
    _, full = brute_force(ctx, Pins(), limits)
    _, same = brute_force(ctx, Pins(), limits, include_dominated=False)
    found = exact_search(ctx, Pins(), limits, top=3)
    st_ = found.stats  # every shape is accounted for exactly once in the search report
    assert st_.shapes_total == (st_.shapes_memory_pruned + st_.shapes_without_layout + st_.shapes_bound_pruned
                                + st_.shapes_evaluated)
    if not full.fits.any():
        assert len(found.step_time_s) == 0
        return
    assert found.stats.proven_optimal
    # The optimum of the whole space (dominated options included) is found ...
    np.testing.assert_allclose(found.step_time_s[0], full.step_time_s[full.fits].min(), rtol=1e-12)
    # ... and the top 3 equal the brute-force top 3 of the searched space.
    np.testing.assert_allclose(found.step_time_s, np.sort(same.step_time_s[same.fits])[:3], rtol=1e-12)


@settings(max_examples=25)
@given(setups())
def test_pessimistic_search_equals_brute_force(setup) -> None:
    """Ranked by the upper end of the error band (score = step x (1 + high)), the search still returns the
    brute-force optimum of the same score: its bounds are scaled by the least multiplier a shape can get."""
    from planner.validation.bands import high_for_table

    model, cluster, workload, flash = setup
    ctx = make_context(model, cluster, workload, flash_attention=flash)
    limits = SearchLimits(max_micro_batch=8)
    table, full = brute_force(ctx, Pins(), limits)
    found = exact_search(ctx, Pins(), limits, top=3, objective="pessimistic")
    if not full.fits.any():
        assert len(found.step_time_s) == 0
        return
    score = full.step_time_s * (1 + high_for_table(ctx, table))
    np.testing.assert_allclose(found.score[0], score[full.fits].min(), rtol=1e-12)
    # the reported step times are the rows' own, and the scores are their step times times the multiplier
    chosen = {k: v[:1] for k, v in found.table.items()}
    np.testing.assert_allclose(found.score[0], found.step_time_s[0] * (1 + high_for_table(ctx, chosen)[0]), rtol=1e-12)
    assert np.all(np.diff(found.score) >= 0)


def test_pessimistic_objective_uses_more_than_one_band() -> None:
    """The oracle test above is only meaningful if layouts of one search fall into bands with different upper
    ends (else the score is a constant multiple of the step time)."""
    from planner.validation.bands import high_for_table

    model = ModelSpec(name="m", num_layers=8, hidden_size=1024, num_heads=8, num_kv_heads=8, ffn_hidden_size=4096,
                      vocab_size=32000, max_seq_len=4096, mlp="swiglu", norm="rmsnorm", position="rope",
                      tied_embeddings=False)
    ctx = make_context(model, hardware_profiles.cluster("dgx-a100", gpus=16),
                       Workload(global_batch=16, seq_len=4096, runtime="megatron"))
    table, _ = brute_force(ctx, Pins(), SearchLimits(max_micro_batch=2))
    assert len(np.unique(high_for_table(ctx, table))) > 1
