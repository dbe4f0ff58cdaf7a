"""The MoE layer's non-GEMM work (planner.cost.moe_dispatch) against counts done by hand from its docstring.

Model: hidden 1024, 8 routed experts of width 1024, top-2 (as in test_cost_runtime_terms), bf16 on a DGX H100
(HBM 3.35e12 B/s datasheet, 0.866 of it achievable); one micro-batch of T = 4096 tokens.
"""

from __future__ import annotations

import numpy as np
import pytest

import hardware_profiles
from planner.api import make_context
from planner.cost import compute, elementwise, moe_dispatch
from planner.layout import Workload
from planner.model import ModelSpec
from planner.model.spec import MoESpec

H, E, K, FE, T = 1024, 8, 2, 1024, 4096.0
BW = 3.35e12 * 0.866  # achievable HBM bandwidth: datasheet x memory_bandwidth_efficiency (h100-sxm.yaml)
MODEL = ModelSpec(name="m", num_layers=4, hidden_size=H, num_heads=8, num_kv_heads=2, ffn_hidden_size=4096,
                  vocab_size=32000, max_seq_len=4096, mlp="swiglu", norm="rmsnorm", position="rope",
                  tied_embeddings=False, moe=MoESpec(num_experts=E, top_k=K, expert_ffn_hidden_size=FE))


def ctx_for(runtime: str, model: ModelSpec = MODEL):
    return make_context(model, hardware_profiles.cluster("dgx-h100", gpus=8),
                        Workload(global_batch=8, seq_len=4096, runtime=runtime), framework="any")


def rows(ctx, tp: int, ep: int, sp: bool) -> tuple[float, float]:
    tokens, tpa, spa = np.array([T]), np.array([tp]), np.array([sp])
    r = moe_dispatch.dispatch_rows(ctx, tokens, moe_dispatch.ep_dispatch_tokens(ctx, tokens, tpa, spa), np.array([ep]))
    return float(r.fwd[0]), float(r.bwd[0])


def test_megatron_permute_sorts_and_unpermute() -> None:
    mega = ctx_for("megatron")
    # tp 4 with SP: N = T/4 tokens permuted, R = 2N rows; 4 local experts (ep 2) -> two sorts of R_e = 2T rows.
    n, r, r_e = T / 4, 2 * T / 4, 2 * T
    assert rows(mega, 4, 2, True) == (5 * r + 4 * r_e + 2 * n, 7 * r + 4 * r_e + 2 * n)
    # one local expert (ep = E): no sort_chunks_by_idxs; tp 1: N = T.
    assert rows(mega, 1, 8, False) == (5 * 2 * T + 2 * T, 7 * 2 * T + 2 * T)


def test_executor_gathers_and_scatters_every_routed_row() -> None:
    eager = ctx_for("pytorch")
    r = 2 * T  # the executor dispatches the whole micro-batch, whatever tp and SP
    assert rows(eager, 4, 1, True) == (7 * r + 4 * T, 7 * r + 2 * T)
    assert rows(eager, 1, 2, False) == (11 * r + 4 * T, 13 * r + 2 * T)  # EP adds the two reorders


def test_shared_experts_add_their_output() -> None:
    shared = ctx_for("megatron", MODEL.model_copy(update={"moe": MoESpec(num_experts=E, top_k=K, expert_ffn_hidden_size=FE,
                                                                        num_shared_experts=1)}))
    plain_f, plain_b = rows(ctx_for("megatron"), 1, 8, False)
    assert rows(shared, 1, 8, False) == (plain_f + 3 * T, plain_b)


