"""Branch-and-bound over shapes and micro-batch sizes, vectorised evaluation inside: the proven optimum.

Steps 1-3 depend on the input only and are shared by later searches of the same input (`prepared.prepare`).

1. Enumerate every valid shape (tp, cp, pp, dp, ep) (`space.shape_candidates`).
2. Bound each shape from below, vectorised over all shapes at once (`bounds.shape_bounds`): a FLOP bound on
   time and a fully sharded model-state bound on memory. Shapes whose memory bound exceeds the GPU cannot
   fit with any knobs and are dropped.
3. Bound each remaining (shape, micro-batch size) pair (`bounds.micro_batch_bounds`: compute and unhidden
   TP/CP traffic of the best layer split, each schedule's bubble and stage-boundary transfers, the optimizer
   step); a shape's bound is the least of its pairs'. The pair bounds are computed only for the shapes the
   visit reaches (`visit.VisitOrder`: in increasing FLOP bound, as far as the next batch or the K-th best).
4. Visit shapes in increasing bound; expand each batch of shapes to every knob combination of the pairs whose
   bound is below the K-th best step time found so far, drop the rows whose own bound cannot beat it either
   (the pair's bound with the row's recompute policy, `micro_batch_bounds(..., rc=)`, plus a lower bound of its
   exposed DP/FSDP time, `bounds.dp_bound_s`; whole ZeRO options of a pair are dropped before their rows are
   built, by the least of that over orders and schedules) or whose model states alone do not fit (before any
   feasible row is known these are only set aside: `_least_memory` evaluates them if nothing fits at all, for
   the least-memory layout the infeasible message names), and evaluate the rest best-first (`passes.first_pass`):
   in increasing row bound, in growing chunks, each in two passes: first with the DP and PP collectives at a
   capacity-only cost that is never slower than the topology's (`bounds.optimistic_bw`; memory is exact, and
   only the rows that fit are timed: `cost.evaluate.evaluate_fitting`), then exactly (`evaluate_table`'s
   numbers, the first pass's layer costs and memory re-assembled with the real DP and PP collectives:
   `cost.evaluate.evaluate_again`), only for the rows that fit and whose first-pass time can still beat the
   K-th best, in increasing first-pass time and in growing chunks, stopping once it passes the K-th best found so far (`passes.exact_pass`). The K-th best
   tightens after every chunk, so most rows of a batch are skipped by their bound. Most exact DP/PP topology
   queries (one per distinct group pattern, milliseconds each on 65,536 GPUs) are never asked. Rows are
   ranked by score, then by arrival (visit order of their shapes, then table order): the top K is the one
   evaluating every row in that order gives, whatever order they were evaluated in.
   Stop when the next shape's bound is no better than the K-th best: no unvisited layout can enter the top K.
   The result is exact under the cost model (`proven_optimal`); `brute_force` evaluates the same space
   without bounds and is the test oracle (tests/unit/test_search_oracle.py, test_search_bounds.py).

Objectives: `expected` ranks by the predicted step time; `pessimistic` by the upper end of its error band,
score = step time x (1 + high), where high depends on the layout's features (planner.validation.bands). The
search stays exact for it: every time bound is multiplied by the least (1 + high) any layout of the shape can
get (`bands.least_high_for_shapes`), and rows are compared by their own score.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from planner.cost.comm import AxisBandwidth
from planner.cost.context import CostContext
from planner.cost.evaluate import TableResult, evaluate_table
from planner.layout.numeric import sorted_unique
from planner.layout.rules import Tally
from planner.layout.table import COLUMNS, RecomputeCode
from planner.solver.bounds import (
    dp_bound_s,
    dp_option_bound_s,
    state_memory_bound_bytes,
)
from planner.solver.passes import first_pass as _first_pass
from planner.solver.passes import fitting_pass as _fitting_pass
from planner.solver.passes import merge_best as _merge_best
from planner.solver.passes import score_multiplier
from planner.solver.passes import take as _take
from planner.solver.prepared import Prepared, prepare
from planner.solver.space import (
    Pins,
    SearchLimits,
    expand_pairs,
    expand_shapes,
    mesh_order_codes,
    shape_candidates,
    space_of,
)

BATCH_ROWS = 60_000  # rows evaluated per numpy batch: large enough to amortise Python, small for memory
OBJECTIVES = ("expected", "pessimistic")
"""What the search minimises: the predicted step time, or the step time at its error band's upper end."""


