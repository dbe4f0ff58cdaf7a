"""Hypothesis properties over random valid small specs (dense, GQA, MLA, MoE, biases, tied, learned).

Oracle: an independent enumeration of the weight tensors a PyTorch implementation would hold (name ->
shape, like a state_dict), summed. The counts under test are closed-form per component; the two must agree.
"""

from __future__ import annotations

from math import prod

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.model import ModelSpec


@st.composite
def specs(draw: st.DrawFn) -> ModelSpec:
    kv = draw(st.sampled_from([1, 2, 4]))
    heads = kv * draw(st.sampled_from([1, 2, 4]))
    layers = draw(st.integers(1, 6))
    mla = draw(st.booleans())
    fields: dict = {
        "name": "random",
        "num_layers": layers,
        "num_heads": heads,
        "ffn_hidden_size": draw(st.integers(1, 48)),
        "vocab_size": draw(st.integers(1, 97)),
        "max_seq_len": draw(st.integers(1, 64)),
        "mlp": draw(st.sampled_from(["swiglu", "gelu"])),
        "norm": draw(st.sampled_from(["rmsnorm", "layernorm"])),
        "position": draw(st.sampled_from(["rope", "learned"])),
        "tied_embeddings": draw(st.booleans()),
    }
    if mla:
        fields["hidden_size"] = draw(st.integers(1, 40))
        fields["attention"] = "mla"
        fields["mla"] = {
            "q_lora_rank": draw(st.one_of(st.none(), st.integers(1, 12))),
            "kv_lora_rank": draw(st.integers(1, 12)),
            "qk_nope_head_dim": draw(st.integers(1, 6)),
            "qk_rope_head_dim": draw(st.integers(1, 4)),
            "v_head_dim": draw(st.integers(1, 6)),
        }
    else:
        fields["num_kv_heads"] = kv
        head_dim = draw(st.integers(1, 8))
        explicit = draw(st.booleans())
        fields["hidden_size"] = draw(st.integers(1, 40)) if explicit else heads * head_dim
        if explicit:
            fields["head_dim"] = head_dim
        fields["linear_bias"] = draw(st.booleans())
        fields["qkv_bias"] = True if fields["linear_bias"] else draw(st.booleans())
    if draw(st.booleans()):
        experts = draw(st.integers(1, 6))
        fields["moe"] = {
            "num_experts": experts,
            "top_k": draw(st.integers(1, experts)),
            "num_shared_experts": draw(st.integers(0, 2)),
            "expert_ffn_hidden_size": draw(st.integers(1, 24)),
            "moe_layer_freq": draw(st.integers(1, 3)),
            "first_k_dense": draw(st.integers(0, layers - 1)),
            "router_bias": draw(st.booleans()),
        }
    return ModelSpec.model_validate(fields)


