"""`ModelSpec`: the shape of a decoder-only transformer, and the one object the planner asks for counts.

The spec is data (pydantic, frozen, extra="forbid", loadable from YAML/JSON); the arithmetic lives in
`planner.model.params` (parameter counts) and `planner.model.flops` (FLOPs and GEMM shapes). The methods
here only delegate, so every consumer (cost model, executor, CLI) asks the same object the same question.

Covered: MHA/GQA or DeepSeek multi-head latent attention (MLA); SwiGLU or GELU MLP; RMSNorm or LayerNorm;
RoPE or learned positions; tied or untied embeddings; optional q/k/v biases (Qwen2) or biases on every
linear (GPT-2, GPT-NeoX, Megatron GPT); dense or mixture-of-experts layers (routed top-k experts, shared
experts, a dense prefix and an MoE period). Not covered (say so where imported): sliding-window attention
(counted as full causal attention), multi-token-prediction heads, vision towers.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

import planner.model.flops as _flops
import planner.model.params as _params
from planner.layout.names import RECOMPUTE_NAMES

RecomputePolicy = Literal[RECOMPUTE_NAMES]  # type: ignore[valid-type]  (planner.layout.names)

# Input-sanity bounds (not facts about any model): each is 50x or more beyond the largest published value
# (126 layers for Llama 3 405B, h = 25,600 for Megatron-LM's 1T GPT, 256 experts for DeepSeek-V3, a 256k
# vocabulary for Gemma, a 10M-token context for Llama 4 Scout), so no real model is refused, while a typo such as
# num_layers: 1e12 fails validation in one line instead of looping per layer for hours or overflowing the
# cost model's int64 arrays.
MAX_LAYERS = 2**14
MAX_WIDTH = 2**24
"""Largest hidden, FFN, expert-FFN, vocabulary and latent sizes (elements)."""
MAX_HEADS = 2**16
"""Largest head count and head dimension."""
MAX_SEQ_LEN = 2**30


class MoESpec(BaseModel):
    """Mixture-of-experts layers: which layers are MoE and what one MoE layer holds.

    Layer i is an MoE layer iff i >= first_k_dense and (i - first_k_dense) % moe_layer_freq == 0; every
    other layer has a dense MLP of `ModelSpec.ffn_hidden_size`. An MoE layer holds a router (h x E linear),
    `num_experts` routed experts and `num_shared_experts` always-active experts, each an MLP of the model's
    `mlp` kind with width `expert_ffn_hidden_size`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_experts: int = Field(gt=0, le=MAX_HEADS, description="Routed experts per MoE layer (E).")
    top_k: int = Field(gt=0, le=MAX_HEADS, description="Routed experts each token is sent to.")
    num_shared_experts: int = Field(
        default=0, ge=0, le=MAX_HEADS, description="Experts every token goes through (DeepSeekMoE)."
    )
    expert_ffn_hidden_size: int = Field(gt=0, le=MAX_WIDTH, description="Intermediate width of one expert MLP (elements).")
    moe_layer_freq: int = Field(
        default=1, gt=0, le=MAX_LAYERS, description="Every n-th layer after the dense prefix is MoE."
    )
    first_k_dense: int = Field(
        default=0, ge=0, le=MAX_LAYERS, description="Number of leading dense layers (DeepSeek-V3: 3)."
    )
    router_bias: bool = Field(
        default=False,
        description="Per-expert router score bias, E parameters per MoE layer (DeepSeek-V3 e_score_correction_bias, "
        "aux-loss-free balancing).",
    )
    capacity_factor: float | None = Field(
        default=None,
        gt=0,
        le=MAX_HEADS,
        description="Expert capacity: None routes every token (dropless); a number c lets each expert take at "
        "most ceil(c * seq_len * top_k / num_experts) of one sequence's token assignments, the rest dropped "
        "(first choices before second ones, earlier tokens first: GShard, Lepikhin et al. 2020, Algorithm 1).",
    )

    @model_validator(mode="after")
    def _check(self) -> MoESpec:
        if self.top_k > self.num_experts:
            raise ValueError(
                f"moe.top_k={self.top_k} exceeds moe.num_experts={self.num_experts}; lower top_k"
            )
        return self


