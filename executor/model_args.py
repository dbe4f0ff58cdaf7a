"""`ModelArgs`: the reference model's shape, read from a plan's `ModelSpec`, and the `--smoke` scale-down.

The executor builds its model from these plain dataclasses rather than from the pydantic `ModelSpec`
directly, so the model code depends on a dozen named numbers, not on the planner's schema. `from_spec`
reads the ModelSpec field names fixed in the contract; `smoke_spec` keeps the layer structure (number of
layers, which layers are MoE, so the plan's layer partition and schedule still apply) and shrinks every
width to something a laptop runs in seconds while staying divisible by the plan's TP and CP degrees.
`check_model` refuses what the reference model cannot build; whether a layout fits a model is the rule set's
(`planner.layout.rules`), which `executor.train.check_plan` runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.errors import UserError


@dataclass(frozen=True, kw_only=True, slots=True)
class MoEArgs:
    num_experts: int
    """Routed experts per MoE layer."""
    top_k: int
    """Experts each token is routed to."""
    num_shared_experts: int
    """Always-on experts (DeepSeek-MoE); 0 for Mixtral-style MoE."""
    expert_ffn_hidden_size: int
    """Hidden width of one expert's MLP."""
    moe_layer_freq: int = 1
    """Every `moe_layer_freq`-th layer (from `first_k_dense` on) is MoE."""
    first_k_dense: int = 0
    """The first `first_k_dense` layers stay dense."""
    router_bias: bool = False
    """Per-expert score bias used only to choose experts (DeepSeek-V3 aux-loss-free balancing)."""
    capacity_factor: float | None = None
    """None: dropless. A number: each expert takes at most ceil(factor * seq_len * top_k / num_experts) of a
    sequence's token assignments (executor.routing)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelArgs:
    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_hidden_size: int
    vocab_size: int
    max_seq_len: int
    mlp: str = "swiglu"
    """"swiglu" (three matrices) or "gelu" (two)."""
    norm: str = "rmsnorm"
    """"rmsnorm" or "layernorm"."""
    position: str = "rope"
    """"rope" (rotary, no parameters) or "learned" (an embedding table of max_seq_len rows)."""
    tied_embeddings: bool = False
    qkv_bias: bool = False
    linear_bias: bool = False
    """Bias on the attention output and MLP matrices (GPT-2 style)."""
    moe: MoEArgs | None = None
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    def is_moe_layer(self, layer: int) -> bool:
        """Layer i is MoE iff i >= first_k_dense and (i - first_k_dense) % moe_layer_freq == 0 (contract rule)."""
        if self.moe is None:
            return False
        offset = layer - self.moe.first_k_dense
        return offset >= 0 and offset % self.moe.moe_layer_freq == 0


def _get(spec: Any, name: str, default: Any = None) -> Any:
    if isinstance(spec, dict):
        return spec.get(name, default)
    return getattr(spec, name, default)


def from_spec(spec: Any) -> ModelArgs:
    """Read a `planner.model.ModelSpec` (or its JSON dict) into `ModelArgs`; refuse what the model cannot build."""
    attention = _get(spec, "attention", "mha_gqa")
    if attention not in (None, "mha_gqa"):
        raise UserError(
            f"attention={attention!r} is not in the reference model (Llama-style MHA/GQA only)",
            where="plan inputs.model.attention",
            fix="run with --smoke (which substitutes GQA) or plan an mha_gqa model",
        )
    moe_spec = _get(spec, "moe")
    moe = None
    if moe_spec is not None:
        capacity = _get(moe_spec, "capacity_factor")
        moe = MoEArgs(
            num_experts=int(_get(moe_spec, "num_experts")),
            top_k=int(_get(moe_spec, "top_k")),
            num_shared_experts=int(_get(moe_spec, "num_shared_experts", 0) or 0),
            expert_ffn_hidden_size=int(_get(moe_spec, "expert_ffn_hidden_size")),
            moe_layer_freq=int(_get(moe_spec, "moe_layer_freq", 1) or 1),
            first_k_dense=int(_get(moe_spec, "first_k_dense", 0) or 0),
            router_bias=bool(_get(moe_spec, "router_bias", False)),
            capacity_factor=None if capacity is None else float(capacity),
        )
    num_heads = int(_get(spec, "num_heads"))
    hidden = int(_get(spec, "hidden_size"))
    return ModelArgs(
        name=str(_get(spec, "name", "model")),
        num_layers=int(_get(spec, "num_layers")),
        hidden_size=hidden,
        num_heads=num_heads,
        num_kv_heads=int(_get(spec, "num_kv_heads") or num_heads),
        head_dim=int(_get(spec, "head_dim") or hidden // num_heads),
        ffn_hidden_size=int(_get(spec, "ffn_hidden_size")),
        vocab_size=int(_get(spec, "vocab_size")),
        max_seq_len=int(_get(spec, "max_seq_len")),
        mlp=str(_get(spec, "mlp", "swiglu")),
        norm=str(_get(spec, "norm", "rmsnorm")),
        position=str(_get(spec, "position", "rope")),
        tied_embeddings=bool(_get(spec, "tied_embeddings", False)),
        qkv_bias=bool(_get(spec, "qkv_bias", False)),
        linear_bias=bool(_get(spec, "linear_bias", False)),
        moe=moe,
        rope_theta=float(_get(spec, "rope_theta", 10000.0) or 10000.0),
    )



def check_model(args: ModelArgs) -> None:
    """What the reference model itself needs of a model spec (the layout's rules are `planner.layout.rules`);
    one-line UserError naming the fix."""
    if args.num_heads % args.num_kv_heads:
        raise UserError(
            f"num_kv_heads={args.num_kv_heads} must divide num_heads={args.num_heads}", where="model spec",
            fix="use a grouped-query attention shape (heads a multiple of KV heads)",
        )
    if args.head_dim % 2 and args.position == "rope":
        raise UserError(f"head_dim={args.head_dim} must be even for RoPE", where="model spec",
                        fix="use an even head_dim")
