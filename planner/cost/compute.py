"""Compute time of one micro-batch: every layer part forward, backward and recomputed.

Per decoder layer and micro-batch on one GPU (tokens T = micro_batch * seq_len / cp):
- weight GEMMs (QKV, attention output, MLP or shared experts): 2*T*k*n / tp FLOPs each (Megatron column/row
  split, Shoeybi et al. 2019 Sec. 3), timed one by one on the GEMM efficiency curve (`efficiency.py`);
- attention core (QK^T, softmax*V): per-token FLOPs from the ModelSpec (causal with FlashAttention, which
  skips masked blocks (Dao et al. 2022); full without), split by tp over heads; with CP each rank computes
  its load-balanced query chunks against all keys, so its share is 1/cp of the sequence's attention.
  FlashAttention runs at the GPU profile's `attention_efficiency` and its backward costs 2.5x its forward
  (FlashAttention-2 Sec. 3.1); unfused attention is two batched GEMMs plus element-wise passes over the full
  score matrix (13 bytes per score element each way, see UNFUSED_SCORE_BYTES_FWD);
- MoE: the router GEMM (replicated) and the top-k routed experts (expert GEMMs of T*top_k*ep/E tokens each),
  and the token permute / unpermute and router passes around them (`moe_dispatch`, HBM bytes per runtime);
- memory-bound element-wise work (norms, residual adds, RoPE, activation function): bytes / HBM bandwidth, the
  bytes counted per runtime by `elementwise.py` (fused kernels, or eager PyTorch op by op), plus the GPU time of
  launching those kernels back to back (`fixed_costs.layer_launch_s`);
- without gradient-accumulation fusion (`Workload.grad_accumulation_fusion` False, Megatron-LM 2021), the
  backward's separate add of the weight gradients into the gradient buffer: 6 bytes per local parameter / HBM
  bandwidth (`unfused_grad_accumulation_s`).
GEMM backward costs 2x forward (input and weight gradients, the standard 1:2 ratio, Narayanan et al. 2021
Sec. 5.1 Eq. 3 derivation); zero-bubble schedules split the backward into B (input gradients: the dX GEMMs, the
attention and element-wise backward, recomputation) and W (weight gradients: the dW GEMMs, as many FLOPs as the
forward GEMMs), Qi et al. 2023 Sec. 2; `LayerTime.wgrad_s` is W. Full recomputation adds one forward of every layer (every-k: of 1/k of them); selective adds only the
attention core (Korthikanti et al. 2022 Sec. 4.2); per-op ("op") adds the matmuls it does not save
(planner.model.flops.op_recomputed_share) and the layer's element-wise forward, not the attention kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost import elementwise, fixed_costs, moe_dispatch, overhead
from planner.cost.context import CostContext, LayerType
from planner.cost.efficiency import gemm_time_s
from planner.cost.runtime import UNFUSED_GRAD_ACCUMULATION_BYTES_PER_PARAM, runtime_costs
from planner.layout.numeric import first_match
from planner.layout.table import FULL_RECOMPUTE_SHARE, RecomputeCode

BACKWARD_TO_FORWARD = 2.0  # Narayanan et al. 2021 Sec. 5.1: backward = 2x forward FLOPs


@dataclass
class LayerTime:
    """Seconds of one layer for one micro-batch on one GPU (arrays over layouts)."""

    fwd_s: np.ndarray  # forward, all parts
    bwd_s: np.ndarray  # backward (input + weight gradients)
    attn_fwd_s: np.ndarray  # the attention core's forward (overlap window for CP; what selective recompute redoes)
    wgrad_s: np.ndarray  # the weight-gradient GEMMs inside bwd_s (the W pass of zero-bubble schedules)
    column_wgrad_s: np.ndarray  # the column-parallel ones among them (LayerType.gemm_column_parallel); their
    # input-gradient GEMMs take as long (same FLOPs and shapes)
    op_recompute_s: np.ndarray  # what recompute policy "op" repeats (see layer_time_s)


# Unfused attention (no FlashAttention): bytes per attention-score element (fp16) moved by the element-wise
# kernels around the two batched GEMMs, forward: QK^T writes the scores (2), the fused scale-mask-softmax reads
# and writes them (4), dropout reads, writes and stores a 1-byte mask (5), attention x V reads them (2) = 13;
# backward: dropout and softmax backward read the probabilities, masks and incoming gradients and write the
# gradients, about the same 13 bytes (Megatron-LM 2021 fused softmax kernels; Korthikanti et al. 2022 Sec. 4.1
# counts the same tensors as stored activations: 2as^2b + as^2b + 2as^2b). A recount op by op (the attention x V
# backward 2 + 2, dropout backward 2 + 1 + 2, softmax backward 2 + 2 + 2, QK^T's two gradient GEMMs reading the
# score gradient 2 + 2) gives 19, but Korthikanti Table 4's measured backward times bound it: with 19 the layer
# fit of efficiency.py leaves residuals up to 0.92 ms instead of 0.51 (benchmarks/fit_layer_overhead.py), so the
# measurement wins (the GEMMs reading their operands partly from L2 is one reason it can be lower).
UNFUSED_SCORE_BYTES_FWD = 13
UNFUSED_SCORE_BYTES_BWD = 13
# FlashAttention's backward runs 5 matmuls against the forward's 2, recomputing QK^T (Dao 2023,
# FlashAttention-2, Sec. 3.1): 2.5x the forward FLOPs instead of the usual 2x.
FLASH_BACKWARD_TO_FORWARD = 2.5


def layer_time_s(
    ctx: CostContext, lt: LayerType, tokens: np.ndarray, tp: np.ndarray, cp: np.ndarray, ep: np.ndarray, sp: np.ndarray
) -> LayerTime:
    """Forward and backward seconds of one layer of type `lt` for one micro-batch (see module docstring)."""
    peak, mx, half = ctx.peak_flops, ctx.max_fraction, ctx.half_flops
    tokens = tokens.astype(float)
    t = tp.astype(float)
    gemm = np.zeros_like(tokens)
    column = np.zeros_like(tokens)
    op_gemm = np.zeros_like(tokens)  # the GEMMs recompute policy "op" repeats
    for f_tok, split, col, share in zip(lt.gemm_flops_per_token, lt.gemm_split_by_tp, lt.gemm_column_parallel,
                                        lt.gemm_op_recompute_share):
        one = gemm_time_s(f_tok * tokens / (t if split else 1.0), peak, mx, half)
        gemm += one
        column += one if col else 0.0
        op_gemm += share * one
    if lt.expert_flops_per_token:
        moe = ctx.model.moe
        local_experts = moe.num_experts / ep
        tokens_per_expert = tokens * ep * moe.top_k / moe.num_experts
        one = gemm_time_s(lt.expert_gemm_flops_per_token_one_expert * tokens_per_expert / t, peak, mx, half)
        gemm += one * local_experts
        op_gemm += lt.expert_op_recompute_share * one * local_experts
    # The backward's gradient GEMMs of the linears and experts; an fp8 recipe runs them with fast accumulation off.
    grad_gemm = gemm * ctx.fp8_backward_gemm_slowdown
    if lt.router_flops_per_token:
        router = gemm_time_s(lt.router_flops_per_token * tokens, ctx.unquantized_peak_flops, mx, half)
        gemm += router
        grad_gemm += router
        op_gemm += router
    attn_flops = lt.attn_flops_per_token * tokens / t
    attn_peak = ctx.unquantized_peak_flops  # attention stays 16-bit under fp8 recipes (UNQUANTIZED_MATMUL_DTYPE)
    if ctx.flash_attention:
        # Fused kernels at the attention kernel's own efficiency (GPU profile), which is below the GEMM plateau:
        # softmax and masking run between the two matmuls inside the kernel. Each call pays the kernel's fixed
        # cost; with CP a rank makes several calls per layer (`attention_calls`).
        attn_eff = ctx.attention_efficiency
        calls = attention_calls(ctx, cp)
        attn_f = np.where(attn_flops > 0, (attn_flops + calls * ctx.attention_half_flops) / (attn_peak * attn_eff), 0.0)
        attn_b = FLASH_BACKWARD_TO_FORWARD * attn_f
    else:
        # Two batched GEMMs on the GEMM curve plus the element-wise passes over the full score matrix.
        scores = tokens * ctx.model.num_heads * ctx.workload.seq_len / t  # score elements (unfused: full, not causal)
        attn_f = gemm_time_s(attn_flops, attn_peak, mx, half) + scores * UNFUSED_SCORE_BYTES_FWD / ctx.memory_bandwidth_Bps
        attn_b = 2 * gemm_time_s(attn_flops, attn_peak, mx, half) + scores * UNFUSED_SCORE_BYTES_BWD / ctx.memory_bandwidth_Bps
    is_moe = bool(lt.expert_flops_per_token)
    lb = elementwise.layer_bytes_per_token(ctx, is_moe)
    replicated = np.where(sp, 1.0 / t, 1.0)
    bw = ctx.memory_bandwidth_Bps
    # Eager GQA: K and V repeated to the query heads, on the whole gathered sequence under CP (executor/cp.py).
    gqa = tokens * cp * elementwise.gqa_repeat_bytes_per_token(ctx) / t / bw
    launch_f, launch_b = fixed_costs.layer_launch_s(ctx)
    ew_f = tokens * (lb.local_fwd / t + lb.replicated_fwd * replicated) / bw + gqa + launch_f
    ew_b = tokens * (lb.local_bwd / t + lb.replicated_bwd * replicated) / bw + gqa + launch_b
    ew_b = ew_b + unfused_grad_accumulation_s(ctx, lt, tp, ep)
    if is_moe:
        perm_f, perm_b = moe_dispatch.dispatch_s(ctx, tokens, moe_dispatch.ep_dispatch_tokens(ctx, tokens, tp, sp), ep)
        ew_f, ew_b = ew_f + perm_f, ew_b + perm_b
    fwd = gemm + attn_f + ew_f
    bwd = BACKWARD_TO_FORWARD * grad_gemm + ew_b + attn_b
    # Host-side framework time per layer and micro-batch (measured by meshplan calibrate; 0 without it).
    o_fwd, o_bwd = overhead.layer_overhead_s(ctx, tokens, tp)
    fwd, bwd = overhead.with_overhead(ctx, fwd, o_fwd), overhead.with_overhead(ctx, bwd, o_bwd)
    wgrad = np.minimum(grad_gemm, bwd)
    column_wgrad = np.minimum(column * ctx.fp8_backward_gemm_slowdown, wgrad)
    # "op" repeats its recomputed GEMMs and every element-wise op of the forward (norms, RoPE, activation, products,
    # residual adds, the GQA repeat, MoE permutes, their launches), never the attention kernel (saved).
    return LayerTime(fwd_s=fwd, bwd_s=bwd, attn_fwd_s=attn_f, wgrad_s=wgrad, column_wgrad_s=column_wgrad,
                     op_recompute_s=op_gemm + ew_f)


def unfused_grad_accumulation_s(ctx: CostContext, lt: LayerType, tp: np.ndarray, ep: np.ndarray) -> np.ndarray:
    """Seconds per micro-batch that adding one layer's weight gradients into the gradient buffer takes when the
    runtime does not fuse it into the weight-gradient GEMM (`Workload.grad_accumulation_fusion` False): HBM passes
    over the layer's local parameters (`runtime.UNFUSED_GRAD_ACCUMULATION_BYTES_PER_PARAM`); 0 when fused."""
    zeros = np.zeros(np.shape(tp), dtype=float)
    if getattr(ctx.workload, "grad_accumulation_fusion", True):
        return zeros
    local = (lt.dense_params + lt.expert_params / ep) / tp.astype(float)
    return zeros + local * UNFUSED_GRAD_ACCUMULATION_BYTES_PER_PARAM / ctx.memory_bandwidth_Bps


