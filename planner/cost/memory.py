"""Memory per pipeline rank: weights, gradients, optimizer state, activations, logits, buffers, reserve.

Model states (Rajbhandari et al. 2020, ZeRO, Sec. 3.1 / Fig. 1; mixed-precision Adam, K = 12):
  16-bit weights 2 B, 16-bit gradients 2 B (Megatron's bf16 runs: an fp32 gradient buffer, 4 B, unless they
  reduce in bf16: `context.GRAD_BYTES_MEGATRON_FP32_BUFFER`), fp32 master + Adam moments 12 B per parameter; ZeRO-1 shards the
  12 B over the DP sharding group, ZeRO-2 also the gradients, ZeRO-3 also the weights (without pipeline
  parallelism; with it ZeRO-2/3 hold weights and gradients like ZeRO-1, see `state_sharding_stage`). fp32 runs (CPU):
  4 + 4 + 8 B. Parameters on a rank: its layers' dense parameters / tp plus routed experts / (tp * ep), the
  embedding (vocab-parallel, / tp) on rank 0 and the final norm + LM head (/ tp) on the last rank. ZeRO shards
  every dense state over dp_shard x cp (FSDP over TorchTitan's dp_shard_cp mesh, Megatron's dp x cp distributed
  optimizer, meshplan run's FSDP2 mesh: `expert_groups.state_shard_ranks`) and the experts' states over the
  dp_shard x cp ranks outside the rank's EP group (EP borrows its ranks from the data axes, TorchTitan-style:
  planner.layout.expert_groups).

Activations per layer and micro-batch (Korthikanti et al. 2022 Sec. 4, Table 2; 16-bit values, 1-byte
dropout masks), generalised to GQA and gated MLPs; s = seq/cp, b = micro-batch, h hidden, f ffn, a heads,
g = kv_heads/heads:
  attention: QKV input 2sbh, Q 2sbh, K and V 2sbh*g each, projection input 2sbh, dropout mask sbh,
             and without FlashAttention the softmax output 2as^2b, its dropout mask as^2b and output 2as^2b
             (5as^2b); FlashAttention stores only the output and the log-sum-exp (Dao et al. 2022 Sec. 3.1);
  MLP:       input 2sbh, GELU: fc1 output 2sbf + GELU output 2sbf; SwiGLU: gate and up outputs 4sbf + product
             input 2sbf; dropout mask sbh; (GELU with f = 4h gives the paper's 19sbh)
  norms:     2 x 2sbh.
  TP without SP divides only the TP-local parts; with SP everything is divided by tp (Table 2). Selective
  recomputation drops the 5as^2b term; full recomputation keeps only the layer input 2sbh (/tp with SP); the
  every-k policies keep that on 1/k of the layers and everything on the others (the per-layer value is the mean).
  Per-op selective recomputation ("op", executor/ac.py, TorchTitan SelectiveAC) keeps exactly what its policy
  saves, at their executor shapes and dtypes (`op_activation_bytes_per_token`): the layer input, the outputs of
  the matmuls it does not recompute (planner.model.flops.op_recomputed_share), the SDPA output and its fp32 log-sum-exp, and
  under SP the reduce-scatter outputs.
  MoE layers: the routed rows, the experts' activations and the probability product instead of the dense
  MLP's (`moe_activation_bytes_per_token`); the per-layer value is the mean over the layer types.
  Eager PyTorch (runtime "pytorch") keeps more under none / selective: the norms' fp32 statistics, the SwiGLU
  SiLU output, the GQA-repeated K and V and the flash log-sum-exp, the MoE routing tensors
  (`eager_extra_bytes_per_token`; docs/cost_sources.md 6e); megatron and pytorch-compile keep the count above.
  Dropout masks exist only for dropout models. Values are in bytes for 16-bit activations and scale by
  act_bytes/2 for fp32 runs.
In-flight micro-batches per pipeline rank: each schedule's own, in the schedule registry
(planner/layout/schedules.py); `cost.assemble.rank_memory` multiplies them in.
Sent stage outputs: a runtime that keeps each output a stage has sent until that micro-batch's backward
(`RuntimeCosts.sent_stage_outputs`, `Workload.sent_stage_outputs`: torch.distributed.pipelining, Megatron-LM 2021,
DeepSpeed's pipeline engine; runtime.py cites the code) holds, per sent output in flight
(`schedules.inflight_sent_outputs`), the stage's local output beyond the activations above, which autograd does not
keep (the last layer's residual sum): a s*b*h bytes, / tp with SP (`sent_output_bytes`); DeepSpeed's 1/tp slice
a s*b*h / tp; none where Megatron frees it after the send.
Receive buffers: a runtime that allocates an activation and a gradient receive buffer for every micro-batch of
the step and keeps them (`RuntimeCosts.step_recv_buffers`: torch.distributed.pipelining; runtime.py cites the
code) holds, per pipeline rank, the buffers beyond the in-flight micro-batches' stage inputs the activations
above already count (`schedules.extra_recv_buffers`), each the stage's local input or output: a s*b*h bytes,
/ tp with SP (`recv_buffer_bytes`); counted as buffers, not activations. None where Megatron allocates them per
transfer.
Logits: fp32 logits and their gradient, 2 x 4 B x s*b*V/tp, on the last rank (Korthikanti App. A's extra term);
Megatron's loss holds 6 B per logit (16-bit logits + one fp32 copy: `RuntimeCosts.logits_bytes_per_logit`).
FSDP/ZeRO-3 keeps two gathered layers (current + prefetch) of 16-bit weights and their gradients as buffers.
Reserve: 1 GiB for the CUDA context and NCCL buffers plus 5 % of capacity for allocator fragmentation
(PyTorch CUDA caching allocator notes; NCCL buffer size NCCL_BUFFSIZE 4 MiB per channel and peer).
"""

