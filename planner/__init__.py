"""meshplan planner: topology graph, model specs, cost model and exact layout search (pure Python, no torch).

Public API: `search`, `evaluate`, `Plan`, `Layout`, `Workload` (see planner.api).
"""

from planner.layout import Layout
from planner.plan import Plan
from planner.workload import Workload


def search(*args, **kwargs):
    """See `planner.api.search`."""
    from planner.api import search as _search

    return _search(*args, **kwargs)


def evaluate(*args, **kwargs):
    """See `planner.api.evaluate`."""
    from planner.api import evaluate as _evaluate

    return _evaluate(*args, **kwargs)


__all__ = ["Layout", "Plan", "Workload", "evaluate", "search"]
