"""The part of a search that its bound never reads, prepared once per input and shared by later searches.

Before its first batch, `exact.exact_search` enumerates the valid shapes, bounds them (`bounds.shape_bounds`),
lists their (shape, micro-batch) pairs and sets up the lazy visit order (`visit.VisitOrder`), whose pair bounds
(`bounds.micro_batch_bounds`) are the same numbers whatever the K-th best is: only how far they are computed
depends on it. None of this depends on anything but the cost context's inputs, the pins, the limits and the
objective, so a warm search (the same question asked again: a CLI session, `sweep`, notebooks, `compare`)
would redo it identically. `prepare` keeps it in a small LRU cache keyed on all of those inputs; the search's
result itself is never cached (every batch, bound and evaluation after the visit order runs each time).

What the rules rejected while enumerating (`Tally`) is part of the prepared state: each search gets its own
copy of it, so the tallies of later stages add to it as they did before. A `VisitOrder` is only ever widened
(pair bounds computed for more shapes); its visit order is the start of the same full order whatever its
width (visit.py), so a search that starts from a wider one visits the same shapes in the same batches.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import astuple, dataclass, replace

import numpy as np

from planner.cost.comm import AxisBandwidth
from planner.cost.context import CostContext
from planner.layout.numeric import sorted_unique
from planner.solver.bounds import micro_batch_bounds, shape_bounds
from planner.solver.space import Pins, SearchLimits, Space, micro_batch_pairs, shape_candidates, space_of
from planner.solver.visit import VisitOrder
from planner.validation.bands import least_high_for_shapes

CACHE_SIZE = 8  # prepared inputs kept (LRU): a sweep or a session asks about a few at a time


@dataclass
class Prepared:
    """A search's input-determined tables (module docstring). `shapes` are the shapes whose memory bound fits,
    `time_lb` their FLOP bounds on the score, `pair_*` their (shape, micro-batch) pairs."""

    space: Space  # with the tally of the shape and micro-batch stages (copied per search by `prepare`)
    shapes_total: int
    shapes: tuple[np.ndarray, ...]
    time_lb: np.ndarray
    pair_shape: np.ndarray
    pair_mb: np.ndarray
    pair_cols: tuple[np.ndarray, ...]
    visit: VisitOrder
    recompute_step_lb: Callable[[np.ndarray, int], np.ndarray]
    """(pairs, recompute code) -> the pairs' step-time bounds over the layouts with that recompute policy
    (`bounds.micro_batch_bounds(..., rc=)`), computed once per pair and policy, as the visit's bounds are."""


_CACHE: OrderedDict[Hashable, Prepared] = OrderedDict()


def cache_key(ctx: CostContext, pins: Pins, limits: SearchLimits, objective: str) -> Hashable | None:
    """Everything the prepared tables depend on: the cost context's inputs (model, cluster hardware, workload,
    attention and dropout settings, framework), the pins, the limits and the objective. None (no caching) for
    a cluster without a fingerprint, whose content cannot be told apart from another's."""
    fingerprint = getattr(ctx.cluster, "fingerprint", None)
    if fingerprint is None:
        return None
    pin_items = tuple(sorted((k, repr(v)) for k, v in pins.values.items()))
    return (ctx.model.model_dump_json(), fingerprint(), ctx.workload.model_dump_json(), ctx.flash_attention,
            ctx.dropout, ctx.framework, pin_items, astuple(limits), objective)


def prepare(ctx: CostContext, pins: Pins, limits: SearchLimits, objective: str) -> Prepared:
    """The prepared tables of this input, from the cache when the same input was prepared before. The returned
    object's `space` has its own tally (a copy): the caller may add to it."""
    key = cache_key(ctx, pins, limits, objective)
    if key is None:
        return _build(ctx, pins, limits, objective)
    hit = _CACHE.get(key)
    if hit is None:
        hit = _CACHE[key] = _build(ctx, pins, limits, objective)
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    else:
        _CACHE.move_to_end(key)
    space = copy.copy(hit.space)
    space.tally = copy.deepcopy(hit.space.tally)
    return replace(hit, space=space)


def clear() -> None:
    """Forget every prepared input (tests; the cache is otherwise bounded by `CACHE_SIZE`)."""
    _CACHE.clear()


def _build(ctx: CostContext, pins: Pins, limits: SearchLimits, objective: str) -> Prepared:
    space = space_of(ctx, pins, limits)
    shapes = shape_candidates(space)
    shapes_total = len(shapes[0])
    time_lb, mem_lb = shape_bounds(ctx, *shapes)
    fits = np.nonzero(mem_lb <= ctx.memory_capacity_bytes)[0]
    shapes = tuple(a[fits] for a in shapes)
    time_lb = time_lb[fits]
    if objective != "expected":  # bounds on the score: the least multiplier any layout of the shape gets
        time_lb = time_lb * (1.0 + least_high_for_shapes(ctx, *shapes))
    pair_shape, pair_mb = micro_batch_pairs(space, shapes)
    pair_cols = tuple(a[pair_shape] for a in shapes)
    bw = AxisBandwidth(ctx.topology)

    def pair_bounds(pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Bounds of the pairs `pairs`: on the score, on the step time, and the least score multiplier."""
        cols = tuple(a[pairs] for a in pair_cols)
        step = micro_batch_bounds(ctx, bw, pins, *cols, pair_mb[pairs], limits)
        step = np.where(np.isfinite(step), step, 0.0)
        mult = np.ones(len(pairs))  # the least score multiplier of each pair's layouts
        score = step
        if objective != "expected":
            mult = 1.0 + least_high_for_shapes(ctx, *cols)
            score = step * mult
        return np.maximum(score, time_lb[pair_shape[pairs]]), step, mult

    visit = VisitOrder(time_lb, pair_shape, pair_bounds)
    with_recompute: dict[int, np.ndarray] = {}  # per recompute code: each pair's bound (NaN: not computed yet)

    def recompute_step_lb(pairs: np.ndarray, code: int) -> np.ndarray:
        known = with_recompute.setdefault(code, np.full(len(pair_shape), np.nan))
        new = sorted_unique(pairs[np.isnan(known[pairs])])
        if len(new):
            cols = tuple(a[new] for a in pair_cols)
            step = micro_batch_bounds(ctx, bw, pins, *cols, pair_mb[new], limits, rc=np.full(len(new), code))
            known[new] = np.where(np.isfinite(step), step, 0.0)
        return known[pairs]

    return Prepared(space, shapes_total, shapes, time_lb, pair_shape, pair_mb, pair_cols, visit, recompute_step_lb)
