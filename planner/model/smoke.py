"""The `--smoke` scale-down of a model: same layer structure, laptop-size widths.

`meshplan run --smoke` runs any plan on a laptop: the plan's layer partition and schedule still apply because
the number of layers and which of them are MoE are kept, while every width shrinks to something that trains in
seconds and stays divisible by the plan's TP, CP and EP degrees. The executor builds the smoke model from
`smoke_spec`; the CLI checks a `--data` file against `smoke_seq_len` before launching (both need the same
numbers, hence one home here, with no torch).
"""

from __future__ import annotations

import math
from typing import Any

SMOKE_HEAD_DIM = 8
"""Head width at smoke size: even (RoPE rotates pairs) and small."""
SMOKE_MIN_VOCAB = 256
"""Smoke vocabulary: 256 tokens (rounded up to a multiple of TP so the vocab-parallel embedding splits evenly)."""
SMOKE_SEQ_LEN = 64
"""Smoke sequence length: 64 tokens, rounded up to a multiple of 2*cp (CP load-balancing chunks)."""


def smoke_spec(spec: Any, *, tp: int, cp: int, ep: int = 1) -> Any:
    """A scaled-down copy of a `ModelSpec` (same class, validated) for a laptop run of the same layout.

    Kept: number of layers, the MoE layer pattern (freq, first_k_dense), MLP/norm/position kinds, biases and
    tying (so the layer partition, schedule and TP plan are exercised as planned). Shrunk: widths, heads
    (kv heads = the multiple of tp >= 2; heads = kv for MHA models, 2*kv for GQA ones, so both divide by
    tp), vocab, max_seq_len, and experts (4 routed, or the smallest multiple of ep from 4 up, never more than
    the model has; top-k at most 2, at most 1 shared). MLA attention becomes GQA: a smoke run checks the
    layout, not the architecture.
    """
    data = spec.model_dump()
    kv_heads = tp * math.ceil(2 / tp)
    num_heads = kv_heads if spec.num_kv_heads == spec.num_heads else 2 * kv_heads
    hidden = num_heads * SMOKE_HEAD_DIM
    data.update(
        name=f"{spec.name}-smoke",
        hidden_size=hidden,
        num_heads=num_heads,
        num_kv_heads=kv_heads,
        head_dim=SMOKE_HEAD_DIM,
        ffn_hidden_size=2 * hidden,
        vocab_size=tp * math.ceil(SMOKE_MIN_VOCAB / tp),
        max_seq_len=smoke_seq_len(cp),
        attention="mha_gqa",
        mla=None,
    )
    if spec.moe is not None:
        # ep divides num_experts (checked), so this multiple of ep stays <= num_experts.
        experts = ep * math.ceil(min(spec.moe.num_experts, 4) / ep)
        data["moe"] = {
            **data["moe"],
            "num_experts": experts,
            "top_k": min(spec.moe.top_k, 2, experts),
            "num_shared_experts": min(spec.moe.num_shared_experts, 1),
            "expert_ffn_hidden_size": 2 * hidden,
        }
    return type(spec).model_validate(data)


def smoke_seq_len(cp: int) -> int:
    step = 2 * cp
    return step * math.ceil(SMOKE_SEQ_LEN / step)
