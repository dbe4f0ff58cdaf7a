"""Kept for existing imports: `Workload` lives in `planner.layout` (planner/layout/workload.py)."""

from planner.layout.workload import (
    BYTES_PER_ELEMENT,
    DEFAULT_GLOBAL_BATCH_SEQS,
    DEFAULT_SEQ_LEN,
    DType,
    Workload,
)

__all__ = ["BYTES_PER_ELEMENT", "DEFAULT_GLOBAL_BATCH_SEQS", "DEFAULT_SEQ_LEN", "DType", "Workload"]
