"""`Plan`: the versioned, JSON-serialisable result of planning (the contract between planner and executor).

A plan embeds its inputs (model spec, cluster, workload) with fingerprints, the chosen `Layout`, the rank
placement, and the cost model's prediction (step time, throughput, MFU, memory per pipeline stage, and the
time breakdown). `Plan.model_validate_json(plan.model_dump_json()) == plan` exactly; no pickle anywhere.
`meshplan schema` prints `Plan.model_json_schema()`.
"""

from __future__ import annotations

import gc
import hashlib
import json
from collections.abc import Iterable
from operator import attrgetter
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hardware_profiles.reader import MAX_PLAN_BYTES, InputFileError, read_json
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


def peak_flops_of_ranks(cluster: dict[str, Any], placement: tuple[RankPlacement, ...], dtype: str) -> float:
    """Sum of the peak FLOP/s (`dtype`) of the GPU each rank runs on: the denominator of MFU.

    On a mixed cluster (say A100 and H100 hosts) each rank counts its own GPU's peak, so MFU is achieved FLOP/s
    over what these GPUs could do together; dividing by W x one GPU's peak would overstate it (the step runs
    at the slow GPUs' pace while the fast ones idle). `cluster` is the plan's embedded cluster (JSON form).
    """
    return peak_flops_of_hosts(cluster, map(attrgetter("host"), placement), dtype)


def peak_flops_of_hosts(cluster: dict[str, Any], hosts: Iterable[int], dtype: str) -> float:
    """`peak_flops_of_ranks` from each rank's host index alone, in rank order (the same sum, bit for bit): what
    the planner uses before (or without) building the placement's objects."""
    gpus = cluster.get("gpus") or {}
    per_host: list[str] = []
    for group in cluster.get("host_groups") or []:
        per_host += [group["node"]["gpu"]] * int(group["hosts"])
    peak_of_host = [gpus[gpu]["peak_flops"][dtype] for gpu in per_host]
    # the same values added in the same (rank) order as summing per rank; a lookup per host, not per rank
    return float(sum(map(peak_of_host.__getitem__, hosts)))


class _Frozen(BaseModel):
    # allow_inf_nan=False: NaN and +-Infinity pass every ge/le bound (comparisons with NaN are false), so a
    # plan holding them would be "valid"; the reader refuses them in JSON text too (hardware_profiles.reader).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


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


_MODEL_SLOTS = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
"""What `model_construct` sets on a new model instance (pydantic v2 keeps them in slots of BaseModel)."""


