"""`Plan`: the versioned, JSON-serialisable result of planning (the contract between planner and executor).

A plan embeds its inputs (model spec, cluster, workload) with fingerprints, the chosen `Layout`, the rank
placement, and the cost model's prediction (step time, throughput, MFU, memory per pipeline stage, and the
time breakdown). `Plan.model_validate_json(plan.model_dump_json()) == plan` exactly; no pickle anywhere.
`meshplan schema` prints `Plan.model_json_schema()`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from planner.errors import UserError, format_validation_error
from planner.layout import Layout, Workload
from planner.layout.names import ANY_FRAMEWORK, DEFAULT_FRAMEWORK, FRAMEWORK_NAMES
from planner.model import ModelSpec

SCHEMA_VERSION = 2
"""Bump on any incompatible change to the Plan JSON; readers refuse newer versions with a clear message.
2: `prediction.error_band` and `prediction.extrapolations` (plans of version 1 load with them empty)."""


def fingerprint(data: Any) -> str:
    """sha256 of canonical JSON (sorted keys, no spaces): equal inputs give equal fingerprints."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PlanInputs(_Frozen):
    """Everything the plan was computed from, embedded so the plan is self-contained."""

    model: ModelSpec
    cluster: dict[str, Any] = Field(description="The resolved cluster (hardware_profiles.Cluster as JSON).")
    workload: Workload
    model_fingerprint: str = ""
    cluster_fingerprint: str = ""

    @model_validator(mode="after")
    def _fill_fingerprints(self) -> PlanInputs:
        if not self.model_fingerprint:
            object.__setattr__(self, "model_fingerprint", fingerprint(self.model.model_dump(mode="json")))
        if not self.cluster_fingerprint:
            object.__setattr__(self, "cluster_fingerprint", fingerprint(self.cluster))
        return self


class RankPlacement(_Frozen):
    """Where one rank runs: host index in the cluster and GPU index on that host."""

    rank: int = Field(ge=0)
    host: int = Field(ge=0)
    gpu: int = Field(ge=0)


class StageMemory(_Frozen):
    """Peak memory of one pipeline rank (all its chunks), bytes per GPU."""

    stage: int = Field(ge=0, description="Pipeline rank.")
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    logits_bytes: float = 0.0
    buffers_bytes: float = Field(0.0, description="Communication buffers and gathered FSDP shards.")
    reserve_bytes: float = Field(0.0, description="Allocator fragmentation and runtime (CUDA context) reserve.")
    total_bytes: float
    capacity_bytes: float = Field(description="Memory of the GPU this stage runs on.")

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes


class Breakdown(_Frozen):
    """Critical-path seconds per step, by cause. Communication terms are the EXPOSED (non-overlapped) part."""

    compute_s: float = Field(description="Forward + backward (+ recompute) of the busiest pipeline rank.")
    tp_comm_s: float = 0.0
    cp_comm_s: float = 0.0
    ep_comm_s: float = 0.0
    pp_comm_s: float = 0.0
    dp_comm_s: float = 0.0
    bubble_s: float = 0.0
    optimizer_s: float = 0.0

    @property
    def total_s(self) -> float:
        return (
            self.compute_s
            + self.tp_comm_s
            + self.cp_comm_s
            + self.ep_comm_s
            + self.pp_comm_s
            + self.dp_comm_s
            + self.bubble_s
            + self.optimizer_s
        )


class ErrorBand(_Frozen):
    """Where real step times fell relative to the prediction on the validated runs that share this plan's
    features (planner.validation.bands): real = predicted x (1 + deviation), deviation in [low, high]."""

    low: float = Field(gt=-1, description="Smallest deviation of a comparable validated run (1; -0.05 = 5 % faster "
                       "than predicted).")
    high: float = Field(gt=-1, description="Largest deviation of a comparable validated run (1; 0.10 = 10 % slower "
                        "than predicted).")
    runs: int = Field(ge=0, description="How many validated runs the band rests on.")
    basis: str = Field(description="Which runs: the features they share with this plan.")


