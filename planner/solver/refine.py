"""Refine a searched layout's layer partition by layer type and per-rank GPU with CP-SAT (what `api` calls).

The search ranks layouts with the mean-layer split (`cost.partition.balanced_split`), exact for uniform
layers on one GPU kind. When the model has several layer types or the cluster several GPU kinds
(`cost.typed.needs_typed_costing`), the plan's partition is chosen here: each (rank, layer type) is priced on
the rank's own GPU (`cost.typed`), `partition_cpsat` finds the contiguous split that minimises the schedule's
pipeline time within every rank's memory, hinted with the mean-layer split, and the whole step (pipeline,
PP transfers, DP exposure, optimizer) of both splits is costed rank by rank; the faster one that fits is
kept. The notes say what changed and by how much the step time moved.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost.comm import AxisBandwidth
from planner.cost.context import CostContext
from planner.cost.evaluate import TableResult
from planner.cost.partition import chunk_partition
from planner.cost.typed import RankCosts, counts_of, evaluate_partition, rank_costs
from planner.layout.names import RECOMPUTE_NAMES
from planner.layout.schedules import BY_CODE
from planner.layout.table import even_split_rows
from planner.solver.partition_cpsat import (
    PartitionInfeasibleError,
    PartitionProblem,
    solve_partition,
)


@dataclass
class Refinement:
    chunks: tuple[int, ...]  # layers per chunk (chunk c on rank c % pp)
    rank_layers: list[int]
    result: TableResult  # rank-by-rank costing of `chunks`
    costs: RankCosts
    notes: tuple[str, ...]


def problem_of(ctx: CostContext, costs: RankCosts) -> PartitionProblem:
    """The CP-SAT data of one layout: its schedule's objective and every rank's own times and memory."""
    row = costs.row
    return PartitionProblem(
        layer_types=tuple(ctx.layer_type_of), layer_time_s=costs.layer_s, extra_time_s=costs.extra_s,
        layer_memory_bytes=costs.layer_memory_bytes, fixed_memory_bytes=costs.fixed_memory_bytes,
        capacity_bytes=costs.capacity_bytes, virtual_stages=row["v"], schedule=BY_CODE[row["sched"]].name,
        num_microbatches=row["m"], layer_bubble_s=costs.layer_bubble_s, extra_bubble_s=costs.extra_bubble_s,
    )


def cost_partition(ctx: CostContext, costs: RankCosts, chunks: tuple[int, ...]) -> TableResult:
    counts = counts_of(tuple(ctx.layer_type_of), chunks, costs.pp, len(ctx.layer_types))
    return evaluate_partition(ctx, costs, counts)


def refine(ctx: CostContext, row: dict[str, int], mean_rank_layers: list[int], *,
           chunks: tuple[int, ...] | None = None, bw: AxisBandwidth | None = None) -> Refinement:
    """Cost the layout rank by rank by type and GPU; with `chunks` None also choose the partition by CP-SAT."""
    bw = bw or AxisBandwidth(ctx.topology)
    costs = rank_costs(ctx, row, bw)
    pp = row["pp"]
    hint = chunk_partition(mean_rank_layers, row["v"]) if pp > 1 else (ctx.model.num_layers,)
    notes: tuple[str, ...] = ()
    if chunks is None and pp > 1 and even_split_rows(row["rc"], pp):
        chunks = hint
        notes = (f"layer partition: recompute {RECOMPUTE_NAMES[row['rc']]} with pipelining keeps the even chunks "
                 f"{list(hint)} (each recomputes the same share of its layers)",)
    if chunks is not None or pp == 1:
        chunks = tuple(chunks) if chunks is not None else hint
        return Refinement(chunks, _rank_layers(chunks, pp), cost_partition(ctx, costs, chunks), costs, notes)
    base = cost_partition(ctx, costs, hint)
    kinds = len(ctx.layer_types)
    what = f"{kinds} layer type{'s' if kinds > 1 else ''} x {pp} ranks" + (
        f" on {'/'.join(sorted(set(costs.gpu_names)))}" if len(set(costs.gpu_names)) > 1 else "")
    try:
        found = solve_partition(problem_of(ctx, costs), hint_chunks=hint)
    except (PartitionInfeasibleError, RuntimeError) as exc:  # nothing fits, or no solution in the work limit
        note = f"layer partition (CP-SAT over {what}): {exc}; kept the mean-layer split {list(hint)}"
        return Refinement(hint, _rank_layers(hint, pp), base, costs, (note,))
    proof = "proven optimal" if found.proven_optimal else "best found within the search's work limit, not proven"
    if found.chunks == hint:
        note = (f"layer partition (CP-SAT over {what}, {proof}): the mean-layer split {list(hint)} is optimal; "
                f"step {float(base.step_time_s[0]):.4f} s")
        return Refinement(hint, _rank_layers(hint, pp), base, costs, (note,))
    new = cost_partition(ctx, costs, found.chunks)
    old_t, new_t = float(base.step_time_s[0]), float(new.step_time_s[0])
    better = bool(new.fits[0]) and (new_t < old_t or not base.fits[0])
    move = f"step {old_t:.4f} s -> {new_t:.4f} s ({(new_t - old_t) * 1e3:+.2f} ms, {(new_t - old_t) / old_t * 100:+.3g} %)"
    if better:
        why = "" if base.fits[0] else f" (which does not fit: {_worst_rank(base, costs)})"
        note = (f"layer partition (CP-SAT over {what}, {proof}): layers per chunk {list(found.chunks)} instead "
                f"of the mean-layer split {list(hint)}{why}; {move}")
        return Refinement(found.chunks, _rank_layers(found.chunks, pp), new, costs, (note,))
    note = (f"layer partition (CP-SAT over {what}, {proof}): its pipeline-optimal split {list(found.chunks)} "
            f"is not faster over the whole step ({move}); kept the mean-layer split {list(hint)}")
    return Refinement(hint, _rank_layers(hint, pp), base, costs, (note,))


def _worst_rank(res: TableResult, costs: RankCosts) -> str:
    assert res.rank_memory is not None
    over = res.rank_memory["total"][0] - costs.capacity_bytes
    r = int(np.argmax(over))
    return f"rank {r} needs {res.rank_memory['total'][0, r] / 2**30:.1f} GiB of {costs.capacity_bytes[r] / 2**30:.1f} GiB"


def _rank_layers(chunks: tuple[int, ...], pp: int) -> list[int]:
    out = np.zeros(pp, dtype=np.int64)
    for c, size in enumerate(chunks):
        out[c % pp] += size
    return [int(x) for x in out]
