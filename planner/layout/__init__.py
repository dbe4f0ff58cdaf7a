"""The layout vocabulary every part of meshplan speaks (pydantic and numpy only; the ground floor).

    from planner.layout import Layout, Workload, rules, schedules
    rules.check(layout, model, workload, gpus)          # one UserError naming every broken rule
    schedules.SCHEDULES["1f1b"].torch_class              # the one schedule registry

Modules, one concept each: `layout` (`Layout`, `row_to_layout`, `KNOBS`), `workload` (`Workload` and its
model-adapted defaults), `table` (the integer table encoding: `COLUMNS`, `ScheduleCode`, `RecomputeCode`,
`MESH_ORDERS`, `layout_to_row`), `schedules` (the pipeline-schedule registry), `rules` (the rule set and
how it is applied; `rule` holds the `Rule` and `Facts` types, `framework_rules` each framework's rules and
the knob values it runs), `choices` (the candidate values the search and `explain` enumerate, filtered by the
rules), `expert_groups` (how EP groups form from the data axes) and `names` (the names and defaults the
command line reads before anything heavy is loaded: knob values, framework names). The names below are loaded on
first use (PEP 562), so `planner.layout.names` and `planner.layout.schedules` stay free of numpy and pydantic.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.layout import choices, rules, schedules
    from planner.layout.layout import KNOBS, Layout, Recompute, Schedule, row_to_layout
    from planner.layout.names import (
        DEFAULT_GLOBAL_BATCH_SEQS,
        DEFAULT_MESH_AXES,
        DEFAULT_SEQ_LEN,
        RECOMPUTE_NAMES,
    )
    from planner.layout.schedules import SCHEDULE_NAMES, SCHEDULES, PipelineSchedule, ScheduleCode
    from planner.layout.table import (
        COLUMNS,
        MESH_ORDERS,
        NUM_SEARCHED_ORDERS,
        SEARCHED_ORDERS,
        RecomputeCode,
        layout_to_row,
    )
    from planner.layout.workload import Workload

_HOME = {
    "KNOBS": "layout", "Layout": "layout", "Recompute": "layout", "Schedule": "layout", "row_to_layout": "layout",
    "DEFAULT_GLOBAL_BATCH_SEQS": "names", "DEFAULT_MESH_AXES": "names", "DEFAULT_SEQ_LEN": "names",
    "RECOMPUTE_NAMES": "names",
    "SCHEDULE_NAMES": "schedules", "SCHEDULES": "schedules", "PipelineSchedule": "schedules", "ScheduleCode": "schedules",
    "COLUMNS": "table", "MESH_ORDERS": "table", "NUM_SEARCHED_ORDERS": "table", "SEARCHED_ORDERS": "table",
    "RecomputeCode": "table", "layout_to_row": "table",
    "Workload": "workload",
}
_MODULES = ("choices", "layout", "names", "rules", "schedules", "table", "workload")
"""Submodules reachable as attributes (`from planner.layout import rules`); the others are imported by path."""

__all__ = [
    "COLUMNS", "DEFAULT_GLOBAL_BATCH_SEQS", "DEFAULT_MESH_AXES", "DEFAULT_SEQ_LEN", "KNOBS", "MESH_ORDERS",
    "NUM_SEARCHED_ORDERS", "RECOMPUTE_NAMES", "SCHEDULES", "SCHEDULE_NAMES", "SEARCHED_ORDERS", "Layout",
    "PipelineSchedule", "Recompute", "RecomputeCode", "Schedule", "ScheduleCode", "Workload", "choices",
    "layout_to_row", "row_to_layout", "rules", "schedules",
]


def _module(name: str) -> ModuleType:
    if name == "choices":
        import planner.layout.choices as module
    elif name == "layout":
        import planner.layout.layout as module
    elif name == "names":
        import planner.layout.names as module
    elif name == "rules":
        import planner.layout.rules as module
    elif name == "schedules":
        import planner.layout.schedules as module
    elif name == "table":
        import planner.layout.table as module
    else:
        import planner.layout.workload as module
    return module


def __getattr__(name: str) -> Any:
    """A public name (or submodule) of the package, imported on first use and then cached."""
    if name in _MODULES:
        value: Any = _module(name)
    elif name in _HOME:
        value = getattr(_module(_HOME[name]), name)
    else:
        raise AttributeError(f"module 'planner.layout' has no attribute {name!r}")
    globals()[name] = value
    return value