class Prediction(_Frozen):
    """What the cost model predicts for one step of the layout."""

    step_time_s: float
    tokens_per_s: float
    mfu: float = Field(description="Model FLOPs utilisation: model FLOP/s per GPU / peak (recompute not counted).")
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float = Field(description="Achieved TFLOP/s per GPU counting recomputation.")
    peak_memory_bytes: float = Field(description="Max over pipeline ranks.")
    memory_per_stage: tuple[StageMemory, ...]
    breakdown: Breakdown
    bubble_fraction: float = Field(0.0, description="Pipeline bubble time / step time.")
    idle_gpus: int = Field(0, ge=0, description="GPUs of the cluster the layout leaves unused.")
    error_band: ErrorBand | None = Field(None, description="How far real step times fell from predictions on "
                                         "comparable validated runs; null in plans written before schema 2.")
    extrapolations: tuple[str, ...] = Field((), description="Knobs of this plan outside every validated run, one "
                                            "sentence each; empty when the plan lies inside the validated envelope.")

    @property
    def pessimistic_step_time_s(self) -> float:
        """The step time at the band's upper end (the step time itself without a band)."""
        return self.step_time_s * (1 + self.error_band.high) if self.error_band else self.step_time_s


class Plan(_Frozen):
    """A parallel training plan: inputs, layout, placement and prediction. Round-trips through JSON exactly."""

    schema_version: int = Field(SCHEMA_VERSION, description="Plan JSON schema version.")
    inputs: PlanInputs
    layout: Layout
    placement: tuple[RankPlacement, ...] = Field(description="Rank -> (host, GPU), one entry per rank.")
    prediction: Prediction
    proven_optimal: bool = Field(False, description="True when the search proved no better layout exists under the cost model.")
    notes: tuple[str, ...] = ()
    framework: Literal[(*FRAMEWORK_NAMES, ANY_FRAMEWORK)] = Field(  # type: ignore[valid-type]
        DEFAULT_FRAMEWORK,
        description="Training framework the plan was made for (planner.frameworks): the search kept only layouts "
        "it can build and costed its runtime. meshplan = meshplan's own executor (`meshplan run`); any = no "
        "framework's rules (what-if studies of other software).",
    )

    @model_validator(mode="after")
    def _check(self) -> Plan:
        if self.schema_version > SCHEMA_VERSION:
            raise ValueError(
                f"schema_version={self.schema_version} is newer than this meshplan understands ({SCHEMA_VERSION}); "
                "upgrade meshplan"
            )
        if len(self.placement) != self.layout.world_size:
            raise ValueError(
                f"placement has {len(self.placement)} ranks but the layout's world size is {self.layout.world_size}"
            )
        return self

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    def to_json(self) -> str:
        return self.model_dump_json(indent=1)

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        """Read a plan file; any problem is a one-line `UserError` naming the file and field (the parts must
        also agree with each other: `planner.plan_checks`)."""
        path = Path(path)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise UserError(f"cannot read plan: {exc.strerror}", where=str(path),
                            fix="pass the path of a plan written by `meshplan plan --json FILE`") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise UserError("not UTF-8 text", where=str(path), fix="pass a plan JSON written by `meshplan plan --json`") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(
                f"invalid JSON at line {exc.lineno} column {exc.colno} ({exc.msg}); truncated?",
                where=str(path),
                fix="regenerate it with `meshplan plan --json FILE`",
            ) from None
        if isinstance(data, dict) and isinstance(data.get("schema_version"), int) and data["schema_version"] > SCHEMA_VERSION:
            raise UserError(
                f"schema_version {data['schema_version']} is newer than this meshplan ({SCHEMA_VERSION})",
                where=str(path),
                fix="upgrade meshplan",
            )
        if isinstance(data, dict) and isinstance(data.get("schema_version"), int) and data["schema_version"] < 1:
            raise UserError(f"schema_version {data['schema_version']} is not a meshplan plan version (1 and up)",
                            where=str(path), fix="regenerate it with `meshplan plan --json FILE`")
        try:
            plan = cls.model_validate(data)
        except ValidationError as exc:
            raise UserError(format_validation_error(exc, str(path), cls)) from None
        from planner.plan_checks import check_plan_file

        check_plan_file(plan, str(path))
        return plan
