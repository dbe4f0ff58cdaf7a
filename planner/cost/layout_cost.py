"""Cost one layout rank by rank, with its own layer partition: what a plan's prediction is.

The search ranks layouts in compact form (`evaluate.evaluate_table`); a plan, `meshplan evaluate`, `explain`
and the schedule figure cost one layout rank by rank with its layers per rank. Models with several layer
types and clusters with several GPU kinds are costed by type on each rank's own GPU (`cost.typed`),
otherwise every layer at the mean layer's cost; both go through the one assembler (`cost.assemble`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from planner.cost.assemble import TableResult
from planner.cost.comm import AxisBandwidth
from planner.cost.context import CostContext
from planner.cost.evaluate import evaluate_table
from planner.cost.partition import chunk_partition
from planner.cost.typed import counts_of, evaluate_partition, needs_typed_costing, rank_costs
from planner.layout.table import table_of


def rank_layers_of(partition: tuple[int, ...], pp: int) -> list[int]:
    """Decoder layers per pipeline rank from layers per chunk (chunk c runs on rank c % pp)."""
    per_rank = [0] * pp
    for c, n in enumerate(partition):
        per_rank[c % pp] += int(n)
    return per_rank


def cost_layout(ctx: CostContext, row: dict[str, Any], rank_layers: list[int], chunks: tuple[int, ...] | None = None,
                bw: AxisBandwidth | None = None) -> TableResult:
    """Rank-by-rank costing of the layout `row` with `rank_layers` layers per pipeline rank (split over each
    rank's chunks as `chunks` says, or as evenly as possible)."""
    bw = bw or AxisBandwidth(ctx.topology)
    if needs_typed_costing(ctx):
        pp = row["pp"]
        chunks = tuple(chunks) if chunks is not None else (
            chunk_partition(rank_layers, row["v"]) if pp > 1 else (ctx.model.num_layers,))
        counts = counts_of(tuple(ctx.layer_type_of), chunks, pp, len(ctx.layer_types))
        return evaluate_partition(ctx, rank_costs(ctx, row, bw), counts)
    return evaluate_table(ctx, table_of(row), bw, rank_layers=np.array([rank_layers]))
