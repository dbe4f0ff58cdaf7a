"""A batch of search rows through the two evaluation passes, best-first (the inner loop of `exact.exact_search`).

`first_pass` takes a batch's rows in increasing own bound, in growing chunks (without the rows a memory lower
bound rules out once a feasible row is known, `memory_bound.cannot_fit`): the optimistic first pass
(`cost.evaluate.evaluate_fitting` with `bounds.optimistic_bw`: exact memory, DP/PP collectives at a
capacity-only cost), then the exact pass (`exact_pass`) for the rows that can still beat the K-th best; the
K-th best tightens after every chunk, so most rows of a batch are never evaluated. `merge_best` keeps the top K
by score, then arrival (ties go to the row that comes first in the visit), so the order rows are evaluated
in never changes the answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.cost.assemble import assemble
from planner.cost.comm import AxisBandwidth
from planner.cost.context import CostContext
from planner.cost.evaluate import FittingRows, evaluate_again, evaluate_table, fitting_rows
from planner.layout.table import COLUMNS
from planner.solver.bounds import optimistic_bw
from planner.solver.memory_bound import cannot_fit
from planner.validation.bands import high_for_table

if TYPE_CHECKING:
    from planner.solver.exact import SearchStats


def take(table: dict[str, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[idx] for k, v in table.items()}


def concat(a: dict[str, np.ndarray] | None, b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if a is None:
        return b
    return {k: np.concatenate([a[k], b[k]]) for k in COLUMNS}


def score_multiplier(ctx: CostContext, table: dict[str, np.ndarray], objective: str) -> np.ndarray | float:
    """What a row's step time is multiplied by to rank it under `objective` (exact.py's module docstring)."""
    if objective == "expected":
        return 1.0
    return 1.0 + high_for_table(ctx, table)


EXACT_CHUNK_ROWS = 32
"""`exact_pass` evaluates `2 * top` rows, then this many, then doubling. The small probe first: the optimistic
first pass is usually tight, so the best few rows by it often settle the K-th best alone, and every row evaluated
exactly asks the topology for its DP/PP groups' collectives (milliseconds per new group pattern on 65,536 GPUs,
once per process without the disk cache); a probe that does not settle it costs one more call (about 1 ms warm)."""


def exact_pass(ctx: CostContext, table: dict[str, np.ndarray], bw: AxisBandwidth, lower: np.ndarray,
                best_t: np.ndarray, top: int, objective: str, again: tuple[FittingRows, np.ndarray] | None = None):
    """The second pass: exact step times of the rows whose first-pass score `lower` (never above their exact
    score) can still beat the K-th best, visited in increasing `lower` in growing chunks, so that the K-th best
    tightens while they are evaluated. A row left out has `lower` above a K-th best already found (of
    `best_t`, the scores kept so far, and the rows evaluated here), so its exact score is above the final K-th
    best too: it can neither enter the top K nor tie with it, and the top K (ties broken by order) is the one
    evaluating every row gives, whatever the chunk sizes (`EXACT_CHUNK_ROWS`). Every formula is per row: a row's
    numbers do not depend on its chunk.
    `again`: (the first pass's `FittingRows`, the row of them each table row is): the rows are then timed by
    `evaluate_again` (the first pass's layer costs and memory, `bw`'s DP and PP collectives), the same numbers.
    Returns the evaluated rows in table order: (table, step times, scores, fits)."""
    n = len(lower)
    order = np.argsort(lower, kind="stable")
    step, score = np.full(n, np.nan), np.full(n, np.inf)
    fits, done = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    seen = np.sort(best_t)
    kth = seen[top - 1] if len(seen) >= top else np.inf
    probe = 2 * top  # EXACT_CHUNK_ROWS's docstring: the best rows by `lower` alone first
    pos, size = 0, probe
    while pos < n and lower[order[pos]] <= kth:
        chunk = order[pos : pos + size]
        chunk = np.sort(chunk[lower[chunk] <= kth])
        sub = take(table, chunk)
        res = evaluate_table(ctx, sub, bw) if again is None else evaluate_again(ctx, again[0], again[1][chunk], bw)
        step[chunk], fits[chunk], done[chunk] = res.step_time_s, res.fits, True
        score[chunk] = res.step_time_s * score_multiplier(ctx, sub, objective)
        seen = np.sort(np.concatenate([seen, score[chunk][res.fits]]))
        kth = seen[top - 1] if len(seen) >= top else np.inf
        pos, size = pos + size, (max(probe, EXACT_CHUNK_ROWS) if pos == 0 else 2 * size)
    rows = np.nonzero(done)[0]
    return take(table, rows), step[rows], score[rows], fits[rows]


def fitting_pass(ctx: CostContext, table: dict[str, np.ndarray], cache: dict, stats: SearchStats):
    """The optimistic first pass over `table` (`evaluate_fitting` with `bounds.optimistic_bw`: exact memory, DP/PP
    collectives at a capacity-only cost), counted in `stats`. Returns (fits, result for the rows that fit or None,
    least) where least is (peak, index) of the first least-memory row when some row does not fit, else None."""
    ok, res, least, _ = _fitting(ctx, table, cache, stats)
    return ok, res, least


def _fitting(ctx: CostContext, table: dict[str, np.ndarray], cache: dict, stats: SearchStats):
    """`fitting_pass`, and the fitting rows' parts (`cost.evaluate.fitting_rows`) for the exact pass."""
    ok, peak, rows = fitting_rows(ctx, table, optimistic_bw(ctx.topology, table, cache))
    res = None if rows is None else assemble(ctx, rows.table, rows.work, rows.lc)
    stats.rows_evaluated += len(ok)
    stats.rows_feasible += int(ok.sum())
    if ok.all():
        return ok, res, None, rows
    j = int(np.argmin(peak))
    return ok, res, (float(peak[j]), j), rows


FIRST_PASS_CHUNK = 512  # rows in a batch's first chunk (then doubling): smaller skips more rows, pays more calls


def merge_best(best, cand, top: int):
    """The `top` best of the rows kept so far and new candidates, each (table, scores, step times, arrival
    keys), by score and then arrival (the first of tied rows wins, as evaluating every row in order gives)."""
    table, score, step, key = best
    merged = concat(table, cand[0])
    merged_t, merged_step, merged_key = (np.concatenate([a, b]) for a, b in zip((score, step, key), cand[1:]))
    keep = np.lexsort((merged_key, merged_t))[:top]
    return take(merged, keep), merged_t[keep], merged_step[keep], merged_key[keep]


def first_pass(ctx: CostContext, table: dict[str, np.ndarray], key: np.ndarray, row_lb: np.ndarray,
                bw: AxisBandwidth, cache: dict, best, top: int, objective: str, stats: SearchStats):
    """Evaluate one batch's rows (arrival keys `key`, own bounds `row_lb`) best-first: in increasing bound, in
    growing chunks, each through the optimistic first pass and then `exact_pass`, merging the results into
    `best` (see `merge_best`) so that the K-th best tightens before the next chunk. A row is skipped once its
    bound, or its first-pass score, is above the K-th best found so far (not equal: a tie with an earlier
    arrival would win), or, once a feasible row is known, when it cannot fit whatever its layer times
    (`memory_bound.cannot_fit`); every row skipped has an exact score above the final K-th best or does not fit,
    so the top K is the one evaluating every row in order gives. Returns (best, least) where least is (peak, row index, row) of the
    least-memory row that does not fit (the first of ties in table order), or None."""
    n = len(row_lb)
    row_lb = np.where(np.isnan(row_lb), -np.inf, row_lb)  # no bound known: evaluate it first
    order = np.argsort(row_lb, kind="stable")
    least: tuple[float, int, dict[str, int]] | None = None
    start, size = 0, FIRST_PASS_CHUNK
    while start < n:
        scores = best[1]
        kth = scores[top - 1] if len(scores) >= top else np.inf
        chunk = order[start : start + size]
        live = np.sort(chunk[row_lb[chunk] <= kth])
        if not len(live):  # the rest are in increasing bound: none can beat the K-th best either
            stats.rows_skipped_by_bound += n - start
            break
        if np.isfinite(kth):  # a feasible row is known: rows that cannot fit need no least-memory report either
            live = live[~cannot_fit(ctx, take(table, live))]
        stats.rows_skipped_by_bound += len(chunk) - len(live)
        start, size = start + size, 2 * size
        if not len(live):
            continue
        sub = take(table, live)
        ok, res, worst, rows = _fitting(ctx, sub, cache, stats)
        if worst is not None:
            peak, j = worst
            if least is None or (peak, live[j]) < (least[0], least[1]):
                least = (peak, int(live[j]), {k: int(v[j]) for k, v in sub.items()})
        if res is None:
            continue
        fit = np.nonzero(ok)[0]
        sub = take(sub, fit)
        first_score = res.step_time_s * score_multiplier(ctx, sub, objective)
        keep = first_score <= kth
        stats.rows_bound_pruned += int(len(keep) - keep.sum())
        if not keep.any():
            continue
        kept = np.nonzero(keep)[0]
        sub = dict(take(sub, kept), key=key[live[fit[kept]]])
        # The optimistic bandwidth's TP and CP columns are the real ones for `sub`'s groups (`bounds.optimistic_bw`),
        # its all-to-all too: the exact pass re-assembles the first pass's rows (`evaluate_again`).
        done, step, score, ok = exact_pass(ctx, sub, bw, first_score[kept], scores, top, objective, (rows, kept))
        at = np.nonzero(ok)[0]
        cand = take(done, at)
        best = merge_best(best, (cand, score[at], step[at], cand.pop("key")), top)
    return best, least
