"""The plan and what running it takes: the contract between the planner and the executor.

- `planner.plan.schema`: `Plan`, the versioned, JSON-serialisable result of planning (inputs with
  fingerprints, the chosen `Layout`, the rank placement, the prediction); `meshplan schema` prints its JSON
  Schema.
- `planner.plan.run_options`: the options of the workers `meshplan run` launches (`python -m executor`).
- `planner.plan.preflight`: the checks made before a launch, shared with the workers.

All of it is torch-free, so the planner and the executor both read it. The plan's names are re-exported here
(`from planner.plan import Plan`) and loaded on first use: `meshplan --help` reads the run options' bounds
without building the plan's pydantic models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.plan.schema import (
        SCHEMA_VERSION,
        Breakdown,
        ErrorBand,
        Plan,
        PlanInputs,
        Prediction,
        RankPlacement,
        StageMemory,
        peak_flops_of_hosts,
        peak_flops_of_ranks,
        placement_of,
    )

__all__ = ["SCHEMA_VERSION", "Breakdown", "ErrorBand", "Plan", "PlanInputs", "Prediction", "RankPlacement", "StageMemory",
           "peak_flops_of_hosts", "peak_flops_of_ranks", "placement_of"]


def __getattr__(name: str) -> Any:
    """The plan schema's names, imported when first asked for (PEP 562)."""
    if name.startswith("__"):
        raise AttributeError(name)
    import importlib

    schema = importlib.import_module("planner.plan.schema")  # not `from planner.plan import`: that asks us again
    try:
        return getattr(schema, name)
    except AttributeError:
        raise AttributeError(f"module 'planner.plan' has no attribute {name!r}") from None
