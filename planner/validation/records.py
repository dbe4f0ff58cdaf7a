"""The validated runs the planner knows: a committed data file, written by the published-runs benchmark.

`validated_runs.json` (next to this module) lists every published run the cost model was judged on: its
features (GPU family, runtime, degrees, schedule, scale, ...), its published MFU, and the signed error of the
prediction (the held-out error where the run's source was held out of every fit). The file is data only: error
bands (`bands.py`) and extrapolation checks (`extrapolations.py`) are computed from it when it is loaded.
Regenerate it with `.venv/bin/python benchmarks/published_runs.py --write-validated`; tests/unit/
test_validation_bands.py checks it is valid and that the cost model still predicts what it records.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hardware_profiles.reader import InputFileError, read_json
from planner.layout import Recompute, Schedule
from planner.layout.workload import AttentionKernel, DType

DATA_FILE = Path(__file__).with_name("validated_runs.json")
FILE_VERSION = 4


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ValidatedRun(_Frozen):
    """One published run as predicted with its published layout pinned."""

    id: str = Field(description="Case id in benchmarks/data/published_runs.yaml.")
    source: str = Field(description="Short source name (paper or repository) the run comes from.")
    framework: str = Field(description="The software that ran it (benchmarks/published_runs.py FRAMEWORKS).")
    family: str = Field(description="GPU family (planner.validation.features.gpu_family).")
    runtime: str = Field(description="Workload.runtime the run was costed with.")
    gpus: int = Field(ge=1, description="GPUs of the run.")
    nvlink_domain: int = Field(ge=1, description="GPUs sharing one NVLink fabric in its cluster.")
    tp: int = Field(ge=1)
    pp: int = Field(ge=1)
    cp: int = Field(ge=1)
    ep: int = Field(ge=1)
    zero: int = Field(ge=0, le=3)
    schedule: Schedule = Field(description="Pipeline schedule (1f1b when pp == 1).")
    recompute: Recompute = Field(description="Activation recomputation policy the run was costed with (the published "
                                 "one, or the best the framework allows where the source does not state it).")
    seq_len: int = Field(ge=1, description="Tokens per sequence.")
    dtype: DType = Field(description="Training precision the run was costed with (Workload.dtype).")
    attention_kernel: AttentionKernel = Field(description="Fused attention kernel the run was costed with "
                                              "(Workload.attention_kernel).")
    moe: bool = Field(description="Mixture-of-experts model.")
    published_mfu: float = Field(gt=0, le=1, description="Published throughput as MFU (model FLOPs of the planner's "
                                 "convention per GPU per second / dense peak).")
    error: float = Field(gt=-1, description="(predicted - published) / published step time.")
    held_out: bool = Field(description="True when no constant was fitted on this run's source.")


class ValidatedRuns(_Frozen):
    """The committed file: its version, how it was made, and the runs."""

    version: int = Field(FILE_VERSION, description="File format version.")
    generated_by: str = Field(description="Command that wrote the file.")
    runs: tuple[ValidatedRun, ...]


@cache
def load_validated_runs(path: Path = DATA_FILE) -> ValidatedRuns:
    """The validated runs (cached); a broken file is a clear error naming it, never a silent empty set."""
    try:
        data = read_json(path, what="validated-runs file")
        return ValidatedRuns.model_validate(data)
    except (InputFileError, ValidationError) as exc:
        raise RuntimeError(f"{path}: not a valid validated-runs file ({exc}); regenerate it with "
                           "`benchmarks/published_runs.py --write-validated`") from None


def write_validated_runs(runs: list[ValidatedRun], generated_by: str, path: Path = DATA_FILE) -> None:
    """Write the file (sorted by id, so a regeneration diff shows only what changed). Error bands computed from
    the old file stay cached until `bands.band_for.cache_clear()` (benchmarks/validated_runs.py calls it)."""
    doc = ValidatedRuns(generated_by=generated_by, runs=tuple(sorted(runs, key=lambda r: r.id)))
    Path(path).write_text(doc.model_dump_json(indent=1) + "\n")
    load_validated_runs.cache_clear()  # bands cached from the old file: bands.band_for.cache_clear()