from __future__ import annotations

import numpy as np

from planner.cost.context import CostContext
from planner.cost.moe_dispatch import ep_dispatch_tokens
from planner.cost.runtime import runtime_costs
from planner.layout.expert_groups import state_shard_ranks
from planner.layout.table import FULL_RECOMPUTE_SHARE, RecomputeCode
from planner.model.flops import gemm_tp_split, op_recomputed_share

RESERVE_FIXED_BYTES = 2**30  # CUDA context + NCCL buffers, see module docstring
RESERVE_FRACTION = 0.05  # allocator fragmentation, see module docstring


def activation_bytes_per_layer(
    ctx: CostContext, b: np.ndarray, tp: np.ndarray, cp: np.ndarray, sp: np.ndarray, recompute: np.ndarray
) -> np.ndarray:
    """Stored activation bytes of one layer for one micro-batch (see module docstring); for the every-k policies
    the mean over the rank's layers: 1/k of them at full recomputation's bytes, the rest at none's."""
    recompute = np.asarray(recompute)
    whole = FULL_RECOMPUTE_SHARE[recompute]
    partial = (whole > 0) & (whole < 1)
    recompute = np.where(partial, RecomputeCode.NONE, recompute)  # the layers it keeps whole, blended in below
    m = ctx.model
    s = ctx.workload.seq_len / cp.astype(float)
    bf = b.astype(float)
    t = tp.astype(float)
    h = float(m.hidden_size)
    q_dim = float(m.num_heads * m.head_dim)
    kv_dim = float(m.num_kv_heads * m.head_dim)
    f = float(m.ffn_hidden_size)
    a = float(m.num_heads)
    drop = 1.0 if ctx.dropout else 0.0
    sbh = s * bf * h
    # TP-local parts (divided by t always)
    attn_local = s * bf * (2 * q_dim + 2 * 2 * kv_dim + 2 * q_dim)  # Q, K, V, projection input
    mlp_local = s * bf * _mlp_local_bytes_per_token(m, f)
    scores = np.zeros_like(sbh) if ctx.flash_attention else 5 * a * s * s * bf
    scores = np.where(recompute != RecomputeCode.NONE, 0.0, scores)
    # Replicated without SP: QKV input, MLP input, two norm inputs, dropout masks.
    replicated = sbh * (2 + 2 + 4 + 2 * drop)
    per_layer = (attn_local + mlp_local + scores) / t + np.where(sp, replicated / t, replicated)
    full = np.where(sp, 2 * sbh / t, 2 * sbh)
    if m.moe is not None:
        # The mean over the layer types, like the layer times (layer_costs.layer_costs): MoE layers replace the dense
        # MLP's local activations with their routed rows' (`moe_activation_bytes_per_token`).
        w = ctx.layer_type_counts().astype(float)
        moe_share = sum(wk for wk, lt in zip(w / w.sum(), ctx.layer_types) if lt.expert_flops_per_token)
        routed = moe_activation_bytes_per_token(ctx, tp, sp) - _mlp_local_bytes_per_token(m, f) / t
        per_layer = per_layer + moe_share * s * bf * routed
    per_layer = per_layer * (ctx.act_bytes / 2.0)
    if ctx.workload.runtime == "pytorch":
        per_layer = per_layer + s * bf * eager_extra_bytes_per_token(ctx, tp, sp, recompute)
    full = full * (ctx.act_bytes / 2.0)
    per_layer = np.where(recompute == RecomputeCode.FULL, full, per_layer)
    if np.any(recompute == RecomputeCode.OP):
        w = ctx.layer_type_counts().astype(float)
        op = sum(wk * op_activation_bytes_per_token(ctx, bool(lt.expert_flops_per_token), tp, sp)
                 for wk, lt in zip(w / w.sum(), ctx.layer_types))
        per_layer = np.where(recompute == RecomputeCode.OP, s * bf * op, per_layer)
    return np.where(partial, whole * full + (1 - whole) * per_layer, per_layer)


