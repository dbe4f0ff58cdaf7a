"""The published-runs file (benchmarks/data/published_runs.yaml): its schema, and a case turned into planner inputs.

    from published_cases import load_runs, build_model, build_cluster
    runs = load_runs()
    case = runs.cases[0]; model = build_model(case); cluster = build_cluster(case)

Each case records a published training run: its source (a `sources:` entry plus the row and an exact quote), the
model, the hardware, the batch, the layout, how its step time follows from what the source states (`step_time`,
see published_step_times.py) and `gaps`: what meshplan cannot represent about the run (a schedule, a precision, a
runtime, the hardware), so the benchmark reports such runs apart instead of dropping them.

The 32 cases of the first validation round predate `framework`, `step_time`, `gaps` and `source.key`; for them the
framework and the step-time derivation follow from the case id (`legacy_*` below), as they always did.

The fields the benchmark reads are typed; provenance notes (quotes, `*_note` keys, `verified` flags per block) are
free-form and kept as extra keys, because each source words them differently.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

import hardware_profiles
from planner.layout.names import RECOMPUTE_NAMES
from planner.layout.schedules import SCHEDULE_NAMES
from planner.model import ModelSpec, preset
from planner.model.spec import MoESpec

DATA = Path(__file__).parent / "data" / "published_runs.yaml"
GPT2_PADDED_VOCAB = 51200  # GPT-2 BPE 50257 padded to a multiple of 128*tp (Megatron --make-vocab-size-divisible-by)

GapKind = Literal["schedule", "recompute", "runtime", "precision", "overlap", "hardware", "comm", "model", "optimizer",
                  "layout", "cp", "ground_truth"]
StepMethod = Literal["stated", "samples_per_gpu_s", "tokens_per_gpu_s", "tflops_per_gpu", "mfu_pct",
                     "gpu_hours_per_trillion_tokens"]
Formula = Literal["narayanan_eq3", "korthikanti_eq7", "palm", "megatron_2025"]


class _Notes(BaseModel):
    """A block whose typed fields the benchmark reads; other keys are provenance notes and are kept as given."""

    model_config = ConfigDict(extra="allow", frozen=True)


class Gap(BaseModel):
    """Something about the run that meshplan cannot represent; the case is then predicted approximately."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: GapKind = Field(description="What is missing: a schedule, a precision, the hardware, ...")
    detail: str = Field(min_length=1, description="What the run did and what the prediction uses instead.")


Knob = Literal["recompute", "schedule", "pp"]
"""A setting a sourced reason may hold at its published value (KnownSuboptimal.knob)."""


