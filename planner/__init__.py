"""meshplan planner: topology graph, model specs, cost model and exact layout search (pure Python, no torch).

Public API: `search`, `evaluate`, `sweep`, `Plan`, `Layout`, `Workload` (see planner.api, planner.sweep).
The names are loaded on first use (PEP 562), so `import planner` and the `meshplan` command line start
without pydantic models, numpy or the solver until a command needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# Importing the module of the same name first and binding the function over it makes `planner.sweep` the
# function (`from planner.sweep import COLUMNS` still reaches the module); the module imports nothing heavy.
from planner.sweep import sweep

if TYPE_CHECKING:
    from planner.layout import Layout, Workload
    from planner.plan import Plan

def __getattr__(name: str) -> Any:
    """`Layout`, `Plan` and `Workload`, imported on first use (then cached as module attributes)."""
    if name == "Layout":
        from planner.layout import Layout as value
    elif name == "Plan":
        from planner.plan import Plan as value
    elif name == "Workload":
        from planner.layout import Workload as value
    else:
        raise AttributeError(f"module 'planner' has no attribute {name!r}")
    globals()[name] = value
    return value


def search(*args, **kwargs):
    """See `planner.api.search`."""
    from planner.api import search as _search

    return _search(*args, **kwargs)


def evaluate(*args, **kwargs):
    """See `planner.api.evaluate`."""
    from planner.api import evaluate as _evaluate

    return _evaluate(*args, **kwargs)


__all__ = ["Layout", "Plan", "Workload", "evaluate", "search", "sweep"]