LSE_BYTES = 4  # SDPA's log-sum-exp is fp32 whatever the activation dtype (one per query and head)


def op_activation_bytes_per_token(ctx: CostContext, is_moe: bool, tp: np.ndarray, sp: np.ndarray) -> np.ndarray:
    """Bytes per local token one layer keeps for the backward under recompute policy "op" on one rank.

    The layer input (a h, / tp under SP); each kept matmul output (`op_recomputed_share`: rows per token x its
    local width; a row-parallel or replicated GEMM's output is full width, the partial sum before its TP
    reduction; the executor runs every routed row's expert GEMMs on each TP rank); the SDPA output
    (a x heads x head_dim / tp) and its log-sum-exp (LSE_BYTES x heads / tp); under SP the two reduce-scatter
    outputs (attention and MLP output projections, a h / tp each). a = activation bytes."""
    m = ctx.model
    a = float(ctx.act_bytes)
    t = np.asarray(tp, dtype=float)
    split_sp = np.asarray(sp, dtype=bool) & (t > 1)
    h = float(m.hidden_size)
    total = np.where(split_sp, a * h / t, a * h)
    for name, rows, _, n, share in op_recomputed_share(m, is_moe):
        column = gemm_tp_split(name) == "column"
        total = total + (1.0 - share) * rows * a * n / (t if column else 1.0)
        if split_sp.any() and gemm_tp_split(name) == "row" and not name.startswith("moe_expert"):
            total = total + np.where(split_sp, a * h / t, 0.0)
    heads = float(m.num_heads)
    v_dim = float(m.mla.v_head_dim if m.attention == "mla" else m.head_dim)
    return total + (a * heads * v_dim + LSE_BYTES * heads) / t


STAT_BYTES = 4  # norm statistics (rsqrt; LayerNorm also its mean) are fp32 whatever the activation dtype


