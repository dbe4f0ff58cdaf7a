"""`ModelReport`: a spec with its counts at one sequence length, the document `meshplan model --json` writes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from planner.model.flops import RECOMPUTE_POLICIES
from planner.model.spec import ModelSpec

CONVENTION = (
    "FLOP per token; a matmul of (m x k)(k x n) = 2mkn FLOP; matmuls only. 'causal' averages the attention "
    "core over a causal mask ((s+1)/2 keys per query); 'full' counts all s keys (Megatron-LM / Narayanan Eq.3 / "
    "Korthikanti Eq.7 accounting). model = 3 x forward; hardware = model + recomputed forward (selective: "
    "attention core; full: every layer)."
)


class TrainingFlopsReport(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model_flops: int = Field(description="3 x forward FLOP per token (MFU numerator).")
    hardware_flops: int = Field(
        description="model_flops + recomputed forward FLOP per token (HFU numerator)."
    )


class FlopsReport(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    forward_flops: int = Field(description="Forward FLOP per token, all layers + logits.")
    training: dict[str, TrainingFlopsReport] = Field(
        description="Per recompute policy: none, selective, full."
    )


class ParamsReport(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    total: int = Field(description="All parameters (scalars).")
    active: int = Field(description="Parameters one token touches, embedding tables included.")
    active_without_embedding: int = Field(description="Active parameters without the input lookup tables.")
    embedding: int = Field(description="Token embedding + learned position table.")
    layers: int = Field(description="Sum over decoder layers, all experts included.")
    routed_experts: int = Field(description="Routed-expert parameters over all layers (sharded by EP).")
    output: int = Field(description="Final norm + LM head (0 for a tied head).")
    lm_head: int = Field(description="V x h, held by the last pipeline stage even when tied.")


class ModelReport(BaseModel):
    """Spec, parameter counts and FLOPs per token at `seq_len`, with the counting convention spelled out."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: ModelSpec
    seq_len: int = Field(description="Sequence length (tokens) the FLOPs are computed at.")
    params: ParamsReport
    flops_causal: FlopsReport = Field(description="Attention core averaged over the causal mask.")
    flops_full_attention: FlopsReport = Field(
        description="Attention core over all s keys (Megatron accounting)."
    )
    convention: str = CONVENTION


def _flops(spec: ModelSpec, seq_len: int, causal: bool) -> FlopsReport:
    training = {}
    for policy in RECOMPUTE_POLICIES:
        t = spec.training_flops_per_token(seq_len, policy, causal=causal)
        training[policy] = TrainingFlopsReport(model_flops=t.model_flops, hardware_flops=t.hardware_flops)
    return FlopsReport(forward_flops=spec.forward_flops_per_token(seq_len, causal=causal), training=training)


def build_report(spec: ModelSpec, seq_len: int | None = None) -> ModelReport:
    """Counts of `spec` at seq_len (default: spec.max_seq_len)."""
    seq_len = spec.max_seq_len if seq_len is None else seq_len
    layers = range(spec.num_layers)
    params = ParamsReport(
        total=spec.num_params(),
        active=spec.num_active_params(),
        active_without_embedding=spec.num_active_params(include_embedding=False),
        embedding=spec.embedding_params(),
        layers=sum(spec.layer_params(i) for i in layers),
        routed_experts=sum(spec.layer_expert_params(i) for i in layers),
        output=spec.output_params(),
        lm_head=spec.lm_head_params(),
    )
    return ModelReport(
        spec=spec,
        seq_len=seq_len,
        params=params,
        flops_causal=_flops(spec, seq_len, True),
        flops_full_attention=_flops(spec, seq_len, False),
    )