@dataclass
class SearchStats:
    shapes_total: int = 0
    shapes_memory_pruned: int = 0
    shapes_bound_pruned: int = 0
    shapes_evaluated: int = 0
    shapes_without_layout: int = 0  # no micro-batch size divides the batch (or every schedule is excluded)
    micro_batches_bound_pruned: int = 0  # (shape, micro-batch) pairs of visited shapes skipped by their bound
    rows_evaluated: int = 0
    rows_bound_pruned: int = 0  # rows that fit but whose optimistic step time could not beat the K-th best
    rows_skipped_by_bound: int = 0  # rows not evaluated: priced out (bounds.dp_bound_s) or their states do not fit
    options_skipped_by_bound: int = 0  # (shape, micro-batch, ZeRO) options priced out before their rows were built
    rows_feasible: int = 0
    proven_optimal: bool = False


@dataclass
class SearchResult:
    """The K best rows (a table), their results, and how the search went."""

    table: dict[str, np.ndarray]
    step_time_s: np.ndarray
    stats: SearchStats
    score: np.ndarray | None = None  # what the rows are ranked by (= step_time_s for the expected objective)
    best_infeasible: tuple[dict[str, int], float] | None = None  # (row, peak bytes) of the least-memory layout seen
    all_feasible: dict[str, np.ndarray] | None = field(default=None, repr=False)  # for Pareto figures, when asked
    rejected: Tally = field(default_factory=Tally, repr=False)  # what the rules removed (the infeasible message)


def _option_filter(ctx: CostContext, space, stats: SearchStats, kth: float, shapes: tuple[np.ndarray, ...],
                   mb: np.ndarray, step_lb: np.ndarray, mult: np.ndarray):
    """`expand_pairs`'s ZeRO-option filter for the (shape, micro-batch) pairs (`shapes`, `mb`, their step-time
    bounds `step_lb` and least score multipliers `mult`): keep an option only if its bound (the pair's plus
    `bounds.dp_option_bound_s`, times the multiplier) can beat the K-th best and its model states alone fit.
    Both are at most the bound and memory of every row the option expands to (the row test in exact_search),
    so the search keeps exactly the rows it kept without this; it only stops building the others."""
    orders = mesh_order_codes(space.pins)

    def keep(row: np.ndarray, zero: np.ndarray, shard: np.ndarray) -> np.ndarray:
        options = dict(zip(("tp", "cp", "pp", "dp", "ep"), (a[row] for a in shapes)), mb=mb[row], zero=zero,
                       dp_shard=shard)
        options["m"] = int(space.facts.global_batch) // (options["dp"] * options["mb"])
        bound = (step_lb[row] + dp_option_bound_s(ctx, options, orders)) * mult[row]
        ok = (bound < kth) & (state_memory_bound_bytes(ctx, options) <= ctx.memory_capacity_bytes)
        stats.options_skipped_by_bound += int((~ok).sum())
        return ok

    return keep


def _row_step_lb(prep: Prepared, pairs: np.ndarray, pair_step_lb: np.ndarray, source: np.ndarray,
                 rc: np.ndarray) -> np.ndarray:
    """Per row (of pair `pairs[source]`), its pair's step-time bound, over the layouts with the row's recompute
    policy where that policy recomputes anything (`Prepared.recompute_step_lb`): never below the pair's."""
    step_lb = pair_step_lb[source]
    for code in sorted_unique(rc).tolist():
        if code != RecomputeCode.NONE:
            sel = np.nonzero(rc == code)[0]
            step_lb[sel] = prep.recompute_step_lb(pairs[source[sel]], code)
    return step_lb


@dataclass
class _Unbounded:
    """A batch searched before any feasible row was known: its shapes and the least-memory row among those of
    its rows that were evaluated (those whose model states fit): (position in the batch's rows, peak, row)."""

    shapes: np.ndarray
    least: tuple[int, float, dict[str, int]] | None = None