def _slot_setter(cls: type, name: str) -> Any:
    """The `__set__` of the data descriptor that stores attribute `name` of `cls`'s instances."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name].__set__
    raise AttributeError(f"{cls.__name__} has no slot {name}")


def placement_of(hosts_and_gpus: list[tuple[int, int]]) -> tuple[RankPlacement, ...]:
    """`RankPlacement`s of ranks 0..n-1 from meshplan's own topology (`Topology.hosts_and_indices`: non-negative
    ints by construction), built without per-object validation.

    A plan on 65,536 GPUs holds 65,536 of them, and validating each costs about 0.2 s of a sub-second command
    (`RankPlacement.model_construct` is slower still, for its per-call work). This sets exactly what
    `model_construct` sets (the fields, the set of fields given, no extras, no private state), so the objects
    equal validated ones, compare and serialise the same, and the plan's own checks still run; a plan read from
    a file is validated in full as before (tests/unit/test_plan_placement.py)."""
    new = object.__new__
    # The instance slots' own setters: each call skips object.__setattr__'s lookup of the name along the MRO
    # (four per rank; ~40% of this function's time at 65,536 ranks).
    set_dict, set_fields, set_extra, set_private = (_slot_setter(RankPlacement, name) for name in _MODEL_SLOTS)
    out = []
    # Three new containers per rank and no reference cycles: the cyclic collector would run hundreds of
    # times over 65,536 ranks (and scan every live object a few times, ~0.1 s) to free nothing. Paused here.
    paused = gc.isenabled()
    gc.disable()
    try:
        for rank, (host, gpu) in enumerate(hosts_and_gpus):
            item = new(RankPlacement)
            set_dict(item, {"rank": rank, "host": host, "gpu": gpu})
            set_fields(item, {"rank", "host", "gpu"})  # every field given; a set of its own
            set_extra(item, None)
            set_private(item, None)
            out.append(item)
    finally:
        if paused:
            gc.enable()
    return tuple(out)


class StageMemory(_Frozen):
    """Peak memory of one pipeline rank (all its chunks), bytes per GPU."""

    stage: int = Field(ge=0, description="Pipeline rank.")
    weights_bytes: float = Field(ge=0, description="Model weights (bytes).")
    gradients_bytes: float = Field(ge=0, description="Gradients (bytes).")
    optimizer_bytes: float = Field(ge=0, description="Optimizer state (bytes).")
    activations_bytes: float = Field(ge=0, description="Activations kept for backward (bytes).")
    logits_bytes: float = Field(0.0, ge=0, description="Logits and loss buffers (bytes).")
    buffers_bytes: float = Field(0.0, ge=0, description="Communication buffers and gathered FSDP shards (bytes).")
    reserve_bytes: float = Field(0.0, ge=0, description="Allocator fragmentation and runtime (CUDA context) reserve (bytes).")
    total_bytes: float = Field(ge=0, description="Sum of the above (bytes).")
    capacity_bytes: float = Field(gt=0, description="Memory of the GPU this stage runs on (bytes).")

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes


class Breakdown(_Frozen):
    """Critical-path seconds per step, by cause. Communication terms are the EXPOSED (non-overlapped) part."""

    compute_s: float = Field(ge=0, description="Forward + backward (+ recompute) of the busiest pipeline rank (s).")
    tp_comm_s: float = Field(0.0, ge=0, description="Exposed tensor-parallel communication (s).")
    cp_comm_s: float = Field(0.0, ge=0, description="Exposed context-parallel communication (s).")
    ep_comm_s: float = Field(0.0, ge=0, description="Exposed expert-parallel communication (s).")
    pp_comm_s: float = Field(0.0, ge=0, description="Exposed pipeline point-to-point communication (s).")
    dp_comm_s: float = Field(0.0, ge=0, description="Exposed data-parallel / FSDP communication (s).")
    bubble_s: float = Field(0.0, ge=0, description="Pipeline bubble (s).")
    optimizer_s: float = Field(0.0, ge=0, description="Optimizer step (s).")

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

    @model_validator(mode="after")
    def _ordered(self) -> ErrorBand:
        if self.low > self.high:
            raise ValueError(f"error_band low={self.low} is above high={self.high}")
        return self


class Prediction(_Frozen):
    """What the cost model predicts for one step of the layout."""

    step_time_s: float = Field(gt=0, description="Predicted time of one optimizer step (s).")
    tokens_per_s: float = Field(gt=0, description="Predicted training throughput (tokens/s).")
    mfu: float = Field(ge=0, le=1, description=(
        "Model FLOPs utilisation, a fraction (human output shows it as a percentage): achieved model FLOP/s over "
        "the sum of the peak FLOP/s of every rank's GPU, each from the placement (recompute not counted)."))
    model_tflops_per_gpu: float = Field(ge=0, description="Achieved model TFLOP/s per GPU, averaged over ranks.")
    hardware_tflops_per_gpu: float = Field(ge=0, description="Achieved TFLOP/s per GPU counting recomputation.")
    peak_memory_bytes: float = Field(ge=0, description="Max over pipeline ranks (bytes).")
    memory_per_stage: tuple[StageMemory, ...]
    breakdown: Breakdown
    bubble_fraction: float = Field(0.0, ge=0, le=1, description="Pipeline bubble time / step time (fraction).")
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
            data = read_json(path, max_bytes=MAX_PLAN_BYTES, what="plan")
        except InputFileError as exc:
            truncated = "; truncated?" if exc.problem.startswith("invalid JSON") else ""
            raise UserError(exc.problem + truncated, where=exc.where,
                            fix="pass a plan written by `meshplan plan --json FILE` (or regenerate it)") from None
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