def eager_extra_bytes_per_token(ctx: CostContext, tp: np.ndarray, sp: np.ndarray, recompute: np.ndarray) -> np.ndarray:
    """Bytes per local token one layer keeps beyond the Korthikanti count when eager PyTorch runs it (runtime
    "pytorch": `meshplan run`, TorchTitan without compile) under recompute "none" or "selective", on one rank
    (a = activation bytes; measured exactly on the executor's layer, tests/unit/test_recompute_saved_bytes.py):

    - each norm's statistics: CUDA's `aten._fused_rms_norm` saves input, weight and rstd (fp32 per token);
      `aten.native_layer_norm` saves mean and rstd: 2 x STAT_BYTES (x 2 for LayerNorm) per token, / tp under SP;
    - the SwiGLU product's second input: `F.silu(w1 x) * w3 x` saves both factors (MulBackward0), and SiLU saves
      its input (SiluBackward0): the silu output is a fourth width-f tensor beside w1 x, w3 x and the product
      (a f / tp; MoE layers at the routed experts' and shared experts' width, like the dense MLP's terms);
    - under "none" only (selective recomputes the attention core):
      - GQA: SDPA saves the K and V it is given, which `repeat_kv` (`repeat_interleave`) has expanded to the
        query heads: 2 a (q_dim - kv_dim) / tp more than the un-repeated K and V;
      - FlashAttention's log-sum-exp (`_scaled_dot_product_flash_attention` saves q, k, v, out, logsumexp):
        LSE_BYTES x heads / tp. The output is kept once: it is laid out (B, S, heads, hd), so the reshape that
        the output projection reads is a view of it.

    RoPE's fp32 products save only the (non-trainable) cos/sin tables, so its fp32 copies of q and k are freed.
    Megatron's fused kernels and compiled blocks keep the Korthikanti count (module docstring)."""
    m = ctx.model
    a = float(ctx.act_bytes)
    t = np.asarray(tp, dtype=float)
    split = np.where(np.asarray(sp, dtype=bool), t, 1.0)
    norms = 2 * STAT_BYTES * (2.0 if m.norm == "layernorm" else 1.0) / split
    width = float(m.ffn_hidden_size)
    if m.moe is not None:
        w = ctx.layer_type_counts().astype(float)
        moe_share = sum(wk for wk, lt in zip(w / w.sum(), ctx.layer_types) if lt.expert_flops_per_token)
        expert_width = float((m.moe.top_k + m.moe.num_shared_experts) * m.moe.expert_ffn_hidden_size)
        width = (1 - moe_share) * width + moe_share * expert_width
    silu = a * width / t if m.mlp == "swiglu" else 0.0
    routing = moe_share * eager_routing_bytes_per_token(ctx, tp, sp) if m.moe is not None else 0.0
    q_dim, kv_dim = float(m.num_heads * m.head_dim), float(m.num_kv_heads * m.head_dim)
    repeated = 2 * a * (q_dim - kv_dim) if m.attention != "mla" else 0.0
    lse = LSE_BYTES * float(m.num_heads) if ctx.flash_attention else 0.0
    core = np.where(np.asarray(recompute) == 0, (repeated + lse) / t, 0.0)
    return np.where(np.asarray(recompute) <= 1, norms + silu + routing + core, 0.0)


INDEX_BYTES = 8  # int64 indices (torch.topk's, the executor's token and slot of each routed row)


def eager_routing_bytes_per_token(ctx: CostContext, tp: np.ndarray, sp: np.ndarray) -> np.ndarray:
    """Bytes per token an MoE layer's routing keeps in eager PyTorch beyond `moe_activation_bytes_per_token`
    (executor/moe.py, per dispatched token like the probability product there):

    - the fp32 router probabilities (SoftmaxBackward0 saves its output): 4 E;
    - top-k: its fp32 values and int64 indices (TopkBackward0 saves the indices; the weights' normalization
      `w / w.sum()` saves both w and the sum): 4 k + INDEX_BYTES k + 4;
    - the token and slot index of each routed row (`served // k`, `served % k`, read by the gathers and
      `index_add`): 2 INDEX_BYTES k; the 16-bit router weight gathered per row (saved by `y * weight`): a k;
    - `index_add` keeps its source, the weighted rows: a k h."""
    m, moe = ctx.model, ctx.model.moe
    a, h, k, e = float(ctx.act_bytes), float(m.hidden_size), float(moe.top_k), float(moe.num_experts)
    t = np.asarray(tp, dtype=float)
    dispatched = ep_dispatch_tokens(ctx, np.ones_like(t), tp, sp)
    return (4 * e + 4 * k + INDEX_BYTES * k + 4 + 2 * INDEX_BYTES * k + a * k + a * k * h) * dispatched