def _state_dict_shapes(s: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Independent oracle: named weight shapes of an implementation of `s`."""
    h = s.hidden_size
    ln = s.norm == "layernorm"
    bias = s.linear_bias
    shapes: dict[str, tuple[int, ...]] = {"embed.weight": (s.vocab_size, h)}
    if s.position == "learned":
        shapes["pos.weight"] = (s.max_seq_len, h)

    def norm(name: str, dim: int) -> None:
        shapes[f"{name}.weight"] = (dim,)
        if ln:
            shapes[f"{name}.bias"] = (dim,)

    def linear(name: str, d_in: int, d_out: int, has_bias: bool) -> None:
        shapes[f"{name}.weight"] = (d_out, d_in)
        if has_bias:
            shapes[f"{name}.bias"] = (d_out,)

    def mlp(name: str, ffn: int) -> None:
        if s.mlp == "swiglu":
            linear(f"{name}.gate", h, ffn, bias)
        linear(f"{name}.up", h, ffn, bias)
        linear(f"{name}.down", ffn, h, bias)

    for i in range(s.num_layers):
        p = f"layers.{i}"
        norm(f"{p}.attn_norm", h)
        norm(f"{p}.mlp_norm", h)
        if s.mla is not None:
            m = s.mla
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            if m.q_lora_rank is None:
                linear(f"{p}.q", h, s.num_heads * qk, False)
            else:
                linear(f"{p}.q_a", h, m.q_lora_rank, False)
                norm(f"{p}.q_a_norm", m.q_lora_rank)
                linear(f"{p}.q_b", m.q_lora_rank, s.num_heads * qk, False)
            linear(f"{p}.kv_a", h, m.kv_lora_rank + m.qk_rope_head_dim, False)
            norm(f"{p}.kv_a_norm", m.kv_lora_rank)
            linear(f"{p}.kv_b", m.kv_lora_rank, s.num_heads * (m.qk_nope_head_dim + m.v_head_dim), False)
            linear(f"{p}.o", s.num_heads * m.v_head_dim, h, False)
        else:
            for proj, heads in (("q", s.num_heads), ("k", s.num_kv_heads), ("v", s.num_kv_heads)):
                linear(f"{p}.{proj}", h, heads * s.head_dim, s.qkv_bias)
            linear(f"{p}.o", s.num_heads * s.head_dim, h, bias)
        moe = s.moe
        is_moe = (
            moe is not None and i >= moe.first_k_dense and (i - moe.first_k_dense) % moe.moe_layer_freq == 0
        )
        if not is_moe:
            mlp(f"{p}.mlp", s.ffn_hidden_size)
            continue
        shapes[f"{p}.router.weight"] = (moe.num_experts, h)
        if moe.router_bias:
            shapes[f"{p}.router.bias"] = (moe.num_experts,)
        for e in range(moe.num_shared_experts):
            mlp(f"{p}.shared.{e}", moe.expert_ffn_hidden_size)
        for e in range(moe.num_experts):
            mlp(f"{p}.experts.{e}", moe.expert_ffn_hidden_size)
    norm("final_norm", h)
    if not s.tied_embeddings:
        shapes["lm_head.weight"] = (s.vocab_size, h)
    return shapes


@settings(max_examples=300, deadline=None)
@given(specs())
def test_counts_add_up_and_match_state_dict_oracle(s: ModelSpec) -> None:
    layers = [s.layer_params(i) for i in range(s.num_layers)]
    assert s.num_params() == s.embedding_params() + sum(layers) + s.output_params()
    assert s.num_params() == sum(prod(shape) for shape in _state_dict_shapes(s).values())
    for i in range(s.num_layers):
        assert s.layer_params(i) == s.layer_dense_params(i) + s.layer_expert_params(i)
        assert s.layer_active_params(i) <= s.layer_params(i)
    assert s.num_active_params() <= s.num_params()
    full_activation = s.moe is None or s.moe.top_k == s.moe.num_experts or s.num_moe_layers() == 0
    assert (s.num_active_params() == s.num_params()) == full_activation
    assert (
        s.output_params() + (0 if not s.tied_embeddings else s.lm_head_params())
        == s.final_norm_params() + s.lm_head_params()
    )


@settings(max_examples=200, deadline=None)
@given(specs(), st.integers(1, 64), st.booleans())
def test_flops_scale_linearly_with_layers(s: ModelSpec, seq: int, causal: bool) -> None:
    seq = min(seq, s.max_seq_len)
    if s.moe is not None:  # a repeating block: whole MoE periods after the dense prefix
        s = s.model_copy(update={"moe": s.moe.model_copy(update={"first_k_dense": 0})})
        block = s.moe.moe_layer_freq
    else:
        block = 1
    one = ModelSpec.model_validate({**s.model_dump(), "num_layers": block})
    logits = s.logits_forward_flops()
    for n in (1, 2, 3):
        many = ModelSpec.model_validate({**s.model_dump(), "num_layers": n * block})
        assert many.forward_flops_per_token(seq, causal) - logits == n * (
            one.forward_flops_per_token(seq, causal) - logits
        )
        for policy in ("none", "selective", "full", "op"):
            t_many, t_one = (
                many.training_flops_per_token(seq, policy, causal),
                one.training_flops_per_token(seq, policy, causal),
            )
            assert t_many.hardware_flops - 3 * logits == n * (t_one.hardware_flops - 3 * logits)
    for i in range(s.num_layers):
        lf = s.layer_forward_flops(i, seq, causal)
        gemm = sum(2 * m * k * n for _, m, k, n in s.layer_gemms(i, 3))
        assert gemm == 3 * (lf.total - lf.attn_scores)
        assert lf.attn_scores <= lf.attn_scores_full