def attention_calls(ctx: CostContext, cp: np.ndarray) -> np.ndarray:
    """Fused-attention calls per layer and micro-batch on one rank, each paying the kernel's fixed cost.

    Without CP one call. With CP the executor's rank attends its two load-balanced query chunks separately
    (executor/cp.py `attend_local_chunks`: chunk g against keys [0, (g+1)c), so both chunks together do exactly
    1/cp of the causal work: c^2 (i + 0.5) + c^2 (2cp - 1 - i + 0.5) = 2cp c^2 = S^2 / (2cp)); ring attention
    (Megatron-Core / Transformer Engine) runs one partial attention per ring step, cp of them.
    """
    cp = np.asarray(cp)
    per_rank = 2 if runtime_costs(ctx.workload).cp_attention_calls_per_rank == "two" else cp
    return np.where(cp > 1, per_rank, 1).astype(float)


def _head_parts_s(ctx: CostContext, tokens: np.ndarray, tp: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(LM-head GEMM forward, loss forward, loss backward) seconds of one micro-batch: the loss moves the
    runtime's bytes per logit over the V/tp logits of each token (`elementwise.cross_entropy_bytes_per_logit`)."""
    t = tp.astype(float)
    tokens = tokens.astype(float)
    # The LM head stays 16-bit under fp8 recipes (planner.layout.workload.UNQUANTIZED_MATMUL_DTYPE).
    gemm = gemm_time_s(ctx.logits_flops_per_token * tokens / t, ctx.unquantized_peak_flops, ctx.max_fraction,
                       ctx.half_flops)
    logits = tokens * ctx.model.vocab_size / t
    ce_f, ce_b = elementwise.cross_entropy_bytes_per_logit(ctx)
    return gemm, logits * ce_f / ctx.memory_bandwidth_Bps, logits * ce_b / ctx.memory_bandwidth_Bps


def head_forward_time_s(ctx: CostContext, tokens: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """Final norm, LM-head GEMM and cross-entropy forward of one micro-batch on the last pipeline chunk."""
    gemm, ce_f, _ = _head_parts_s(ctx, tokens, tp)
    return gemm + ce_f


def head_time_s(ctx: CostContext, tokens: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """Forward + backward of the LM head and the loss for one micro-batch (GEMM backward 2x its forward)."""
    gemm, ce_f, ce_b = _head_parts_s(ctx, tokens, tp)
    return (1 + BACKWARD_TO_FORWARD) * gemm + ce_f + ce_b


def head_weight_grad_time_s(ctx: CostContext, tokens: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """The LM head's weight-gradient GEMM of one micro-batch (as many FLOPs as its forward GEMM), part of
    `head_time_s`. Zero-bubble schedules run it in the last rank's W pass, as they do the decoder layers' weight
    gradients: Qi et al.'s fork defers every `wgrad_gemm_accum` of a linear layer, the output layer's included
    (megatron/core/tensor_parallel/layers.py 402-420 and megatron/core/weight_grad_store.py 52-65 at 82b2eb67);
    torch's `stage_backward_weight` computes the gradients of all of a stage's parameters."""
    gemm, _, _ = _head_parts_s(ctx, tokens, tp)
    return gemm


def embedding_forward_time_s(ctx: CostContext, tokens: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """Embedding lookup: memory-bound gather of h elements per token (vocab-parallel split over tp)."""
    return tokens.astype(float) * ctx.model.hidden_size * ctx.act_bytes * 2 / ctx.memory_bandwidth_Bps


def embedding_time_s(ctx: CostContext, tokens: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """Forward + backward of the embedding for one micro-batch on the first pipeline chunk.

    The backward (`embedding_dense_backward`) writes a dense V/tp x h gradient every micro-batch and accumulates it
    into the parameter's: about 3 x V/tp x h elements moved (docs/cost_sources.md 2.3), on GPUs; CPU runs keep the
    reference count (their measured overhead is a residual over it)."""
    fwd = embedding_forward_time_s(ctx, tokens, tp)
    if ctx.gpu_kind_is_cpu:
        return fwd * (1 + BACKWARD_TO_FORWARD)
    dense = 3.0 * ctx.model.vocab_size / tp.astype(float) * ctx.model.hidden_size * ctx.act_bytes
    return fwd * (1 + BACKWARD_TO_FORWARD) + dense / ctx.memory_bandwidth_Bps


def recompute_time_s(recompute: np.ndarray, lt_time: LayerTime) -> np.ndarray:
    """Extra forward seconds per layer and micro-batch for each recompute policy code
    (`planner.layout.table.RecomputeCode`): the attention core (selective), the op policy's share, or the share of
    layers recomputed whole times a forward (full: all; every-k: 1/k, the mean over the rank's layers)."""
    code = np.asarray(recompute)
    whole = FULL_RECOMPUTE_SHARE[code] * lt_time.fwd_s
    return first_match([code == RecomputeCode.SELECTIVE, code == RecomputeCode.OP],
                       [lt_time.attn_fwd_s, lt_time.op_recompute_s], whole)
