"""A per-row lower bound of a search row's peak memory per GPU that needs no layer times: which rows cannot fit.

The exact peak (`cost.evaluate`) is the largest over the row's pipeline ranks of

    mem_r = a_r + b_r * n_r,

where n_r is the rank's decoder layers, b_r a layer's bytes on rank r (its model states at the row's ZeRO stage,
plus its activation bytes per micro-batch times the micro-batches in flight on r, `schedules.inflight_microbatches`),
and a_r >= 0 the rest (reserve, FSDP buffers, the embedding's states on the first rank, the head's states and the
logits on the last). The split n_r follows the layers' times (`cost.partition.balanced_split`), which need the
whole `layer_costs`; but for ANY split with sum n_r = L and any weights lambda_r >= 0 summing to 1,

    max_r mem_r >= sum_r lambda_r * mem_r,

and lambda_r proportional to 1 / b_r makes sum_r lambda_r * b_r * n_r = L / sum_r (1 / b_r) whatever the split.
So `row_memory_bound_bytes` = sum_r lambda_r * a_r + L / sum_r (1 / b_r) never exceeds the exact peak. Routed
experts are counted as sharded like the dense weights (they shard over no more ranks: `memory.model_state_bytes`),
which only lowers it. Under 1F1B the first rank holds about pp micro-batches and the last one, so the bound is
about ln(pp) below a rank-0-limited peak; it is tight for pp = 1 and catches the rows whose activations alone are
far over the GPU (no recomputation, large micro-batches), which are most of the rows a search evaluates and rejects.

Once a feasible row is known, the search's first pass (`passes.first_pass`) drops a row when this bound, or
`bounds.state_memory_bound_bytes`, exceeds the GPU (`cannot_fit`), before its layer times are computed. Before
that, every row whose states fit is evaluated, so that a search where nothing fits still names the least-memory
layout exactly as before.
"""

from __future__ import annotations

import numpy as np

from planner.cost.context import CostContext
from planner.cost.memory import (
    activation_bytes_per_layer,
    fsdp_buffer_bytes,
    logits_bytes,
    model_state_bytes,
    reserve_bytes,
)
from planner.layout.schedules import inflight_microbatches
from planner.solver.bounds import mean_layer_params, state_memory_bound_bytes

ROUNDING_MARGIN = 1e-9  # relative: a row is dropped only if its bound is above the GPU by more than float rounding


def row_memory_bound_bytes(ctx: CostContext, table: dict[str, np.ndarray]) -> np.ndarray:
    """Per row of a search table (every column of `layout.table.COLUMNS`), a lower bound of its exact peak memory
    per GPU (module docstring)."""
    tp, pp, zero, shard = table["tp"], table["pp"], table["zero"], table["dp_shard"]
    tpf = tp.astype(float)
    per_param = sum(model_state_bytes(ctx, np.ones(len(tp)), zero, shard, pp, cp=table["cp"]))  # linear in params

    def states(params: np.ndarray) -> np.ndarray:
        return per_param * params

    layer_params = mean_layer_params(ctx, tp, table["ep"])
    act = activation_bytes_per_layer(ctx, table["mb"], tp, table["cp"], table["sp"].astype(bool), table["rc"])
    width = int(pp.max())
    rank = np.arange(width)[None, :]
    present = rank < pp[:, None]
    inflight = inflight_microbatches(table["sched"][:, None], rank, pp[:, None], table["v"][:, None],
                                     table["m"][:, None])
    per_layer = states(layer_params)[:, None] + act[:, None] * inflight  # b_r, > 0
    inverse = np.where(present, 1.0 / per_layer, 0.0)
    inv_sum = inverse.sum(axis=1)
    lam_first, lam_last = inverse[:, 0] / inv_sum, inverse[np.arange(len(pp)), pp - 1] / inv_sum
    first_extra = states(ctx.embedding_params / tpf)
    last_extra = states(ctx.head_params / tpf) + logits_bytes(ctx, table["mb"], tp, table["cp"])
    # The first and the last rank are one rank when pp = 1: both extras are on it, and its weight is 1.
    ends = np.where(pp == 1, first_extra + last_extra, lam_first * first_extra + lam_last * last_extra)
    common = reserve_bytes(ctx) + fsdp_buffer_bytes(ctx, layer_params, zero, pp)
    return common + ends + ctx.model.num_layers / inv_sum


def cannot_fit(ctx: CostContext, table: dict[str, np.ndarray]) -> np.ndarray:
    """Per row: True where it cannot fit the GPU whatever its layers' times (`state_memory_bound_bytes` or
    `row_memory_bound_bytes` above the capacity); False rows may or may not fit."""
    capacity = ctx.memory_capacity_bytes
    out = state_memory_bound_bytes(ctx, table) > capacity
    rest = np.nonzero(~out)[0]
    if len(rest):
        sub = {k: v[rest] for k, v in table.items()}
        out[rest] = row_memory_bound_bytes(ctx, sub) * (1.0 - ROUNDING_MARGIN) > capacity
    return out