def _least_memory(ctx: CostContext, prep: Prepared, unbounded: list[_Unbounded], cache: dict, stats: SearchStats):
    """The least-memory row over every batch searched while no feasible row was known, the rows set aside
    included, as evaluating each batch in full reports it: the first row of the least peak, in order. It is the
    search's answer when nothing fits (the infeasible message names it). The set-aside rows are built again
    (with a tally of their own: the rules' counts were taken the first time) and evaluated now."""
    space = replace(prep.space, tally=Tally())
    least: tuple[dict[str, int], float] | None = None
    for r in unbounded:
        pairs = prep.visit.pairs_of(r.shapes)
        pairs = pairs[prep.visit.pair_lb[pairs] < np.inf]
        table = expand_pairs(space, tuple(a[pairs] for a in prep.pair_cols), prep.pair_mb[pairs])
        aside = np.nonzero(state_memory_bound_bytes(ctx, table) > ctx.memory_capacity_bytes)[0]
        best = r.least
        if len(aside):
            sub = _take(table, aside)
            worst = _fitting_pass(ctx, sub, cache, stats)[2]  # their states do not fit: neither do they
            stats.rows_skipped_by_bound -= len(aside)
            peak, j = worst
            if best is None or (peak, aside[j]) < (best[1], best[0]):
                best = (int(aside[j]), peak, {k: int(v[j]) for k, v in sub.items()})
        if best is not None and (least is None or best[1] < least[1]):
            least = (best[2], best[1])
    return least