def _mlp_local_bytes_per_token(m, width: float) -> float:
    """TP-local MLP activations per token at tp = 1 for an MLP of `width` (module docstring), 16-bit bytes."""
    return 4 * width if m.mlp == "gelu" else 6 * width


def moe_activation_bytes_per_token(ctx: CostContext, tp: np.ndarray, sp: np.ndarray) -> np.ndarray:
    """16-bit bytes per token an MoE layer's experts store for the backward beyond the MLP input (counted with
    the dense layer), on one rank.

    - the routed rows the experts' first GEMM reads, kept for its weight gradient (TE GroupedLinear / the
      executor's nn.Linear save their input): top_k rows of h per token, NOT divided by TP (Megatron-Core
      all-gathers the rows of the expert-TP group before the experts, token_dispatcher.py at df0430dbf2; the
      executor's experts take every routed row on every TP rank): 2 top_k h;
    - the experts' intermediate activations, the dense formula at width top_k x the expert width, / tp;
    - the product with the routing probabilities in unpermute (moe_utils.py `unpermute`; executor/moe.py
      `y * weights`) keeps its row input: top_k rows per dispatched token (T/tp under Megatron-Core's SP
      dispatch, `moe_dispatch.ep_dispatch_tokens`; T in the executor): 2 top_k h x dispatched / T;
    - shared experts: the dense formula at their width, / tp.
    """
    m, moe = ctx.model, ctx.model.moe
    t = np.asarray(tp, dtype=float)
    h, k, fe = float(m.hidden_size), float(moe.top_k), float(moe.expert_ffn_hidden_size)
    dispatched = ep_dispatch_tokens(ctx, np.ones_like(t), tp, sp)
    return (2 * k * h + _mlp_local_bytes_per_token(m, (k + moe.num_shared_experts) * fe) / t
            + 2 * k * h * dispatched)


def sent_output_bytes(ctx: CostContext, b: np.ndarray, tp: np.ndarray, cp: np.ndarray, sp: np.ndarray) -> np.ndarray:
    """Bytes a pipeline stage keeps per output it has sent, until that micro-batch's backward (module docstring):
    the runtime's `RuntimeCosts.sent_stage_outputs` unless the workload names its release's
    (`Workload.sent_stage_outputs`). "kept": the local output, s/cp x b x h activation values, / tp under sequence
    parallelism; "kept-tp-shard": / tp always; "freed": 0."""
    kept = getattr(ctx.workload, "sent_stage_outputs", None) or runtime_costs(ctx.workload).sent_stage_outputs
    whole = _stage_boundary_bytes(ctx, b, cp)
    if kept == "kept":
        return whole / np.where(np.asarray(sp, dtype=bool), np.asarray(tp, dtype=float), 1.0)
    if kept == "kept-tp-shard":
        return whole / np.asarray(tp, dtype=float)
    return np.zeros_like(whole)


def recv_buffer_bytes(ctx: CostContext, b: np.ndarray, tp: np.ndarray, cp: np.ndarray, sp: np.ndarray) -> np.ndarray:
    """Bytes of one pipeline receive buffer a runtime that allocates them per micro-batch of the step keeps
    (`RuntimeCosts.step_recv_buffers`; module docstring): the stage's local input (activation buffer) or output
    (gradient buffer), s/cp x b x h activation values, / tp under sequence parallelism (the residual stream is
    Shard(1) over TP then, Replicate without: executor/tp.py); 0 where the runtime allocates them per transfer."""
    whole = _stage_boundary_bytes(ctx, b, cp)
    if not runtime_costs(ctx.workload).step_recv_buffers:
        return np.zeros_like(whole)
    return whole / np.where(np.asarray(sp, dtype=bool), np.asarray(tp, dtype=float), 1.0)