class MLASpec(BaseModel):
    """DeepSeek-V2/V3 multi-head latent attention dimensions (DeepSeek-V3 report, Sec.2.1.1).

    Queries: h -> q_lora_rank (RMSNorm) -> heads x (qk_nope + qk_rope), or h -> heads x (qk_nope + qk_rope)
    directly when q_lora_rank is None. Keys/values: h -> kv_lora_rank + qk_rope (the rope part is one shared
    key per token), RMSNorm on the latent, latent -> heads x (qk_nope + v_head_dim). Output: heads x v -> h.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    q_lora_rank: int | None = Field(description="Query compression rank d'_c (None: no query compression).")
    kv_lora_rank: int = Field(gt=0, le=MAX_WIDTH, description="Key/value compression rank d_c.")
    qk_nope_head_dim: int = Field(gt=0, le=MAX_HEADS, description="Per-head query/key dimension without RoPE (d_h).")
    qk_rope_head_dim: int = Field(gt=0, le=MAX_HEADS, description="Per-head decoupled RoPE query/key dimension (d_h^R).")
    v_head_dim: int = Field(gt=0, le=MAX_HEADS, description="Per-head value dimension.")

    @model_validator(mode="after")
    def _check(self) -> MLASpec:
        if self.q_lora_rank is not None and not 0 < self.q_lora_rank <= MAX_WIDTH:
            raise ValueError(f"mla.q_lora_rank={self.q_lora_rank} must be in 1..{MAX_WIDTH} or null")
        return self


class ModelSpec(BaseModel):
    """A decoder-only transformer's shape; counts come from methods (exact ints).

    Units: sizes are element counts, parameter counts are numbers of scalars, FLOPs count a multiply-add as
    2 (an m x k by k x n matmul is 2mkn FLOP). Only matmuls are counted: norms, activations, softmax, RoPE
    and bias additions are O(h) per token and left out, as in Narayanan 2021 and Korthikanti 2022.

    FLOP methods take `causal: bool = True`: True averages the attention core over a causal mask ((s+1)/2
    keys per query, the work a causal kernel does; the default for the cost model); False counts all s keys,
    the Megatron-LM accounting with which Narayanan Eq.3 and Korthikanti Eq.7 reproduce exactly (the tests
    check them with causal=False). Compare an MFU with Megatron's published ones using causal=False.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="Short identifier, e.g. 'llama3-8b'.")
    num_layers: int = Field(gt=0, le=MAX_LAYERS, description="Decoder layers (L).")
    hidden_size: int = Field(gt=0, le=MAX_WIDTH, description="Model width h (elements).")
    num_heads: int = Field(gt=0, le=MAX_HEADS, description="Query heads.")
    num_kv_heads: int = Field(gt=0, le=MAX_HEADS, description="Key/value heads (GQA groups); equals num_heads for MHA.")
    head_dim: int = Field(
        gt=0,
        le=MAX_HEADS,
        description="Per-head q/k/v dimension; defaults to hidden_size // num_heads "
        "(MLA: qk_nope_head_dim + qk_rope_head_dim, informational only).",
    )
    ffn_hidden_size: int = Field(
        gt=0, le=MAX_WIDTH, description="MLP intermediate width of dense layers (unused if all are MoE)."
    )
    vocab_size: int = Field(
        gt=0, le=MAX_WIDTH, description="Rows of the token embedding and LM head (padded size if padded)."
    )
    max_seq_len: int = Field(
        gt=0, le=MAX_SEQ_LEN, description="Longest sequence (tokens); rows of the learned position table."
    )
    mlp: Literal["swiglu", "gelu"] = Field(
        description="swiglu: 3 matrices (gate, up, down); gelu: 2 (up, down)."
    )
    norm: Literal["rmsnorm", "layernorm"] = Field(
        description="rmsnorm: weight only; layernorm: weight and bias."
    )
    position: Literal["rope", "learned"] = Field(
        description="rope: no parameters; learned: max_seq_len x h table."
    )
    rope_theta: float = Field(
        default=10000.0,
        gt=0,
        description="RoPE base (theta); no parameters or FLOPs, but training frameworks must be told it. "
        "Default 10000 (Su et al. 2021, RoFormer Eq. 15); Llama 3 uses 500000, Mixtral 1e6. Unused with "
        "learned positions.",
    )
    tied_embeddings: bool = Field(description="LM head shares the token-embedding matrix.")
    qkv_bias: bool = Field(default=False, description="Biases on the q, k, v projections (Qwen2).")
    linear_bias: bool = Field(
        default=False,
        description="Biases on every linear layer (GPT-2, GPT-NeoX, Megatron GPT); implies qkv_bias.",
    )
    moe: MoESpec | None = Field(
        default=None, description="Mixture-of-experts layers; None for a dense model."
    )
    attention: Literal["mha_gqa", "mla"] = Field(default="mha_gqa", description="Attention kind.")
    mla: MLASpec | None = Field(default=None, description="MLA dimensions; required iff attention == 'mla'.")
    source: str = Field(default="user-defined", min_length=1, description="Where the shape comes from.")

    @field_validator("name", "source")
    @classmethod
    def _printable(cls, value: str, info: Any) -> str:
        """No control characters (`hardware_profiles.schema.printable`); `source` may span lines."""
        from hardware_profiles.schema import printable

        try:
            return printable(value, allow="\t\n" if info.field_name == "source" else "")
        except ValueError as exc:
            raise ValueError(f"{info.field_name} {exc}") from None

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        """num_kv_heads defaults to num_heads (MHA); head_dim to hidden_size // num_heads; linear_bias implies qkv_bias."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("num_kv_heads") is None and "num_heads" in data:
            data["num_kv_heads"] = data["num_heads"]
        heads, hidden = data.get("num_heads"), data.get("hidden_size")
        mla = data.get("mla")
        if data.get("head_dim") is None and data.get("attention") == "mla" and mla is not None:
            get = mla.get if isinstance(mla, dict) else lambda k: getattr(mla, k, None)
            nope, rope = get("qk_nope_head_dim"), get("qk_rope_head_dim")
            if isinstance(nope, int) and isinstance(rope, int):
                data["head_dim"] = nope + rope  # MLA: the per-head QK^T length
        if data.get("head_dim") is None and isinstance(heads, int) and isinstance(hidden, int) and heads > 0:
            if hidden % heads:
                raise ValueError(
                    f"hidden_size={hidden} is not divisible by num_heads={heads}; set head_dim explicitly"
                )
            data["head_dim"] = hidden // heads
        if data.get("linear_bias") is True:
            if data.get("qkv_bias") is False:
                raise ValueError(
                    "qkv_bias=false contradicts linear_bias=true (biases on every linear); drop qkv_bias"
                )
            data["qkv_bias"] = True
        return data

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads={self.num_heads} is not divisible by num_kv_heads={self.num_kv_heads}; "
                "each KV head must serve a whole group of query heads"
            )
        if self.attention == "mla":
            if self.mla is None:
                raise ValueError("attention='mla' needs an mla: section (q_lora_rank, kv_lora_rank, ...)")
            if self.num_kv_heads != self.num_heads:
                raise ValueError(
                    f"num_kv_heads={self.num_kv_heads} must equal num_heads={self.num_heads} with MLA"
                )
            if self.head_dim != self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim:
                raise ValueError(
                    f"head_dim={self.head_dim} must equal mla.qk_nope_head_dim + mla.qk_rope_head_dim="
                    f"{self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim} with MLA; omit head_dim"
                )
            if self.qkv_bias or self.linear_bias:
                raise ValueError(
                    "qkv_bias/linear_bias are not supported with attention='mla'; set them false"
                )
        elif self.mla is not None:
            raise ValueError("mla: is set but attention='mha_gqa'; set attention: mla or remove mla")
        if self.moe is not None and self.moe.first_k_dense >= self.num_layers:
            raise ValueError(
                f"moe.first_k_dense={self.moe.first_k_dense} leaves no MoE layer among num_layers={self.num_layers}"
            )
        return self

    # ---- layer structure ------------------------------------------------------------------------------
    def is_moe_layer(self, i: int) -> bool:
        """Layer i (0-based) is MoE iff i >= first_k_dense and (i - first_k_dense) % moe_layer_freq == 0."""
        self._check_layer(i)
        if self.moe is None:
            return False
        k = self.moe.first_k_dense
        return i >= k and (i - k) % self.moe.moe_layer_freq == 0

    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))

    def _check_layer(self, i: int) -> None:
        if not 0 <= i < self.num_layers:
            raise IndexError(f"layer index {i} out of range [0, {self.num_layers}) for model {self.name!r}")

    # ---- parameters (exact ints; see planner.model.params) --------------------------------------------
    def num_params(self) -> int:
        """All parameters: embedding + every layer (all experts) + final norm + LM head (0 if tied)."""
        return _params.num_params(self)

    def num_active_params(self, include_embedding: bool = True) -> int:
        """Parameters one token touches: routed top_k + shared experts, everything dense.

        include_embedding=True (default) counts the embedding tables, as Mistral's "12.9B active" does;
        False drops the input lookup tables but keeps the LM head (even when tied), which is the convention
        that reproduces DeepSeek-V3's rounded "37B activated".
        """
        return _params.num_active_params(self, include_embedding=include_embedding)

    def embedding_params(self) -> int:
        """Token embedding (V x h) plus learned position table (max_seq_len x h) if position == 'learned'."""
        return _params.embedding_params(self)

    def output_params(self) -> int:
        """Final norm plus LM head; the LM head counts 0 when tied (it is the embedding)."""
        return _params.output_params(self)

    def lm_head_params(self) -> int:
        """V x h regardless of tying: a pipeline's last stage holds its own copy of a tied head."""
        return _params.lm_head_params(self)

    def final_norm_params(self) -> int:
        return _params.norm_params(self, self.hidden_size)

    def layer_params(self, i: int) -> int:
        """All parameters of decoder layer i: attention, norms, dense MLP or router + all experts."""
        self._check_layer(i)
        return _params.layer_params(self, self.is_moe_layer(i))

    def layer_active_params(self, i: int) -> int:
        """Parameters of layer i one token touches (top_k routed experts, shared experts, the rest)."""
        self._check_layer(i)
        return _params.layer_active_params(self, self.is_moe_layer(i))

    def layer_expert_params(self, i: int) -> int:
        """Routed-expert parameters of layer i (0 for a dense layer): the part expert parallelism shards."""
        self._check_layer(i)
        return _params.routed_expert_params(self) if self.is_moe_layer(i) else 0

    def layer_dense_params(self, i: int) -> int:
        """layer_params(i) - layer_expert_params(i): attention, norms, router, shared experts or dense MLP."""
        return self.layer_params(i) - self.layer_expert_params(i)

    # ---- FLOPs (see planner.model.flops for conventions) ----------------------------------------------
    def layer_forward_flops(self, i: int, seq_len: int, causal: bool = True) -> _flops.LayerFlops:
        """Forward FLOPs per token of layer i at sequence length seq_len, split by part."""
        self._check_layer(i)
        return _flops.layer_forward_flops(self, self.is_moe_layer(i), seq_len, causal=causal)

    def layer_recompute_flops(
        self, i: int, seq_len: int, recompute: RecomputePolicy, causal: bool = True
    ) -> int:
        """Extra forward FLOPs per token that recomputation adds to layer i's backward pass."""
        return _flops.recompute_flops(self.layer_forward_flops(i, seq_len, causal=causal), recompute, i)

    def embedding_forward_flops(self) -> int:
        """0: the embedding is a table lookup, not a matmul."""
        return 0

    def logits_forward_flops(self) -> int:
        """2*h*V per token: the LM-head matmul."""
        return 2 * self.hidden_size * self.vocab_size

    def forward_flops_per_token(self, seq_len: int, causal: bool = True) -> int:
        """All layers plus logits, forward only, per token."""
        return _flops.forward_flops_per_token(self, seq_len, causal=causal)

    def training_flops_per_token(
        self, seq_len: int, recompute: RecomputePolicy = "none", causal: bool = True
    ) -> _flops.TrainingFlops:
        """(model_flops, hardware_flops) per token: 3 x forward, plus what recomputation repeats."""
        return _flops.training_flops_per_token(self, seq_len, recompute, causal=causal)

    def layer_gemms(self, i: int, tokens: int, tp: int = 1) -> list[tuple[str, int, int, int]]:
        """(name, m, k, n) of layer i's weight matmuls on `tokens` tokens, weights split over `tp` ranks."""
        self._check_layer(i)
        return _flops.layer_gemms(self, self.is_moe_layer(i), tokens, tp)

    def logits_gemm(self, tokens: int, tp: int = 1) -> tuple[str, int, int, int]:
        """(name, m, k, n) of the LM-head matmul, vocabulary split over tp ranks (rounded up)."""
        return _flops.logits_gemm(self, tokens, tp)