def exact_search(
    ctx: CostContext, pins: Pins, limits: SearchLimits, top: int = 1, *, keep_all: bool = False,
    objective: str = "expected",
) -> SearchResult:
    """The `top` best feasible layouts under the cost model and `objective` (see module docstring)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective={objective!r}; use one of {', '.join(OBJECTIVES)}")
    bw = AxisBandwidth(ctx.topology)
    prep = prepare(ctx, pins, limits, objective)  # shapes, their bounds, pairs, visit order (prepared.py)
    space, shapes, visit = prep.space, prep.shapes, prep.visit
    pair_mb, pair_cols = prep.pair_mb, prep.pair_cols
    stats = SearchStats(shapes_total=prep.shapes_total)
    stats.shapes_memory_pruned = prep.shapes_total - len(shapes[0])
    stats.shapes_without_layout = len(shapes[0]) - visit.with_layout  # never evaluated
    cache: dict = {}  # optimistic-pass coefficients, shared by the batches

    best: dict[str, np.ndarray] | None = None
    best_t = np.zeros(0)  # scores of the best rows (step times under the expected objective)
    best_step = np.zeros(0)
    best_key = np.zeros(0, dtype=np.int64)  # arrival order of the best rows: ties go to the earlier
    batches = 0
    least_mem: tuple[dict[str, int], float] | None = None
    unbounded: list[_Unbounded] = []  # the batches searched while no feasible row was known, in order
    feasible_all: dict[str, np.ndarray] | None = None
    i = 0
    n_take = 4  # small first batch: the best shapes often settle the bound; then grow geometrically
    while i < visit.with_layout:
        kth = best_t[top - 1] if len(best_t) >= top else np.inf
        shape_idx = visit.order(i + n_take, kth)
        if i >= len(shape_idx) or visit.shape_lb[shape_idx[i]] >= kth:
            stats.shapes_bound_pruned += visit.with_layout - i  # (order() stopped at the K-th best)
            break
        batch = shape_idx[i : i + n_take]
        batch = batch[visit.shape_lb[batch] < kth]
        stats.shapes_bound_pruned += min(n_take, visit.with_layout - i) - len(batch)
        i += n_take
        pairs = visit.pairs_of(batch)
        pair_lb, pair_step_lb, pair_mult = (x[pairs] for x in (visit.pair_lb, visit.pair_step_lb, visit.pair_mult))
        stats.micro_batches_bound_pruned += int((pair_lb >= kth).sum())
        near = pair_lb < kth
        pairs, pair_step_lb, pair_mult = pairs[near], pair_step_lb[near], pair_mult[near]
        cols = tuple(a[pairs] for a in pair_cols)
        option_filter = None
        if not keep_all and np.isfinite(kth):
            option_filter = _option_filter(ctx, space, stats, kth, cols, pair_mb[pairs], pair_step_lb, pair_mult)
        table, source = expand_pairs(space, cols, pair_mb[pairs], with_source=True, zero_filter=option_filter)
        key = np.arange(len(source), dtype=np.int64) + (batches << 32)  # the rows' arrival order (ties: first wins)
        batches += 1
        row_lb = None
        if not keep_all and len(source):
            # A row's own bound: its pair's (with its recompute policy) plus its DP/FSDP exposure's.
            row_lb = (_row_step_lb(prep, pairs, pair_step_lb, source, table["rc"]) + dp_bound_s(ctx, table)) * (
                score_multiplier(ctx, table, objective))
        if row_lb is not None and np.isfinite(kth):
            # Rows that cannot beat the K-th best, or whose model states alone do not fit (once a feasible row is
            # known: else the least-memory row is reported).
            keep_rows = (row_lb < kth) & (state_memory_bound_bytes(ctx, table) <= ctx.memory_capacity_bytes)
            stats.rows_skipped_by_bound += int((~keep_rows).sum())
            if not keep_rows.all():
                at = np.nonzero(keep_rows)[0]
                table, key, row_lb = _take(table, at), key[at], row_lb[at]
        n_sizing = len(table["dp"])  # what sizes the next batch: the rows as before the set-aside below
        record = None
        if not keep_all and not np.isfinite(kth):
            # No feasible row known yet: rows whose model states alone do not fit are set aside unevaluated (they
            # cannot fit); their memory is needed only if nothing fits at all (`_least_memory`).
            fits_states = state_memory_bound_bytes(ctx, table) <= ctx.memory_capacity_bytes
            stats.rows_skipped_by_bound += int((~fits_states).sum())
            record = _Unbounded(batch)
            unbounded.append(record)
            kept_at = np.nonzero(fits_states)[0]
            if len(kept_at) < n_sizing:
                table, key = _take(table, kept_at), key[kept_at]
                row_lb = row_lb[kept_at] if row_lb is not None else None
        stats.shapes_evaluated += len(batch)
        n_rows = len(table["dp"])
        if n_sizing == 0:
            continue
        n_take = int(min(max(1, BATCH_ROWS * len(batch) // n_sizing), 2 * n_take))
        if n_rows == 0:
            continue
        if keep_all:
            ok, res, worst = _fitting_pass(ctx, table, cache, stats)
            if worst is not None and (least_mem is None or worst[0] < least_mem[1]):
                least_mem = ({k: int(v[worst[1]]) for k, v in table.items()}, worst[0])
            if res is None:
                continue
            table = _take(table, np.nonzero(ok)[0])
            res = evaluate_table(ctx, table, bw)  # second pass: exact, every row
            step, score, ok = res.step_time_s, res.step_time_s * score_multiplier(ctx, table, objective), res.fits
            cand = _take(table, np.nonzero(ok)[0])
            cand_all = dict(cand, step_time_ms=(res.step_time_s[ok] * 1e3), peak=res.peak_memory_bytes[ok])
            feasible_all = cand_all if feasible_all is None else {k: np.concatenate([feasible_all[k], cand_all[k]]) for k in cand_all}
            best, best_t, best_step, best_key = _merge_best((best, best_t, best_step, best_key),
                                                            (cand, score[ok], step[ok], np.zeros(int(ok.sum()))), top)
            continue
        # First pass, in increasing row bound and in growing chunks, so that the K-th best tightens while the
        # batch is evaluated (`passes.first_pass`).
        found, least = _first_pass(ctx, table, key, row_lb, bw, cache, (best, best_t, best_step, best_key), top,
                                   objective, stats)
        best, best_t, best_step, best_key = found
        if least is not None:
            if record is not None:
                record.least = (int(kept_at[least[1]]), least[0], least[2])
            if least_mem is None or least[0] < least_mem[1]:
                least_mem = (least[2], least[0])
    stats.proven_optimal = True
    if best is None:
        best = {k: np.zeros(0, dtype=np.int64) for k in COLUMNS}
        if stats.rows_skipped_by_bound:  # rows set aside while no feasible row was known
            least_mem = _least_memory(ctx, prep, unbounded, cache, stats)
    return SearchResult(table=best, step_time_s=best_step, stats=stats, score=best_t, best_infeasible=least_mem,
                        all_feasible=feasible_all, rejected=space.tally)


def brute_force(
    ctx: CostContext, pins: Pins, limits: SearchLimits, *, include_dominated: bool = True
) -> tuple[dict[str, np.ndarray], TableResult]:
    """Every layout of the space evaluated with no bounds (the test oracle); by default also the options the
    search leaves out as dominated, so the oracle checks those dominance arguments too."""
    limits = replace(limits, prune_dominated=not include_dominated)
    bw = AxisBandwidth(ctx.topology)
    space = space_of(ctx, pins, limits)
    table = expand_shapes(space, shape_candidates(space))
    return table, evaluate_table(ctx, table, bw)