def _stage_boundary_bytes(ctx: CostContext, b: np.ndarray, cp: np.ndarray) -> np.ndarray:
    """One micro-batch's hidden state at a stage boundary on one CP rank, before any TP split: s/cp x b x h
    activation values (what a stage sends, keeps after sending, or receives into)."""
    return (ctx.workload.seq_len / np.asarray(cp, dtype=float) * np.asarray(b, dtype=float)
            * float(ctx.model.hidden_size) * ctx.act_bytes)


def state_sharding_stage(zero: np.ndarray, pp: np.ndarray) -> np.ndarray:
    """The ZeRO stage whose memory a rank really has: under pipeline parallelism ZeRO-2 and ZeRO-3 hold
    weights and gradients like ZeRO-1. PyTorch's pipeline stages (torch.distributed.pipelining,
    `PipelineStage.backward_maybe_with_nosync`) turn FSDP's gradient sync and post-backward resharding off for
    every micro-batch and reduce once after the last one (`perform_reduce_grad`), so gradients accumulate
    unsharded and ZeRO-3 weights stay gathered after each backward; Megatron-Core has no ZeRO-2/3 and
    DeepSpeed's pipeline engine supports ZeRO-1 only."""
    return np.where((np.asarray(pp) > 1) & (np.asarray(zero) >= 2), 1, zero)


def model_state_bytes(
    ctx: CostContext,
    params: np.ndarray,
    zero: np.ndarray,
    dp_shard: np.ndarray,
    pp: np.ndarray,
    expert_params: np.ndarray | float = 0.0,
    expert_shard: np.ndarray | None = None,
    *,
    cp: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(weights, gradients, optimizer state) bytes for `params` parameters on one GPU.

    ZeRO shards the dense states over dp_shard x cp (`expert_groups.state_shard_ranks`, the executor's FSDP mesh
    and every runtime's: TorchTitan, Megatron). `expert_params` of them are routed experts, whose states ZeRO
    shards over `expert_shard` ranks instead: under expert parallelism, the dp_shard x cp ranks outside the EP
    group (planner.layout.expert_groups; the executor's expert mesh, executor.mesh; None: as the dense states)."""
    shard = np.asarray(state_shard_ranks(np.asarray(dp_shard, dtype=float), np.asarray(cp, dtype=float)), dtype=float)
    eshard = shard if expert_shard is None else np.asarray(expert_shard, dtype=float)
    stage = state_sharding_stage(zero, pp)
    dense = params - expert_params

    def held(bytes_per_param: float, sharded_from: int) -> np.ndarray:
        sharded = stage >= sharded_from
        return (dense * bytes_per_param / np.where(sharded, shard, 1.0)
                + expert_params * bytes_per_param / np.where(sharded, eshard, 1.0))

    return held(ctx.weight_bytes, 3), held(ctx.grad_bytes, 2), held(ctx.optimizer_bytes, 1)


def logits_bytes(ctx: CostContext, b: np.ndarray, tp: np.ndarray, cp: np.ndarray) -> np.ndarray:
    """Peak bytes of the logits and their loss on the last pipeline rank (`RuntimeCosts.logits_bytes_per_logit`)."""
    s = ctx.workload.seq_len / cp.astype(float)
    per_logit = runtime_costs(ctx.workload).logits_bytes_per_logit
    return per_logit * s * b.astype(float) * ctx.model.vocab_size / tp.astype(float)


def fsdp_buffer_bytes(ctx: CostContext, layer_params_local: np.ndarray, zero: np.ndarray, pp: np.ndarray) -> np.ndarray:
    """Two gathered layers (current + prefetched) of weights and unsharded gradients under ZeRO-3 (none under
    pipeline parallelism, where the whole stage stays gathered: `state_sharding_stage`)."""
    return np.where(state_sharding_stage(zero, pp) >= 3, 2 * layer_params_local * (ctx.weight_bytes + ctx.grad_bytes), 0.0)


def reserve_bytes(ctx: CostContext) -> float:
    if ctx.gpu_kind_is_cpu:
        return 0.0
    return RESERVE_FIXED_BYTES + RESERVE_FRACTION * ctx.memory_capacity_bytes
