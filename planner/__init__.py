"""meshplan planner: topology graph, model specs, cost model and exact layout search (pure Python, no torch).

Public API: `search`, `evaluate`, `sweep`, `Plan`, `Layout`, `Workload` (see planner.api, planner.sweep).
"""

from planner.layout import Layout
from planner.plan import Plan

# Importing the module of the same name first and binding the function over it makes `planner.sweep` the
# function (`from planner.sweep import COLUMNS` still reaches the module); the module imports nothing heavy.
from planner.sweep import sweep
from planner.workload import Workload


def search(*args, **kwargs):
    """See `planner.api.search`."""
    from planner.api import search as _search

    return _search(*args, **kwargs)


def evaluate(*args, **kwargs):
    """See `planner.api.evaluate`."""
    from planner.api import evaluate as _evaluate

    return _evaluate(*args, **kwargs)


__all__ = ["Layout", "Plan", "Workload", "evaluate", "search", "sweep"]
