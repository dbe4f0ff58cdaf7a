"""File formats of GPU and link profiles (pydantic v2), with a source for every number.

Numbers are plain fields (code reads `gpu.peak_flops["bf16"]`); provenance sits beside them in `sources`, a
map from a dotted field path (`memory_bytes`, `peak_flops.bf16`, `matmul_efficiency.half_flops`) or a
prefix of one (`peak_flops` covers every dtype) to a citation. `Sourced` checks both directions: every
number has a source, and every source names a field that exists (so a typo cannot hide a missing one).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from hardware_profiles.measured import FrameworkOverhead, MeasuredCollective

DTYPES = ("bf16", "fp16", "fp32", "tf32", "fp8", "fp64")
LINK_KINDS = ("nvlink", "pcie", "infiniband", "roce", "ethernet", "loopback")


def printable(value: str, allow: str = "") -> str:
    """`value` if it has no control characters (other than those in `allow`), else ValueError.

    Names go into one-line messages, tables, GraphML and exported launch scripts, where a line break would
    end a shell comment and start a command, and an escape sequence would drive the terminal.
    """
    bad = next((c for c in value if (ord(c) < 32 or 127 <= ord(c) < 160) and c not in allow), None)
    if bad is not None:
        raise ValueError(f"contains the control character {bad!r}; fix: use printable text")
    return value


Name = Annotated[str, AfterValidator(printable)]
"""A profile or element name: printable text on one line."""

# Fields that are a user's choice, not a hardware fact, and so need no citation.
_CHOICES = frozenset({"default_nodes", "weight"})


def _value_paths(value: object, path: str) -> list[str]:
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int | float):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _value_paths(v, f"{path}.{k}")]
    if isinstance(value, list | tuple):
        return [p for i, v in enumerate(value) for p in _value_paths(v, f"{path}.{i}")]
    if isinstance(value, BaseModel) and not isinstance(value, Sourced):
        return _numeric_paths(value, f"{path}.")
    return []


def _numeric_paths(model: BaseModel, prefix: str = "") -> list[str]:
    """Dotted paths of every number written in `model` (nested models, lists and dicts included).

    Fields left at their default were not written, so they need no citation.
    """
    return [
        p
        for name in type(model).model_fields
        if name != "sources" and name not in _CHOICES and name in model.model_fields_set
        for p in _value_paths(getattr(model, name), f"{prefix}{name}")
    ]


class Sourced(BaseModel):
    """Base of every profile that carries numbers: `sources` must cover each of them, and only them."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    sources: dict[str, str] = Field(
        description="Citation per numeric field: key = dotted field path or a prefix of it "
        "(e.g. 'peak_flops' covers every dtype), value = datasheet / paper+table / 'measured by ...'."
    )

    @model_validator(mode="after")
    def _every_number_has_a_source(self) -> Sourced:
        paths = _numeric_paths(self)
        missing = [p for p in paths if not any(p == k or p.startswith(k + ".") for k in self.sources)]
        if missing:
            raise ValueError(f"no source for {', '.join(missing)}; add an entry under 'sources' for each")
        unused = [k for k in self.sources if not any(p == k or p.startswith(k + ".") for p in paths)]
        if unused:
            raise ValueError(f"sources name no numeric field: {', '.join(unused)}; fields are {', '.join(paths)}")
        empty = [k for k, v in self.sources.items() if not v.strip()]
        if empty:
            raise ValueError(f"empty source text for {', '.join(empty)}")
        return self


class MatmulEfficiency(BaseModel):
    """Achieved-GEMM-throughput curve: achieved(F) = peak * max_fraction * F / (F + half_flops).

    F is the FLOP count of one GEMM (2*M*N*K). Large GEMMs approach `max_fraction` of the datasheet peak;
    a GEMM of `half_flops` FLOP reaches half of that (fixed per-kernel costs dominate small GEMMs).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    max_fraction: float = Field(gt=0, le=1, description="Best achieved fraction of dense bf16 peak for large GEMMs (1).")
    half_flops: float = Field(gt=0, description="GEMM size (FLOP) at which half of max_fraction is reached (FLOP).")


def optional_fraction(description: str) -> Any:
    """An optional share of a datasheet figure, in (0, 1]; null means the field's documented fallback."""
    return Field(default=None, gt=0, le=1, description=description)


