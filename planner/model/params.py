"""Exact parameter counts of a `ModelSpec`, component by component.

Every count is the number of scalars in the weights and biases a PyTorch implementation of the
architecture holds (HF transformers / Megatron-LM layouts), so `num_params()` equals
`sum(p.numel() for p in model.parameters())` of that implementation. Check against Narayanan et al. 2021
Eq.2 for GPT: P = 12*l*h^2*(1 + 13/(12h) + (V+s)/(12*l*h)) = 12lh^2 + 13lh + (V+s)h; our count adds the
final LayerNorm (2h), which Eq.2 leaves out.

Per decoder layer (h hidden, nh/nkv heads, d head dim, f FFN width):
  attention (GQA)  h*(nh*d + 2*nkv*d) + nh*d*h  [+ nh*d + 2*nkv*d q/k/v biases] [+ h out-proj bias]
  attention (MLA)  see `attention_params`
  norms            2 per layer (pre-attention, pre-MLP): h each (RMSNorm) or 2h (LayerNorm)
  MLP              swiglu 3*h*f [+ 2f + h biases]; gelu 2*h*f [+ f + h biases]
  MoE layer        router h*E [+ E bias] + E routed experts + S shared experts, each an MLP of width f_e
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.model.spec import ModelSpec


def norm_params(spec: ModelSpec, dim: int) -> int:
    """RMSNorm holds a weight (dim); LayerNorm a weight and a bias (2*dim)."""
    return dim if spec.norm == "rmsnorm" else 2 * dim


def mlp_params(spec: ModelSpec, ffn: int) -> int:
    """One MLP of intermediate width `ffn` (a dense MLP or one expert)."""
    h = spec.hidden_size
    if spec.mlp == "swiglu":  # gate h->f, up h->f, down f->h
        weights, biases = 3 * h * ffn, 2 * ffn + h
    else:  # up h->f, down f->h
        weights, biases = 2 * h * ffn, ffn + h
    return weights + (biases if spec.linear_bias else 0)


def attention_params(spec: ModelSpec) -> int:
    """Attention block weights (and biases), without its input norm."""
    h, nh = spec.hidden_size, spec.num_heads
    if spec.attention == "mla":
        m = spec.mla
        assert m is not None  # guaranteed by ModelSpec validation
        qk_dim = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank is None:
            q = h * nh * qk_dim  # q_proj
        else:  # q_a_proj, q_a_layernorm, q_b_proj
            q = h * m.q_lora_rank + norm_params(spec, m.q_lora_rank) + m.q_lora_rank * nh * qk_dim
        kv = (
            h * (m.kv_lora_rank + m.qk_rope_head_dim)  # kv_a_proj_with_mqa (latent + shared rope key)
            + norm_params(spec, m.kv_lora_rank)  # kv_a_layernorm
            + m.kv_lora_rank * nh * (m.qk_nope_head_dim + m.v_head_dim)  # kv_b_proj
        )
        return q + kv + nh * m.v_head_dim * h  # + o_proj
    q_out = nh * spec.head_dim
    kv_out = spec.num_kv_heads * spec.head_dim
    total = h * (q_out + 2 * kv_out) + q_out * h
    if spec.qkv_bias:  # set whenever linear_bias is (ModelSpec validation)
        total += q_out + 2 * kv_out
    if spec.linear_bias:
        total += h  # output projection bias
    return total


def router_params(spec: ModelSpec) -> int:
    moe = spec.moe
    assert moe is not None
    return spec.hidden_size * moe.num_experts + (moe.num_experts if moe.router_bias else 0)


def routed_expert_params(spec: ModelSpec) -> int:
    """All routed experts of one MoE layer (what EP shards)."""
    moe = spec.moe
    assert moe is not None
    return moe.num_experts * mlp_params(spec, moe.expert_ffn_hidden_size)


def shared_expert_params(spec: ModelSpec) -> int:
    moe = spec.moe
    assert moe is not None
    return moe.num_shared_experts * mlp_params(spec, moe.expert_ffn_hidden_size)


def layer_params(spec: ModelSpec, is_moe: bool) -> int:
    base = attention_params(spec) + 2 * norm_params(spec, spec.hidden_size)
    if not is_moe:
        return base + mlp_params(spec, spec.ffn_hidden_size)
    return base + router_params(spec) + shared_expert_params(spec) + routed_expert_params(spec)


def layer_active_params(spec: ModelSpec, is_moe: bool) -> int:
    if not is_moe:
        return layer_params(spec, False)
    moe = spec.moe
    assert moe is not None
    active_routed = moe.top_k * mlp_params(spec, moe.expert_ffn_hidden_size)
    return layer_params(spec, True) - routed_expert_params(spec) + active_routed


def embedding_params(spec: ModelSpec) -> int:
    positions = spec.max_seq_len * spec.hidden_size if spec.position == "learned" else 0
    return spec.vocab_size * spec.hidden_size + positions


def lm_head_params(spec: ModelSpec) -> int:
    return spec.vocab_size * spec.hidden_size


def output_params(spec: ModelSpec) -> int:
    head = 0 if spec.tied_embeddings else lm_head_params(spec)
    return norm_params(spec, spec.hidden_size) + head


def _layer_kinds(spec: ModelSpec) -> tuple[int, int]:
    """(number of dense layers, number of MoE layers)."""
    n_moe = spec.num_moe_layers()
    return spec.num_layers - n_moe, n_moe


def num_params(spec: ModelSpec) -> int:
    n_dense, n_moe = _layer_kinds(spec)
    layers = n_dense * layer_params(spec, False) + (n_moe * layer_params(spec, True) if n_moe else 0)
    return embedding_params(spec) + layers + output_params(spec)


def num_active_params(spec: ModelSpec, include_embedding: bool = True) -> int:
    n_dense, n_moe = _layer_kinds(spec)
    layers = n_dense * layer_params(spec, False) + (n_moe * layer_active_params(spec, True) if n_moe else 0)
    if include_embedding:
        return embedding_params(spec) + layers + output_params(spec)
    # Without the lookup tables the LM head still computes for every token, tied or not.
    return layers + norm_params(spec, spec.hidden_size) + lm_head_params(spec)
