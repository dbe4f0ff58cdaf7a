"""Megatron's asynchronous backward TP collectives (comm.tp_backward_exposed_s): what each runtime and release
leaves exposed, bounded by the column-parallel GEMMs they run beside."""

from __future__ import annotations

import numpy as np
import pytest

import hardware_profiles
from planner.api import make_context
from planner.cost import comm, compute, interference
from planner.layout import Layout, Workload
from planner.model import ModelSpec

# hidden 1024 with 8 heads of 128: the attention output projection reads a width equal to hidden, so only the
# names tell it from the column-parallel projections
MODEL = ModelSpec(name="m", num_layers=4, hidden_size=1024, num_heads=8, num_kv_heads=8, ffn_hidden_size=4096,
                  vocab_size=32000, max_seq_len=4096, mlp="swiglu", norm="rmsnorm", position="rope",
                  tied_embeddings=False)
TP = np.array([8, 8, 8])
TOKENS = np.array([4096.0, 4096.0, 4096.0])


def ctx_for(runtime: str = "megatron", **workload):
    return make_context(MODEL, hardware_profiles.cluster("dgx-a100", gpus=8),
                        Workload(global_batch=8, seq_len=4096, runtime=runtime, **workload), framework="any")


def layer(ctx, sp: bool):
    return compute.layer_time_s(ctx, ctx.layer_types[0], TOKENS, TP, np.ones(3, int), np.ones(3, int),
                                np.full(3, sp))


def test_column_parallel_gemms_are_qkv_and_mlp_up() -> None:
    names = [g[0] for g in MODEL.layer_gemms(0, 1, tp=1)]
    lt = ctx_for().layer_types[0]
    assert dict(zip(names, lt.gemm_column_parallel)) == {
        "attn_q": True, "attn_k": True, "attn_v": True, "attn_out": False,
        "mlp_gate": True, "mlp_up": True, "mlp_down": False}


def test_column_window_is_a_share_of_the_weight_gradient_gemms() -> None:
    t = layer(ctx_for(), False)
    # QKV (h x 3q) and SwiGLU up (h x 2f) against attention output (q x h) and down (f x h)
    assert np.all(t.column_wgrad_s > 0.5 * t.wgrad_s)
    assert np.all(t.column_wgrad_s < t.wgrad_s)


@pytest.mark.parametrize("scale", [0.05, 1.0, 20.0])
def test_no_sp_async_all_reduce_hidden_behind_column_wgrad_only(scale: float) -> None:
    ctx = ctx_for()
    t = layer(ctx, False)
    tp_s = scale * t.column_wgrad_s
    f = interference.slowdown(ctx)
    got = comm.tp_backward_exposed_s(ctx, tp_s, t.wgrad_s, t.column_wgrad_s, np.zeros(3, bool), TP)
    hidden = np.minimum(tp_s, t.column_wgrad_s)  # never more than the GEMMs it runs beside
    np.testing.assert_allclose(got, tp_s - hidden + f * hidden)
    assert np.all(got < tp_s)
    assert np.all(got >= tp_s - t.column_wgrad_s)


def test_release_without_async_all_reduce_exposes_it_all() -> None:
    ctx = ctx_for(async_tp_backward=False)
    t = layer(ctx, False)
    tp_s = 0.5 * t.column_wgrad_s
    got = comm.tp_backward_exposed_s(ctx, tp_s, t.wgrad_s, t.column_wgrad_s, np.zeros(3, bool), TP)
    np.testing.assert_allclose(got, tp_s)


def test_sp_overlaps_reduce_scatter_and_regather_but_not_the_row_parallel_gathers() -> None:
    # The SP path is async whatever the release's all-reduce flag (Megatron forces that flag off under SP).
    for ctx in (ctx_for(), ctx_for(async_tp_backward=False)):
        t = layer(ctx, True)
        tp_s = 4.0 * t.column_wgrad_s
        f = interference.slowdown(ctx)
        got = comm.tp_backward_exposed_s(ctx, tp_s, t.wgrad_s, t.column_wgrad_s, np.ones(3, bool), TP)
        half = tp_s / 2
        np.testing.assert_allclose(got, half + 2 * (half - t.column_wgrad_s + f * t.column_wgrad_s))
        assert np.all(got >= half)


@pytest.mark.parametrize("runtime", ["pytorch", "pytorch-compile"])
def test_pytorch_runtimes_keep_backward_tp_exposed(runtime: str) -> None:
    ctx = ctx_for(runtime)
    t = layer(ctx, False)
    tp_s = 0.5 * t.column_wgrad_s
    for sp in (False, True):
        got = comm.tp_backward_exposed_s(ctx, tp_s, t.wgrad_s, t.column_wgrad_s, np.full(3, sp), TP)
        np.testing.assert_allclose(got, tp_s)


def test_tp_comm_overlap_keeps_its_own_model_with_sp() -> None:
    ctx = ctx_for(tp_comm_overlap=True)
    t = layer(ctx, True)
    tp_s = 2.0 * t.column_wgrad_s
    got = comm.tp_backward_exposed_s(ctx, tp_s, t.wgrad_s, t.column_wgrad_s, np.ones(3, bool), TP)
    np.testing.assert_allclose(got, comm.tp_exposed_s(ctx, tp_s, 2 * t.wgrad_s, np.ones(3, bool), TP))


@pytest.mark.parametrize("sp", [False, True])
def test_step_time_with_and_without_the_async_all_reduce(sp: bool) -> None:
    """A whole Megatron step at tp 8: the release's async all-reduce saves time without SP and changes nothing
    with it; the eager PyTorch runtime is not affected by the flag."""
    from planner.api import evaluate  # noqa: PLC0415

    cluster = hardware_profiles.cluster("dgx-a100", gpus=8)
    layout = Layout(tp=8, micro_batch=1, num_microbatches=4, sequence_parallel=sp)

    def step(runtime: str, on: bool) -> float:
        wl = Workload(global_batch=4, seq_len=4096, runtime=runtime, async_tp_backward=on)
        return evaluate(MODEL, cluster, wl, layout, framework="any").prediction.step_time_s

    if sp:
        assert step("megatron", True) == pytest.approx(step("megatron", False), rel=1e-12)
    else:
        assert step("megatron", True) < step("megatron", False)
    assert step("pytorch", True) == pytest.approx(step("pytorch", False), rel=1e-12)