class GPUProfile(Sourced):
    """One accelerator kind (or the local CPU process device for gloo runs)."""

    name: Name = Field(description="Profile name, e.g. 'h100-sxm'.")
    vendor: Name = Field(description="Vendor, e.g. 'nvidia', 'amd', 'cpu'.")
    description: str = Field(default="", description="Human name of the part.")
    memory_bytes: int = Field(gt=0, le=2**60, description="Device memory capacity usable by one process (bytes; at most 1 EiB).")
    memory_bandwidth_Bps: float = Field(gt=0, description="Peak device memory bandwidth (bytes/s).")
    memory_bandwidth_efficiency: float | None = optional_fraction(
        "Fraction of memory_bandwidth_Bps that a STREAM-like copy kernel reaches on this device (bytes "
        "read + written per second over the figure above) (1): the cost model times every memory-bound pass at "
        "memory_bandwidth_Bps x this; null: 1, for a figure that is already achievable (measured by meshplan "
        "calibrate) or a device with no published measurement.",
    )
    peak_flops: dict[str, float] = Field(
        description="Dense (no sparsity) peak throughput per dtype (FLOP/s); keys among " + ", ".join(DTYPES) + "."
    )
    matmul_efficiency: MatmulEfficiency = Field(description="Achieved bf16 GEMM throughput curve.")
    attention_efficiency: float | None = optional_fraction(
        "Fraction of dense bf16 peak a fused (Flash) attention kernel achieves (1); null: use the "
        "GEMM plateau.",
    )
    attention_efficiency_flash2: float | None = optional_fraction(
        "attention_efficiency of FlashAttention-2 where the GPU's fastest fused kernel is another "
        "(Hopper: cuDNN attention, FlashAttention-3), for workloads with attention_kernel 'flash2'; null: "
        "attention_efficiency (the profile's kernel is FlashAttention-2 already, as on Ampere).",
    )
    fp8_precise_accumulation_slowdown: float | None = Field(
        default=None,
        ge=1,
        le=4,
        description="Time of an fp8 GEMM that promotes its partial sums to fp32 (cuBLAS fast accumulation off, "
        "Transformer Engine's split accumulator) against the same GEMM with fast accumulation (1 or more); fp8 "
        "recipes run their backward GEMMs that way (cost.runtime.RuntimeCosts.fp8_backward_precise_accumulation); "
        "null: 1, for a GPU whose fp8 GEMMs have no such mode (Blackwell) or no published measurement.",
    )
    attention_half_flops: float | None = Field(
        default=None,
        gt=0,
        description="Fixed per-call cost of the fused attention kernel, as the forward FLOPs it would do in that time "
        "at attention_efficiency (FLOP); null: the GEMM curve's half_flops.",
    )
    sustained_fraction: float | None = optional_fraction(
        "Share of the isolated GEMM/attention throughput above that a training step sustains (1), "
        "measured on a whole layer (benchmarks/measure_sustained_layer.py); null: the cost model's default, "
        "fitted to Korthikanti et al. 2022 Table 4 on A100.",
    )
    comm_overlap_slowdown: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Fraction by which compute slows while collectives overlap it (NCCL's SMs and HBM traffic) (1); "
        "null: the cost model's default (planner.cost.interference).",
    )
    sm_count: int | None = Field(
        default=None,
        ge=1,
        le=10_000,
        description="Streaming multiprocessors (compute units) of the GPU (count): with it, a collective that leaves "
        "the host slows overlapped compute only by the SMs NCCL drives its NICs with (planner.cost.interference); "
        "null: every collective takes comm_overlap_slowdown.",
    )
    nvlink_bandwidth_Bps: float = Field(
        ge=0,
        description="GPU-to-GPU scale-up bandwidth per GPU per direction (bytes/s): NVLink, or the vendor's "
        "equivalent (AMD Infinity Fabric); 0 if none.",
    )
    pcie_bandwidth_Bps: float = Field(gt=0, description="Host interface bandwidth per direction (bytes/s).")
    tdp_w: float | None = Field(default=None, gt=0, description="Board power limit (W), if known.")
    framework_overhead: FrameworkOverhead | None = Field(
        default=None,
        description="Measured host-side time per layer and micro-batch beyond FLOPs and bytes (meshplan "
        "calibrate); null: not modelled.",
    )
    devices_at_full_speed: float | None = Field(
        default=None,
        ge=1,
        description="For devices that are processes sharing one host (CPU): how many run at full speed at once "
        "(effective cores, measured by meshplan calibrate); more busy ones share that throughput. null: "
        "independent devices (GPUs).",
    )

    @model_validator(mode="after")
    def _dtypes(self) -> GPUProfile:
        bad = [k for k in self.peak_flops if k not in DTYPES]
        if bad:
            raise ValueError(f"unknown dtype {bad[0]!r} in peak_flops; allowed: {', '.join(DTYPES)}")
        for need in ("bf16", "fp32"):
            if need not in self.peak_flops:
                raise ValueError(f"peak_flops needs '{need}' (the planner's compute term reads it)")
        if any(v <= 0 for v in self.peak_flops.values()):
            raise ValueError("peak_flops values must be > 0 (leave out a dtype the device lacks)")
        return self


class LinkProfile(Sourced):
    """One link or fabric type: the bandwidth of one port/attachment and the per-hop latency over it."""

    name: Name = Field(description="Profile name, e.g. 'ib-ndr'.")
    kind: Literal["nvlink", "pcie", "infiniband", "roce", "ethernet", "loopback"] = Field(
        description="Technology class; decides how the topology wires it (scale-up switch, PCIe tree, NIC)."
    )
    description: str = Field(default="", description="Human description.")
    bandwidth_Bps: float = Field(
        gt=0,
        description="Bandwidth per direction of one attachment (bytes/s): per GPU for NVLink (all its links "
        "together), per x16 slot for PCIe, per port for a NIC or switch port.",
    )
    latency_s: float = Field(ge=0, description="Latency of one ring step over this fabric (s).")
    protocol_efficiency: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Fraction of bandwidth_Bps that NCCL moves as payload (protocol and packet overhead): the "
        "topology uses bandwidth_Bps x protocol_efficiency as the usable capacity (1).",
    )
    measured_collectives: list[MeasuredCollective] | None = Field(
        default=None,
        description="Measured latency and bus bandwidth per collective kind and group size, each with its source. "
        "On a host's scale-up (or PCIe) link, as meshplan calibrate writes them: used instead of the ring model for "
        "groups inside one host. On a NIC link, entered by hand from a multi-host run (calibrate measures one "
        "host): a floor on the cost of groups that cross hosts over it, never faster than the ring model; "
        "null: ring model only.",
    )
