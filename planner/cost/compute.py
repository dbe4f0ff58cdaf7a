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
- MoE: the router GEMM (replicated) and the top-k routed experts (expert GEMMs of T*top_k*ep/E tokens each);
- memory-bound element-wise work (norms, residual adds, RoPE, activation function): bytes / HBM bandwidth.
  Elements touched per token, forward: 2 norms (read+write h: 4h), 2 residual adds (3h each: 6h), RoPE on
  Q and K (read+write: 2(q+kv) dims), the MLP activation (SwiGLU reads 2f writes f: 3f; GELU 2f), each
  divided by tp (or by tp only for the TP-local part when sequence parallelism is off: norms and residuals
  are replicated across TP ranks without SP, Korthikanti et al. 2022 Sec. 4.2.2).
Backward costs 2x forward (input and weight gradients, the standard 1:2 ratio, Narayanan et al. 2021
Sec. 5.1 Eq. 3 derivation); zero-bubble schedules split it into B (input grads) and W (weight grads), equal
halves (Qi et al. 2023 Sec. 2). Full recomputation adds one forward of every layer; selective adds only the
attention core (Korthikanti et al. 2022 Sec. 4.2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost import overhead
from planner.cost.context import CostContext, LayerType
from planner.cost.efficiency import gemm_time_s

BACKWARD_TO_FORWARD = 2.0  # Narayanan et al. 2021 Sec. 5.1: backward = 2x forward FLOPs




def _elementwise_elements_per_token(ctx: CostContext) -> tuple[float, float]:
    """(elements split by TP always, elements split by TP only with SP) per token per layer, forward."""
    m = ctx.model
    q_dim = m.num_heads * m.head_dim
    kv_dim = m.num_kv_heads * m.head_dim
    f = m.ffn_hidden_size if m.moe is None else max(m.ffn_hidden_size, 1)
    act = 3 * f if m.mlp == "swiglu" else 2 * f
    rope = 2 * (q_dim + kv_dim) if m.position == "rope" else 0
    tp_local = act + rope
    replicated_without_sp = (4 + 6) * m.hidden_size
    return float(tp_local), float(replicated_without_sp)


@dataclass
class LayerTime:
    """Seconds of one layer for one micro-batch on one GPU (arrays over layouts)."""

    fwd_s: np.ndarray  # forward, all parts
    bwd_s: np.ndarray  # backward (input + weight gradients)
    attn_fwd_s: np.ndarray  # the attention core's forward (overlap window for CP; what selective recompute redoes)


# Unfused attention (no FlashAttention): bytes per attention-score element (fp16) moved by the element-wise
# kernels around the two batched GEMMs, forward: QK^T writes the scores (2), the fused scale-mask-softmax reads
# and writes them (4), dropout reads, writes and stores a 1-byte mask (5), attention x V reads them (2) = 13;
# backward: dropout and softmax backward read the probabilities, masks and incoming gradients and write the
# gradients, about the same 13 bytes (Megatron-LM 2021 fused softmax kernels; Korthikanti et al. 2022 Sec. 4.1
# counts the same tensors as stored activations: 2as^2b + as^2b + 2as^2b).
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
    for f_tok, split in zip(lt.gemm_flops_per_token, lt.gemm_split_by_tp):
        gemm += gemm_time_s(f_tok * tokens / (t if split else 1.0), peak, mx, half)
    if lt.router_flops_per_token:
        gemm += gemm_time_s(lt.router_flops_per_token * tokens, peak, mx, half)
    if lt.expert_flops_per_token:
        moe = ctx.model.moe
        local_experts = moe.num_experts / ep
        tokens_per_expert = tokens * ep * moe.top_k / moe.num_experts
        one = gemm_time_s(lt.expert_gemm_flops_per_token_one_expert * tokens_per_expert / t, peak, mx, half)
        gemm += one * local_experts
    attn_flops = lt.attn_flops_per_token * tokens / t
    if ctx.flash_attention:
        # One fused kernel per micro-batch at the attention kernel's own efficiency (GPU profile), which is
        # below the GEMM plateau: softmax and masking run between the two matmuls inside the kernel.
        attn_eff = ctx.attention_efficiency
        attn_f = np.where(attn_flops > 0, (attn_flops + ctx.attention_half_flops) / (peak * attn_eff), 0.0)
        attn_b = FLASH_BACKWARD_TO_FORWARD * attn_f
    else:
        # Two batched GEMMs on the GEMM curve plus the element-wise passes over the full score matrix.
        scores = tokens * ctx.model.num_heads * ctx.workload.seq_len / t  # score elements (unfused: full, not causal)
        attn_f = gemm_time_s(attn_flops, peak, mx, half) + scores * UNFUSED_SCORE_BYTES_FWD / ctx.memory_bandwidth_Bps
        attn_b = 2 * gemm_time_s(attn_flops, peak, mx, half) + scores * UNFUSED_SCORE_BYTES_BWD / ctx.memory_bandwidth_Bps
    local_elems, replicated_elems = _elementwise_elements_per_token(ctx)
    elems = tokens * (local_elems / t + np.where(sp, replicated_elems / t, replicated_elems))
    elementwise = elems * ctx.act_bytes / ctx.memory_bandwidth_Bps
    fwd = gemm + attn_f + elementwise
    bwd = BACKWARD_TO_FORWARD * (gemm + elementwise) + attn_b
    # Host-side framework time per layer and micro-batch (measured by meshplan calibrate; 0 without it).
    o_fwd, o_bwd = overhead.layer_overhead_s(ctx, tokens, tp)
    fwd, bwd = overhead.with_overhead(ctx, fwd, o_fwd), overhead.with_overhead(ctx, bwd, o_bwd)
    return LayerTime(fwd_s=fwd, bwd_s=bwd, attn_fwd_s=attn_f)


def head_forward_time_s(ctx: CostContext, tokens: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """Final norm, LM-head GEMM and fp32 cross-entropy of one micro-batch on the last pipeline chunk."""
    t = tp.astype(float)
    tokens = tokens.astype(float)
    gemm = gemm_time_s(ctx.logits_flops_per_token * tokens / t, ctx.peak_flops, ctx.max_fraction, ctx.half_flops)
    # Cross-entropy in fp32 over V/tp logits: read logits, write softmax, read for loss (3 passes x 4 bytes).
    ce = tokens * (ctx.model.vocab_size / t) * 3 * 4 / ctx.memory_bandwidth_Bps
    return gemm + ce


def embedding_forward_time_s(ctx: CostContext, tokens: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """Embedding lookup: memory-bound gather of h elements per token (vocab-parallel split over tp)."""
    return tokens.astype(float) * ctx.model.hidden_size * ctx.act_bytes * 2 / ctx.memory_bandwidth_Bps


def recompute_time_s(recompute: np.ndarray, fwd_s: np.ndarray, attn_s: np.ndarray) -> np.ndarray:
    """Extra forward seconds per layer and micro-batch for each recompute policy (0 none, 1 selective, 2 full)."""
    return np.select([recompute == 2, recompute == 1], [fwd_s, attn_s], 0.0)