class KnownSuboptimal(BaseModel):
    """Why the published layout is known to be slower than an alternative, with the source that measured it.

    The benchmark holds the planner's claimed gain over a published layout to 10 % (issue bar); a case whose layout a
    source shows to be suboptimal (a later paper's measured comparison, the authors' own ablation) is exempt, and the
    summary lists it apart. An unsourced belief is not a reason: the source must state the comparison."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    reason: str = Field(min_length=1, description="What the published run did that an alternative beats, and by how much.")
    source: str = Field(min_length=1, description="Paper + table/section (or code at a commit) that measured it.")
    knob: Knob | list[Knob] | None = Field(
        None, description="The stated setting the source shows to be the slower choice (`pp`: the published pipeline "
                          "size, where a source measured smaller pipelines with more data parallelism faster): the part "
                          "of the claimed gain it does not explain is the pick's gain with that setting held at its "
                          "published value. A list holds several settings at once, each with its own measured "
                          "comparison in `source`.")
    faster_case: str | None = Field(
        None, description="Id of the measured faster alternative in this file (same model and GPUs; the same batch, or "
                          "the same layout at the larger batch the source says it was sized for): the part of the "
                          "claimed gain it does not explain is the claim beyond that measured speed-up, compared per "
                          "sequence when the batches differ. With a `knob` too, the pick with the knob held is judged "
                          "against that speed-up.")

    @model_validator(mode="after")
    def _a_measure(self) -> KnownSuboptimal:
        if not self.knobs and self.faster_case is None:
            raise ValueError("known_suboptimal needs `knob`, `faster_case` or both (what the source measured)")
        if isinstance(self.knob, list) and len(set(self.knob)) != len(self.knob):
            raise ValueError(f"known_suboptimal.knob lists a setting twice: {self.knob}; name each once")
        return self

    @property
    def knobs(self) -> tuple[Knob, ...]:
        """The held settings, in the order given (the single-value form is a list of one)."""
        if self.knob is None:
            return ()
        return tuple(self.knob) if isinstance(self.knob, list) else (self.knob,)


class StepTime(BaseModel):
    """How the step time follows from the published number (published_step_times.step_time_s computes it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    method: StepMethod = Field(description="What the source states: a time, a throughput, TFLOP/s, MFU or GPU hours.")
    value: float = Field(gt=0, description="The stated number, in the unit the method names.")
    formula: Formula | None = Field(None, description="FLOP formula behind TFLOP/s or MFU (the source's own accounting).")
    peak_tflops: float | None = Field(None, gt=0, description="Peak the source's MFU refers to, TFLOP/s.")
    uncertainty_pct: float = Field(ge=0, description="How far the derived step time may be off (rounding, formula), %.")
    derivation: str = Field(min_length=1, description="The arithmetic, in words.")


class SourceRef(_Notes):
    key: str | None = Field(None, description="Key into the file's `sources:` (legacy cases: derived from the id).")
    primary: str | None = None
    row: str | None = None
    quote: str | None = None


class ModelBlock(_Notes):
    preset: str | None = Field(None, description="A planner preset the case starts from.")
    arch: Literal["gpt", "llama", "deepseek", "nemotron4"] | None = Field(None, description="Layer style; see ARCHS (legacy: GPT).")
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    ffn: int | None = None
    vocab: int | str | None = None
    seq_len: int
    moe: dict[str, int] | None = None
    position: Literal["rope", "learned"] | None = None
    qkv_bias: bool | None = None


class HardwareBlock(_Notes):
    gpu: str
    num_gpus: int = Field(gt=0)
    gpus_per_node: int = Field(gt=0)
    cluster: str | None = Field(None, description="hardware_profiles cluster the run is predicted on.")


class BatchBlock(_Notes):
    global_batch_seqs: int = Field(gt=0)
    micro_batch: int | None = None


class ParallelismBlock(_Notes):
    tp: int = Field(gt=0)
    pp: int = Field(gt=0)
    dp: int = Field(gt=0)
    cp: int = 1
    ep: int = 1
    schedule: Literal[SCHEDULE_NAMES] | None = None  # type: ignore[valid-type]
    vpp: int | None = None
    zero: int | None = None
    dp_shard: int | None = Field(None, gt=0, description="ZeRO-3 sharding group: DP for full sharding (FSDP FULL_SHARD), "
                                 "less for HSDP; None: not stated (the benchmark searches the group, as for any "
                                 "unstated knob).")
    sequence_parallel: bool | None = None


class RecomputeBlock(_Notes):
    # A list: the source states the kind but not which of these (TorchTitan's "selective layer" without its k).
    policy: Literal[RECOMPUTE_NAMES] | list[Literal[RECOMPUTE_NAMES]] | None = None  # type: ignore[valid-type]
    setting: str | None = None


class PublishedRun(BaseModel):
    """One published training run."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(min_length=1)
    group: str
    source: SourceRef
    verified: bool | None = None
    verified_note: str | None = None
    framework: str | None = Field(None, description="Key of published_runs.FRAMEWORKS (legacy: from the id).")
    model: ModelBlock
    hardware: HardwareBlock
    batch: BatchBlock
    parallelism: ParallelismBlock
    recompute: RecomputeBlock
    precision: Literal["bf16", "fp16", "fp8"] | None = None
    runtime: str | None = Field(None, description="Training runtime as the source ran it (pytorch, pytorch-compile, ...).")
    tp_comm_overlap: bool | None = Field(None, description="TP collectives pipelined with the GEMMs (PyTorch async TP, "
                                         "Megatron --tp-comm-overlap); None: the framework's default.")
    grad_reduce_dtype: Literal["fp32", "bf16"] | None = Field(
        None, description="Precision of the DP gradient reduction as the source ran it (Workload.grad_reduce_dtype); "
        "None: fp32, what the framework's runtime reduces in.")
    master_weights: Literal["fp32", "remainders", "none"] | None = Field(
        None, description="Master copy of the weights as the source's optimizer kept it (Workload.master_weights); "
        "None: fp32.")
    optimizer_state_dtype: Literal["fp32", "bf16"] | None = Field(
        None, description="Precision of the Adam moments as the source kept them (Workload.optimizer_state_dtype); "
        "None: fp32.")
    throughput: dict[str, Any]
    derived: dict[str, Any] | None = None
    step_time: StepTime | None = None
    gaps: tuple[Gap, ...] = ()
    known_suboptimal: KnownSuboptimal | None = Field(
        None, description="A sourced reason the published layout is slower than an alternative (exempts its claimed gain).")


class PublishedRuns(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    about: str
    hardware: dict[str, Any]
    formulas: dict[str, Any]
    sources: dict[str, dict[str, Any]]
    cases: tuple[PublishedRun, ...]


@cache
def load_runs(path: Path = DATA) -> PublishedRuns:
    return PublishedRuns.model_validate(yaml.safe_load(path.read_text()))


def source_key(case: PublishedRun) -> str:
    """The source a case comes from: one key per publication (the unit of the cross-validation split)."""
    if case.source.key:
        return case.source.key
    if case.id.startswith("narayanan2021"):
        return "narayanan2021"
    if case.id.startswith("megatron_gpt3"):
        return "megatron_gpt3_2021"  # the Megatron-LM README's GPT-3 175B run, not a paper table
    if case.id.startswith("megatron_core"):
        return "megatron_core_2024"
    raise ValueError(f"case {case.id}: no source.key and no legacy id prefix")


def legacy_framework(case: PublishedRun) -> str:
    """Framework of a first-round case, from its id (those cases predate the `framework` field)."""
    if "ZeRO-3" in case.id:
        return "deepspeed-2021-zero3"
    if case.id.startswith("megatron_core"):
        return "megatron-core-0.8"
    return "megatron-lm-2021"  # Narayanan et al. 2021 and the 2021 GPT-3 175B example script


def framework_name(case: PublishedRun) -> str:
    return case.framework or legacy_framework(case)


# Layer styles: what a source's "GPT-3-like" or "Llama-like" model is, in ModelSpec terms.
ARCHS: dict[str, dict[str, Any]] = {
    # Megatron GPT (Narayanan 2021, Korthikanti 2022, BLOOM, OPT): LayerNorm, GELU, learned positions, biases, tied.
    "gpt": {"mlp": "gelu", "norm": "layernorm", "position": "learned", "tied_embeddings": True, "linear_bias": True},
    # Llama / Mixtral / Qwen-MoE: RMSNorm, SwiGLU, RoPE, untied LM head, no biases.
    "llama": {"mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "tied_embeddings": False, "linear_bias": False},
    # Nemotron-4 (NeMo nemotron4-*.yaml: squared-relu, layernorm1p, rope, bias false, untied): the two MLP GEMMs of
    # the GELU form and a LayerNorm stand for squared-ReLU and LayerNorm1p (a `model` gap on each such case).
    "nemotron4": {"mlp": "gelu", "norm": "layernorm", "position": "rope", "tied_embeddings": False, "linear_bias": False},
}


def build_model(case: PublishedRun) -> ModelSpec:
    """The case's model: a preset (with the case's sequence length) or the shape the source states."""
    m = case.model
    if m.preset:
        spec = preset(m.preset)
        return spec.model_copy(update={"name": case.id, "max_seq_len": max(spec.max_seq_len, m.seq_len)})
    if m.arch is None:  # first-round cases: Megatron GPT, the 2024 Megatron-Core README ones with RoPE and untied
        core = case.id.startswith("megatron_core")
        style = {**ARCHS["gpt"], "position": "rope" if core else "learned", "tied_embeddings": not core}
    else:
        style = dict(ARCHS[m.arch])
    if m.position:
        style["position"] = m.position
    moe = None
    if m.moe:
        moe = MoESpec(num_experts=m.moe["experts"], top_k=m.moe["top_k"], expert_ffn_hidden_size=m.moe["expert_ffn"],
                      num_shared_experts=m.moe.get("shared_experts", 0))
    return ModelSpec(
        name=case.id, num_layers=m.layers, hidden_size=m.hidden, num_heads=m.heads, num_kv_heads=m.kv_heads,
        ffn_hidden_size=m.ffn, vocab_size=m.vocab if isinstance(m.vocab, int) else GPT2_PADDED_VOCAB,
        max_seq_len=m.seq_len, moe=moe, qkv_bias=bool(m.qkv_bias) or style["linear_bias"],
        source=(case.source.primary or case.source.row or source_key(case))[:200], **style,
    )


def build_cluster(case: PublishedRun):
    """The cluster the case is predicted on: the case's named profile, else Selene for A100 and DGX H100 for H100."""
    name = case.hardware.cluster or ("selene" if case.hardware.gpu.startswith("A100") else "dgx-h100")
    return hardware_profiles.cluster(name, gpus=case.hardware.num_gpus)
