"""FLOPs per token and GEMM shapes of a `ModelSpec`.

Conventions (all per token, forward unless named otherwise):
- An (m x k) @ (k x n) matmul costs 2*m*k*n FLOP. Only matmuls are counted; norms, activations, softmax,
  RoPE and bias adds are left out (O(h) per token), as in Narayanan 2021 Eq.3 and Korthikanti 2022 Eq.7.
- Attention core (QK^T and attention x V). With `causal=True` (the default) a query at position j
  (0-based) attends to j+1 keys, so the average over a sequence of s tokens is (s+1)/2 keys: the work a
  causal kernel (FlashAttention) must do. With `causal=False` every query attends to all s keys, which is
  the accounting of Megatron-LM: Narayanan Eq.3 and Korthikanti Eq.7 reproduce exactly with causal=False
  (tests/unit/test_model_flops.py). Use causal=False to compare an MFU with Megatron's published numbers.
- Backward = 2 x forward (gradients w.r.t. inputs and weights), so model FLOPs = 3 x forward.
  Hardware FLOPs add what recomputation repeats: "full" = one more forward of every layer (not the
  logits: Megatron checkpoints the transformer layers only), "selective" = one more forward of the
  attention core (Korthikanti Sec.4.2 recomputes QK^T, softmax, dropout and attention x V), "op" = the
  matmuls per-op selective checkpointing recomputes (every second one in call order: op_recomputed_share).
  Note: Korthikanti Eq.8 writes hardware FLOPs as 72BLsh^2(1 + s/3h + V/12hL), which charges the selective
  recompute 12Bs^2h per layer, three times the attention core's forward 4Bs^2h. We count the one extra
  forward (4Bs^2h), i.e. 72BLsh^2(1 + 2s/9h + V/12hL) with causal=False; Eq.8 is higher by 8BLs^2h.
- MLA is counted in its training form (no weight absorption): the down/up projections of q and kv are
  matmuls per token, the attention core uses qk_nope+qk_rope per head for QK^T and v_head_dim for
  attention x V. This is exact for matmuls; the latent RMSNorms and RoPE are left out like all O(h) work.
- MoE: `moe_router` = the h x E router matmul; `moe_experts` = top_k routed experts per token (the
  average; real per-expert loads vary); shared experts are reported under `mlp`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, NamedTuple

from planner.layout.names import RECOMPUTE_EVERY, RECOMPUTE_NAMES, recomputes_layer_whole

if TYPE_CHECKING:
    from planner.model.spec import ModelSpec

RECOMPUTE_POLICIES = RECOMPUTE_NAMES
"""The recomputation policies (`planner.layout.names`)."""


@dataclass(frozen=True)
class LayerFlops:
    """Forward FLOPs per token of one decoder layer, by part. `total` uses `attn_scores` (causal or not,
    as requested); `attn_scores_full` is always the non-causal value."""

    qkv_proj: int
    attn_scores: int
    attn_scores_full: int
    attn_out_proj: int
    mlp: int
    moe_router: int
    moe_experts: int
    op_recompute: int = 0  # matmul FLOPs recompute policy "op" repeats (op_recomputed_share)
    total: int = field(init=False)

    def __post_init__(self) -> None:
        total = (
            self.qkv_proj
            + self.attn_scores
            + self.attn_out_proj
            + self.mlp
            + self.moe_router
            + self.moe_experts
        )
        object.__setattr__(self, "total", total)


class TrainingFlops(NamedTuple):
    """Training FLOPs per token: model (3 x forward, for MFU) and hardware (plus recomputation, for HFU)."""

    model_flops: int
    hardware_flops: int


def _check_seq_len(spec: ModelSpec, seq_len: int) -> None:
    if not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"seq_len={seq_len!r} must be a positive integer")
    if spec.position == "learned" and seq_len > spec.max_seq_len:
        raise ValueError(
            f"seq_len={seq_len} exceeds max_seq_len={spec.max_seq_len} of {spec.name!r} (learned positions)"
        )


def mlp_flops(spec: ModelSpec, ffn: int) -> int:
    """Forward FLOPs per token of one MLP of width ffn: 3 matmuls (swiglu) or 2 (gelu) of h x ffn."""
    return (6 if spec.mlp == "swiglu" else 4) * spec.hidden_size * ffn


def _attention_dims(spec: ModelSpec) -> tuple[int, int]:
    """(sum over heads of the QK^T dot-product length, sum over heads of the value length)."""
    if spec.attention == "mla":
        m = spec.mla
        assert m is not None
        return spec.num_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim), spec.num_heads * m.v_head_dim
    return spec.num_heads * spec.head_dim, spec.num_heads * spec.head_dim


def _projection_flops(spec: ModelSpec) -> tuple[int, int]:
    """(q/k/v projections, output projection) forward FLOPs per token."""
    h, nh = spec.hidden_size, spec.num_heads
    if spec.attention == "mla":
        m = spec.mla
        assert m is not None
        qk_dim = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = 2 * h * nh * qk_dim if m.q_lora_rank is None else 2 * m.q_lora_rank * (h + nh * qk_dim)
        kv = 2 * h * (m.kv_lora_rank + m.qk_rope_head_dim) + 2 * m.kv_lora_rank * nh * (
            m.qk_nope_head_dim + m.v_head_dim
        )
        return q + kv, 2 * nh * m.v_head_dim * h
    q_out, kv_out = nh * spec.head_dim, spec.num_kv_heads * spec.head_dim
    return 2 * h * (q_out + 2 * kv_out), 2 * q_out * h


def layer_forward_flops(spec: ModelSpec, is_moe: bool, seq_len: int, causal: bool = True) -> LayerFlops:
    _check_seq_len(spec, seq_len)
    qk, v = _attention_dims(spec)
    per_key = 2 * (qk + v)  # QK^T and attention x V, per (query, key) pair
    full = per_key * seq_len
    # Average keys per query under a causal mask: (1 + 2 + ... + s) / s = (s+1)/2; per_key is even.
    causal_avg = per_key // 2 * (seq_len + 1)
    qkv, out = _projection_flops(spec)
    router = experts = 0
    if is_moe:
        moe = spec.moe
        assert moe is not None
        router = 2 * spec.hidden_size * moe.num_experts
        experts = moe.top_k * mlp_flops(spec, moe.expert_ffn_hidden_size)
        mlp = moe.num_shared_experts * mlp_flops(spec, moe.expert_ffn_hidden_size)
    else:
        mlp = mlp_flops(spec, spec.ffn_hidden_size)
    return LayerFlops(
        qkv_proj=qkv,
        attn_scores=causal_avg if causal else full,
        attn_scores_full=full,
        attn_out_proj=out,
        mlp=mlp,
        moe_router=router,
        moe_experts=experts,
        op_recompute=int(op_recompute_flops(spec, is_moe)),
    )


def recompute_flops(layer: LayerFlops, recompute: str, index: int | None = None) -> int:
    """Forward FLOPs per token repeated by the recompute policy for layer number `index` (0-based). The every-k
    policies recompute some layers whole and leave the others (`names.recomputes_layer_whole`), so they need the
    index; the other policies treat every layer alike."""
    if recompute not in RECOMPUTE_POLICIES:
        raise ValueError(f"recompute={recompute!r} is not one of {', '.join(RECOMPUTE_POLICIES)}")
    if recompute == "selective":
        return layer.attn_scores
    if recompute == "op":
        return layer.op_recompute
    if recompute in RECOMPUTE_EVERY and index is None:
        raise ValueError(f"recompute={recompute!r} recomputes only some layers: give the layer's index")
    return layer.total if recomputes_layer_whole(recompute, 0 if index is None else index) else 0


def _layers(spec: ModelSpec, seq_len: int, causal: bool) -> list[LayerFlops]:
    """One LayerFlops per layer; computed once per layer kind (dense, MoE)."""
    kinds = {False: None, True: None}
    out = []
    for i in range(spec.num_layers):
        moe = spec.is_moe_layer(i)
        if kinds[moe] is None:
            kinds[moe] = layer_forward_flops(spec, moe, seq_len, causal=causal)
        out.append(kinds[moe])
    return out


def forward_flops_per_token(spec: ModelSpec, seq_len: int, causal: bool = True) -> int:
    layers = _layers(spec, seq_len, causal)
    return sum(f.total for f in layers) + spec.logits_forward_flops()


def training_flops_per_token(
    spec: ModelSpec, seq_len: int, recompute: str, causal: bool = True
) -> TrainingFlops:
    layers = _layers(spec, seq_len, causal)
    forward = sum(f.total for f in layers) + spec.logits_forward_flops()
    model = 3 * forward
    return TrainingFlops(model, model + sum(recompute_flops(f, recompute, i) for i, f in enumerate(layers)))


def _split(value: int, tp: int, what: str) -> int:
    if value % tp:
        raise ValueError(f"{what}={value} is not divisible by tp={tp}; choose a tp that divides it")
    return value // tp


# How Megatron splits each weight GEMM of `layer_gemms` over TP, by name (the one home of this vocabulary): the
# MLA down-projections and the MoE router are replicated, the output and down projections row-parallel (input
# split, output all-reduced or reduce-scattered), the rest column-parallel (output split; the backward reduces the
# input gradient over TP).
REPLICATED_GEMMS = frozenset({"mla_q_down", "mla_kv_down", "moe_router"})
ROW_PARALLEL_SUFFIXES = ("_out", "_down")


def gemm_tp_split(name: str) -> Literal["column", "row", "replicated"]:
    """How Megatron splits the `layer_gemms` GEMM `name` over TP (see REPLICATED_GEMMS)."""
    if name in REPLICATED_GEMMS:
        return "replicated"
    return "row" if name.endswith(ROW_PARALLEL_SUFFIXES) else "column"


def layer_gemms(spec: ModelSpec, is_moe: bool, tokens: int, tp: int = 1) -> list[tuple[str, int, int, int]]:
    """Forward weight matmuls (name, m, k, n) of one layer on `tokens` tokens, per TP rank.

    Megatron split: q/k/v, gate/up and MLA up-projections are column-parallel (n / tp); output and down
    projections row-parallel (k / tp); MLA down-projections and the MoE router are replicated (no split).
    Not listed: the attention core (QK^T, attention x V), a batched per-head kernel whose FLOPs are
    `LayerFlops.attn_scores`. Routed experts are one grouped GEMM per projection with m = tokens * top_k
    token-expert pairs (average rows per expert: m / num_experts). For every layer,
    sum(2*m*k*n) at tp=1 == (total - attn_scores) * tokens of `layer_forward_flops`.
    """
    if not isinstance(tokens, int) or tokens < 1:
        raise ValueError(f"tokens={tokens!r} must be a positive integer")
    if not isinstance(tp, int) or tp < 1:
        raise ValueError(f"tp={tp!r} must be a positive integer")
    h, nh = spec.hidden_size, spec.num_heads
    heads = _split(nh, tp, "num_heads")
    gemms: list[tuple[str, int, int, int]] = []
    if spec.attention == "mla":
        m = spec.mla
        assert m is not None
        qk_dim = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank is None:
            gemms.append(("attn_q", tokens, h, heads * qk_dim))
        else:
            gemms.append(("mla_q_down", tokens, h, m.q_lora_rank))
            gemms.append(("mla_q_up", tokens, m.q_lora_rank, heads * qk_dim))
        gemms.append(("mla_kv_down", tokens, h, m.kv_lora_rank + m.qk_rope_head_dim))
        gemms.append(("mla_kv_up", tokens, m.kv_lora_rank, heads * (m.qk_nope_head_dim + m.v_head_dim)))
        gemms.append(("attn_out", tokens, heads * m.v_head_dim, h))
    else:
        kv_heads = _split(spec.num_kv_heads, tp, "num_kv_heads")
        d = spec.head_dim
        gemms += [
            ("attn_q", tokens, h, heads * d),
            ("attn_k", tokens, h, kv_heads * d),
            ("attn_v", tokens, h, kv_heads * d),
            ("attn_out", tokens, heads * d, h),
        ]
    if not is_moe:
        gemms += _mlp_gemms(spec, "mlp", tokens, _split(spec.ffn_hidden_size, tp, "ffn_hidden_size"))
        return gemms
    moe = spec.moe
    assert moe is not None
    gemms.append(("moe_router", tokens, h, moe.num_experts))
    if moe.num_shared_experts:
        shared = _split(
            moe.num_shared_experts * moe.expert_ffn_hidden_size,
            tp,
            "num_shared_experts*expert_ffn_hidden_size",
        )
        gemms += _mlp_gemms(spec, "moe_shared", tokens, shared)
    expert = _split(moe.expert_ffn_hidden_size, tp, "moe.expert_ffn_hidden_size")
    gemms += _mlp_gemms(spec, "moe_expert", tokens * moe.top_k, expert)
    return gemms


def _mlp_gemms(spec: ModelSpec, prefix: str, tokens: int, ffn: int) -> list[tuple[str, int, int, int]]:
    h = spec.hidden_size
    up = (
        [(f"{prefix}_gate", tokens, h, ffn), (f"{prefix}_up", tokens, h, ffn)]
        if spec.mlp == "swiglu"
        else [(f"{prefix}_up", tokens, h, ffn)]
    )
    return [*up, (f"{prefix}_down", tokens, ffn, h)]


def logits_gemm(spec: ModelSpec, tokens: int, tp: int = 1) -> tuple[str, int, int, int]:
    """LM head (tokens x h) @ (h x V/tp); V/tp rounded up (Megatron pads the vocabulary to a multiple of tp)."""
    if tokens < 1 or tp < 1:
        raise ValueError(f"tokens={tokens} and tp={tp} must be positive")
    return ("lm_head", tokens, spec.hidden_size, -(-spec.vocab_size // tp))


# Which weight matmuls per-op selective checkpointing (recompute policy "op") recomputes.
#
# The rule (TorchTitan `SelectiveAC`, torchtitan/distributed/activation_checkpoint.py: `_get_custom_policy`, and
# executor/ac.py, which implements it): inside one decoder layer every aten.mm is counted in call order and every
# second one (counts 2, 4, 6, ...) is recomputed, the rest saved. The call order is the executor's (executor/model.py
# `Attention.forward` then `FeedForward.forward`), which is `layer_gemms`' order: q, k, v, out, then gate (w1), up
# (w3), down (w2); so a Llama layer recomputes k, out and up, a GELU layer k, out and down. Two exceptions:
# - a GEMM with a bias runs as aten.addmm (nn.Linear on a folded 3-D input), which is saved and not counted
#   (TorchTitan 0.3's save set is torch's compute-intensive op list, addmm included);
# - the MoE router's matmul is always recomputed and not counted (TorchTitan's default
#   `force_recompute_mm_shapes_by_fqns = ["moe.router.gate"]`).
# Routed and shared experts run one small MLP per expert (executor/moe.py), so the alternation runs across the
# experts' matmuls: each expert GEMM kind is recomputed on about half the experts (exactly half with an even count
# of local experts); the cost model takes 1/2 for them.
BIASED_WHEN_QKV_BIAS = ("attn_q", "attn_k", "attn_v")


def _biased(spec: ModelSpec, name: str) -> bool:
    if name == "moe_router":
        return False
    return spec.linear_bias or (spec.qkv_bias and name in BIASED_WHEN_QKV_BIAS)


def op_recomputed_share(spec: ModelSpec, is_moe: bool) -> list[tuple[str, int, int, int, float]]:
    """`layer_gemms(spec, is_moe, 1)` rows (name, rows per token, k, n at tp = 1), each with the share of its
    calls that "op" recomputes (1, 0 or 1/2 for experts; see the comment above)."""
    out, count = [], 0
    for name, m, k, n in layer_gemms(spec, is_moe, 1, tp=1):
        if name == "moe_router":
            share = 1.0
        elif _biased(spec, name):
            share = 0.0
        elif name.startswith(("moe_expert", "moe_shared")):
            share = 0.5
        else:
            count += 1
            share = 1.0 if count % 2 == 0 else 0.0
        out.append((name, m, k, n, share))
    return out


def op_recompute_flops(spec: ModelSpec, is_moe: bool) -> float:
    """Forward matmul FLOPs per token that "op" repeats in one layer's backward."""
    return sum(2.0 * m * k * n * share for _, m, k, n, share in op_recomputed_share(spec, is_moe))