def test_dispatch_seconds_are_rows_and_router_bytes_at_hbm_bandwidth() -> None:
    mega = ctx_for("megatron")
    tokens, ep = np.array([T]), np.array([2])
    fwd, bwd = moe_dispatch.dispatch_s(mega, tokens, tokens, ep)
    f_rows, b_rows = rows(mega, 1, 2, False)
    router = T * E * (2 + 16)  # fp32 softmax / top-k passes over E logits, bf16 logits
    assert fwd[0] == pytest.approx((f_rows * H * 2 + router) / BW, rel=1e-12)
    assert bwd[0] == pytest.approx((b_rows * H * 2 + router) / BW, rel=1e-12)
    dense = ctx_for("megatron", MODEL.model_copy(update={"moe": None}))
    assert moe_dispatch.dispatch_s(dense, tokens, tokens, ep)[0][0] == 0.0


def test_moe_layer_time_adds_the_dispatch_and_the_routed_activation(monkeypatch) -> None:
    mega = ctx_for("megatron")
    moe_lt = next(lt for lt in mega.layer_types if lt.expert_flops_per_token)
    # The activation (fused SwiGLU, 3 elements per width) runs on top_k expert widths per token, not the dense f.
    assert elementwise.mlp_width(MODEL, True) == K * FE and elementwise.mlp_width(MODEL, False) == 4096
    assert elementwise.layer_bytes_per_token(mega, True).local_fwd - elementwise.layer_bytes_per_token(mega).local_fwd \
        == 3 * (K * FE - 4096) * 2
    tokens, one, ep, sp = np.array([T]), np.array([1]), np.array([2]), np.array([False])
    with_moe = compute.layer_time_s(mega, moe_lt, tokens, one, one, ep, sp)
    perm_f, perm_b = moe_dispatch.dispatch_s(mega, tokens, tokens, ep)
    zero = np.zeros(1)
    monkeypatch.setattr(moe_dispatch, "dispatch_s", lambda *args: (zero, zero))
    without = compute.layer_time_s(mega, moe_lt, tokens, one, one, ep, sp)
    assert with_moe.fwd_s[0] == pytest.approx(without.fwd_s[0] + perm_f[0], rel=1e-12)
    assert with_moe.bwd_s[0] == pytest.approx(without.bwd_s[0] + perm_b[0], rel=1e-12)


def test_moe_layers_store_their_routed_rows_for_the_backward() -> None:
    """Activation memory of an all-MoE model against the same model dense: the dense MLP's 6f/tp bytes per token
    give way to the routed rows (2 top_k h, gathered over expert TP), the experts' 6 top_k f_e / tp and the
    probability product's input (2 top_k h per dispatched token: T/tp under Megatron's SP dispatch, T eager)."""
    from planner.cost import memory

    mb, tp, cp, sp, rc = np.array([1]), np.array([4]), np.array([1]), np.array([True]), np.array([0])
    dense_model = MODEL.model_copy(update={"moe": None})
    for runtime, dispatched in (("megatron", 1 / 4), ("pytorch", 1.0)):
        moe_ctx, dense_ctx = ctx_for(runtime), ctx_for(runtime, dense_model)
        assert all(lt.expert_flops_per_token for lt in moe_ctx.layer_types)  # every layer is MoE
        extra = memory.activation_bytes_per_layer(moe_ctx, mb, tp, cp, sp, rc) \
            - memory.activation_bytes_per_layer(dense_ctx, mb, tp, cp, sp, rc)
        per_token = 2 * K * H + 6 * K * FE / 4 + 2 * K * H * dispatched - 6 * 4096 / 4
        if runtime == "pytorch":  # eager: the SiLU output at the experts' width, and the routing tensors
            per_token += 2 * (K * FE - 4096) / 4 + (4 * E + 28 * K + 4 + 2 * K + 2 * K * H) * dispatched
        assert extra[0] == pytest.approx(T * per_token, rel=1e-12)
        # Full recomputation keeps only the layer input, MoE or not.
        full = np.array([2])
        assert memory.activation_bytes_per_layer(moe_ctx, mb, tp, cp, sp, full)[0] == \
            memory.activation_bytes_per_layer(dense_ctx, mb, tp, cp, sp, full)[0]
