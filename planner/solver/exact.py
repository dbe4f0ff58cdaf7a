"""Branch-and-bound over shapes, vectorised evaluation inside each shape: the proven optimum.

1. Enumerate every valid shape (tp, cp, pp, dp, ep) (`space.shape_candidates`).
2. Bound each shape from below, vectorised over all shapes at once:
   - time: the busiest GPU does at least 1/W of the step's model FLOPs (no recompute) at the best
     achievable GEMM throughput (peak x max_fraction), W = dp*tp*pp*cp;
   - memory: its model states are at least (dense params / (tp*pp*dp) + expert params / (tp*pp*ep*dp)) times
     the bytes per parameter with everything sharded (ZeRO-3 over all of DP), plus the reserve.
   Shapes whose memory bound exceeds the GPU cannot fit with any knobs and are dropped.
3. Visit shapes in increasing time bound; expand each batch to every knob combination and evaluate the
   batch as one table (`cost.evaluate.evaluate_table`). Stop when the next shape's bound is no better than
   the K-th best feasible step time found: no unvisited layout can enter the top K. The result is exact
   under the cost model (`proven_optimal`); `brute_force` evaluates the same space without bounds and is
   the test oracle.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planner.cost.comm import AxisBandwidth
from planner.cost.context import CostContext
from planner.cost.evaluate import COLUMNS, TableResult, evaluate_table
from planner.cost.memory import reserve_bytes
from planner.solver.space import Pins, SearchLimits, expand_shapes, shape_candidates

BATCH_ROWS = 60_000  # rows evaluated per numpy batch: large enough to amortise Python, small for memory


@dataclass
class SearchStats:
    shapes_total: int = 0
    shapes_memory_pruned: int = 0
    shapes_bound_pruned: int = 0
    shapes_evaluated: int = 0
    rows_evaluated: int = 0
    rows_feasible: int = 0
    proven_optimal: bool = False


@dataclass
class SearchResult:
    """The K best rows (a table), their results, and how the search went."""

    table: dict[str, np.ndarray]
    step_time_s: np.ndarray
    stats: SearchStats
    best_infeasible: tuple[dict[str, int], float] | None = None  # (row, peak bytes) of the least-memory layout seen
    all_feasible: dict[str, np.ndarray] | None = field(default=None, repr=False)  # for Pareto figures, when asked


def nvlink_domain_size(cluster) -> int:
    """GPUs that share one NVLink switch fabric: a rack-scale domain, else one host."""
    domain = getattr(cluster, "nvlink_domain", None)
    if domain is not None:
        return int(domain.hosts) * int(cluster.gpus_per_node)
    return int(cluster.gpus_per_node)


def _shape_bounds(ctx: CostContext, tp, cp, pp, dp, ep) -> tuple[np.ndarray, np.ndarray]:
    W = (tp * cp * pp * dp).astype(float)
    flops_per_token, _ = ctx.model.training_flops_per_token(ctx.workload.seq_len, "none", causal=ctx.flash_attention)
    step_flops = float(flops_per_token) * ctx.workload.tokens_per_step
    time_lb = step_flops / (W * ctx.peak_flops * ctx.max_fraction)
    dense = sum(lt.dense_params * lt.count for lt in ctx.layer_types) + ctx.embedding_params + ctx.head_params
    expert = sum(lt.expert_params * lt.count for lt in ctx.layer_types)
    per_param = ctx.weight_bytes + ctx.grad_bytes + ctx.optimizer_bytes
    mem_lb = (dense / (tp * pp * dp) + expert / (tp * pp * ep * dp)) * per_param + reserve_bytes(ctx)
    return time_lb, mem_lb


def _take(table: dict[str, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[idx] for k, v in table.items()}


def _concat(a: dict[str, np.ndarray] | None, b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if a is None:
        return b
    return {k: np.concatenate([a[k], b[k]]) for k in COLUMNS}


def exact_search(
    ctx: CostContext, pins: Pins, limits: SearchLimits, top: int = 1, *, keep_all: bool = False
) -> SearchResult:
    """The `top` best feasible layouts under the cost model (see module docstring)."""
    bw = AxisBandwidth(ctx.topology)
    n_gpus = int(ctx.cluster.num_gpus)
    shapes = shape_candidates(ctx.model, n_gpus, ctx.workload.batch, ctx.workload.seq_len, pins, limits,
                              nvlink_domain_size(ctx.cluster))
    stats = SearchStats(shapes_total=len(shapes[0]))
    time_lb, mem_lb = _shape_bounds(ctx, *shapes)
    fits = mem_lb <= ctx.memory_capacity_bytes
    stats.shapes_memory_pruned = int((~fits).sum())
    order = np.argsort(time_lb[fits], kind="stable")
    shape_idx = np.nonzero(fits)[0][order]
    tp, cp, pp, dp, ep = shapes

    best: dict[str, np.ndarray] | None = None
    best_t = np.zeros(0)
    least_mem: tuple[dict[str, int], float] | None = None
    feasible_all: dict[str, np.ndarray] | None = None
    i = 0
    per_shape_rows_guess = 64
    n_take = 4  # small first batch: the best shapes often settle the bound; then grow geometrically
    while i < len(shape_idx):
        kth = best_t[top - 1] if len(best_t) >= top else np.inf
        if time_lb[shape_idx[i]] >= kth:
            stats.shapes_bound_pruned = len(shape_idx) - i
            break
        batch = shape_idx[i : i + n_take]
        batch = batch[time_lb[batch] < kth]
        i += n_take
        table = expand_shapes(ctx.model, ctx.workload.batch, (tp[batch], cp[batch], pp[batch], dp[batch], ep[batch]), pins, limits,
                              ctx.flash_attention)
        stats.shapes_evaluated += len(batch)
        n_rows = len(table["dp"])
        if n_rows == 0:
            continue
        per_shape_rows_guess = max(1, n_rows // max(len(batch), 1))
        n_take = int(min(max(1, BATCH_ROWS // per_shape_rows_guess), 2 * n_take))
        res = evaluate_table(ctx, table, bw)
        stats.rows_evaluated += n_rows
        ok = res.fits
        stats.rows_feasible += int(ok.sum())
        if not ok.all():
            j = int(np.argmin(res.peak_memory_bytes))
            if least_mem is None or res.peak_memory_bytes[j] < least_mem[1]:
                least_mem = ({k: int(v[j]) for k, v in table.items()}, float(res.peak_memory_bytes[j]))
        if not ok.any():
            continue
        cand = _take(table, np.nonzero(ok)[0])
        if keep_all:
            cand_all = dict(cand, step_time_ms=(res.step_time_s[ok] * 1e3), peak=res.peak_memory_bytes[ok])
            feasible_all = cand_all if feasible_all is None else {k: np.concatenate([feasible_all[k], cand_all[k]]) for k in cand_all}
        merged = _concat(best, cand)
        merged_t = np.concatenate([best_t, res.step_time_s[ok]])
        keep = np.lexsort((np.arange(len(merged_t)), merged_t))[:top]
        best, best_t = _take(merged, keep), merged_t[keep]
    else:
        stats.shapes_bound_pruned = 0
    stats.proven_optimal = True
    if best is None:
        best = {k: np.zeros(0, dtype=np.int64) for k in COLUMNS}
    return SearchResult(table=best, step_time_s=best_t, stats=stats, best_infeasible=least_mem, all_feasible=feasible_all)


def brute_force(
    ctx: CostContext, pins: Pins, limits: SearchLimits, *, include_dominated: bool = True
) -> tuple[dict[str, np.ndarray], TableResult]:
    """Every layout of the space evaluated with no bounds (the test oracle); by default also the options the
    search leaves out as dominated, so the oracle checks those dominance arguments too."""
    from dataclasses import replace

    limits = replace(limits, prune_dominated=not include_dominated)
    bw = AxisBandwidth(ctx.topology)
    shapes = shape_candidates(ctx.model, int(ctx.cluster.num_gpus), ctx.workload.batch, ctx.workload.seq_len, pins,
                              limits, nvlink_domain_size(ctx.cluster))
    table = expand_shapes(ctx.model, ctx.workload.batch, shapes, pins, limits, ctx.flash_attention)
    return table, evaluate_table(ctx, table, bw)
