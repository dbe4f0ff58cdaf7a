"""Cost a whole table of layouts at once: the per-layer terms, then each row's pipeline ranks.

A table is a dict of equal-length int64 arrays, one row per candidate layout, with the columns of
`planner.layout.table.COLUMNS`. `cost.layer_costs` prices the mean decoder layer and the end-rank extras per
micro-batch (compute, exposed TP/CP/EP communication) and reads the collective coefficients every row needs;
`evaluate_table` lays the layers out on the pipeline ranks, either with the optimal mean-layer split in
compact form (the search; `cost.partition`) or with a given number of layers per rank, and hands the ranks'
work to the one step-time assembler (`cost.assemble`, where the formulas are).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from planner.cost import comm, memory
from planner.cost.assemble import RankWork, TableResult, assemble, memory_fit, rank_memory
from planner.cost.context import CostContext
from planner.cost.dp_groups import axis_groups, dp_group_coeffs
from planner.cost.layer_costs import (
    LayerCosts,
    coeff_columns,
    expert_shard,
    layer_costs,
    layer_costs_of_rows,
    rows_of,
)
from planner.cost.partition import balanced_split
from planner.layout.numeric import distinct_rows
from planner.layout.table import even_split_rows

__all__ = ["LAYER_COLUMNS", "FittingRows", "TableResult", "evaluate_again", "evaluate_fitting", "evaluate_table",
           "fitting_rows"]


def evaluate_table(
    ctx: CostContext, table: dict[str, np.ndarray], bw: comm.AxisBandwidth, rank_layers: np.ndarray | None = None
) -> TableResult:
    """Step time, breakdown and peak memory of every row of `table` (see `cost.assemble`).

    Without `rank_layers` the layers are split the optimal mean-layer way (compact: four representative
    ranks per row, `cost.partition.balanced_split`); with `rank_layers` (rows x pp decoder layers per
    pipeline rank; every row must have that pp) that partition is costed rank by rank, and per-rank memory is
    returned.
    """
    lc = layer_costs(ctx, table, bw)
    if rank_layers is not None:
        n = np.asarray(rank_layers, dtype=float)
        if np.any(table["pp"] != n.shape[1]):
            raise ValueError("rank_layers needs every row to have pp == number of columns")
        p = n.shape[1]
        ranks = np.broadcast_to(np.arange(p), n.shape)
        return assemble(ctx, table, _work(ctx, table, lc, n, ranks == 0, ranks == p - 1, ranks, np.ones_like(n)), lc,
                        per_rank_memory=True)
    split, n, first, last, rank, weight = _mean_layer_ranks(ctx, table, lc)
    return assemble(ctx, table, _work(ctx, table, lc, n, first, last, rank, weight), lc, split=split)


LAYER_COLUMNS: tuple[str, ...] = ("dp", "tp", "pp", "cp", "ep", "mb", "dp_shard", "rc", "sp", "order")
"""The columns `layer_costs` and the mean-layer split read (`evaluate_fitting` hands them only these): rows equal
in them, which differ only in micro-batch count, schedule, virtual stages or ZeRO stage, share both."""


def evaluate_fitting(ctx: CostContext, table: dict[str, np.ndarray], bw: comm.AxisBandwidth
                     ) -> tuple[np.ndarray, np.ndarray, TableResult | None]:
    """(fits, peak bytes per GPU, result of the rows that fit): exactly what `evaluate_table(ctx, table, bw)`
    gives for those rows, with the step times assembled only for the rows that fit (the search's first pass:
    most rows of a large model are out of memory, and only a fitting row's time is ever read). The layer
    costs, the split and the memory parts they decide are computed once per distinct row of `LAYER_COLUMNS`
    and indexed back to every row, the rest of the memory once over every row (a rank's memory follows the
    split, which follows the layers' times); every formula is per row, so a row's numbers do not depend on
    which other rows are evaluated with it. The partial result carries no `split`."""
    fits, peak, rows = fitting_rows(ctx, table, bw)
    return fits, peak, None if rows is None else assemble(ctx, rows.table, rows.work, rows.lc)


@dataclass
class FittingRows:
    """The rows of a table that fit, with their ranks' work and layer costs (`fitting_rows`), kept so that
    `evaluate_again` can re-assemble their step times under other DP and PP collectives."""

    table: dict[str, np.ndarray]
    work: RankWork
    lc: LayerCosts

    def of_rows(self, at: np.ndarray) -> FittingRows:
        """These parts at the row indices `at`."""
        count = len(self.lc.tokens)
        work = replace(self.work, **{f.name: rows_of(getattr(self.work, f.name), at, count)
                                     for f in fields(RankWork) if f.name != "optimizer_contexts"})
        return FittingRows({k: v[at] for k, v in self.table.items()}, work, layer_costs_of_rows(self.lc, at))


def fitting_rows(ctx: CostContext, table: dict[str, np.ndarray], bw: comm.AxisBandwidth
                 ) -> tuple[np.ndarray, np.ndarray, FittingRows | None]:
    """`evaluate_fitting` before the step assembly: (fits, peak bytes per GPU, the fitting rows' parts)."""
    distinct_at, inverse = distinct_rows(*(table[k] for k in LAYER_COLUMNS))
    distinct = {k: table[k][distinct_at] for k in LAYER_COLUMNS}
    lc_distinct = layer_costs(ctx, distinct, bw)
    _, n, first, last, rank, weight = _mean_layer_ranks(ctx, distinct, lc_distinct)
    layer_memory = tuple(x[inverse] for x in _layer_memory(ctx, distinct, lc_distinct, n, first, last))
    lc = layer_costs_of_rows(lc_distinct, inverse)
    n, first, last, rank, weight = (x[inverse] for x in (n, first, last, rank, weight))
    params, mem = _memory(ctx, table, lc, n, first, last, rank, layer_memory)
    fits, peak = memory_fit(mem["total"], weight > 0, ctx.memory_capacity_bytes)
    if not fits.any():
        return fits, peak, None
    rows = np.nonzero(fits)[0]
    lc_fit = layer_costs_of_rows(lc, rows)
    work = _work_from(ctx, lc_fit, n[rows], first[rows], last[rows], weight[rows], params[rows],
                      {k: v[rows] for k, v in mem.items()})
    return fits, peak, FittingRows({k: v[rows] for k, v in table.items()}, work, lc_fit)


def evaluate_again(ctx: CostContext, rows: FittingRows, at: np.ndarray, bw: comm.AxisBandwidth) -> TableResult:
    """`evaluate_table(ctx, table, bw)` of the fitting rows `at` (no `split`), where `rows` came from a
    bandwidth whose TP, CP and EP coefficient columns for these rows are `bw`'s own (the search's optimistic
    first pass: exact for its table's TP and CP groups, the real all-to-all): the layer costs, the split and
    the memory read no other collective, so only the DP and PP columns are asked of `bw` and the step
    re-assembled, the same numbers, element for element."""
    rows = rows.of_rows(at)
    table = rows.table
    groups, world = axis_groups(table), table["dp"] * table["tp"] * table["pp"] * table["cp"]
    rs_shard, ag_shard, ar_rep, ar_ddp = dp_group_coeffs(bw, table, world, groups)
    lc = replace(rows.lc, rs_shard=rs_shard, ag_shard=ag_shard, ar_rep=ar_rep, ar_ddp=ar_ddp,
                 pp_p2p=coeff_columns(bw, "p2p", *groups["pp"], world))
    return assemble(ctx, table, rows.work, lc)


def _mean_layer_ranks(ctx: CostContext, table: dict[str, np.ndarray], lc: LayerCosts):
    """The optimal mean-layer split in compact form: (split, layers, first, last, pipeline index, weight)
    of four representative ranks per row (`cost.partition.balanced_split`; even where `table.even_split_rows`)."""
    pp = table["pp"]
    split = balanced_split(ctx.model.num_layers, pp, lc.u, lc.e_first, lc.e_last,
                           even=even_split_rows(table["rc"], pp))
    single, trim = pp == 1, split.mid_trimmed
    # Columns: first rank, last rank, an untrimmed middle rank (the first after the trimmed ones), a trimmed
    # one (rank 1); the bottleneck is the first column with the largest time, as in rank order but with the
    # last rank before the middle ones.
    c = _col
    n = np.hstack([c(split.n_first), c(split.n_last), c(split.n_mid), c(split.n_mid - 1)]).astype(float)
    weight = np.hstack([c(np.ones_like(pp)), c(pp > 1), c(np.maximum(pp - 2 - trim, 0)), c(np.where(pp > 2, trim, 0))])
    rank = np.hstack([c(np.zeros_like(pp)), c(pp - 1), c(1 + trim), c(np.ones_like(pp))])
    first = np.broadcast_to(np.array([[True, False, False, False]]), n.shape)
    last = np.array([[False, True, False, False]]) | (c(single) & first)  # one rank: it is first and last
    return split, n, first, last, rank, weight.astype(float)


def _col(x) -> np.ndarray:
    return np.asarray(x).reshape(-1, 1)


def _work(ctx: CostContext, table: dict[str, np.ndarray], lc: LayerCosts, n: np.ndarray, first: np.ndarray,
          last: np.ndarray, rank: np.ndarray, weight: np.ndarray) -> RankWork:
    """The ranks' work when every decoder layer costs the mean layer: columns with `n` layers, the embedding
    where `first` and the head where `last` (both on one rank without pipelining), pipeline index `rank`."""
    params, mem = _memory(ctx, table, lc, n, first, last, rank)
    return _work_from(ctx, lc, n, first, last, weight, params, mem)


def _work_from(ctx: CostContext, lc: LayerCosts, n: np.ndarray, first: np.ndarray, last: np.ndarray,
               weight: np.ndarray, params: np.ndarray, mem: dict[str, np.ndarray]) -> RankWork:
    """`_work` given the ranks' parameters and memory (`_memory`)."""
    c = _col
    return RankWork(
        total_s=n * c(lc.u) + first * c(lc.e_first) + last * c(lc.e_last),
        forward_s=n * c(lc.u_fwd) + first * c(lc.emb_f) + last * c(lc.head_f),
        weight_grad_s=n * c(lc.u_w) + last * c(lc.head_w),
        compute_s=n * c(lc.u_comp) + (first * c(lc.e_first) + last * c(lc.e_last)),
        tp_s=n * c(lc.u_tp), cp_s=n * c(lc.u_cp), ep_s=n * c(lc.u_ep),
        params=params, layers=n, fwd_window_s=n * c(lc.u_fwd), bwd_window_s=n * c(lc.u - lc.u_fwd),
        memory=mem, capacity_bytes=ctx.memory_capacity_bytes, weight=weight,
    )


def _memory(ctx: CostContext, table: dict[str, np.ndarray], lc: LayerCosts, n: np.ndarray, first: np.ndarray,
            last: np.ndarray, rank: np.ndarray, layer_memory: tuple | None = None
            ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Parameters held and memory components of the ranks' columns (`_work`; `evaluate_fitting` needs only
    these to tell which rows fit). `layer_memory`: `_layer_memory`'s answer for these rows, when known."""
    c = _col
    params, act, expert_held, shard, layer_local = layer_memory or _layer_memory(ctx, table, lc, n, first, last)
    buf = memory.fsdp_buffer_bytes(ctx, layer_local, table["zero"], table["pp"])
    return params, rank_memory(ctx, table, params, n, rank, c(act), last, c(buf), expert_held, c(shard))


def _layer_memory(ctx: CostContext, table: dict[str, np.ndarray], lc: LayerCosts, n: np.ndarray, first: np.ndarray,
                  last: np.ndarray) -> tuple[np.ndarray, ...]:
    """The memory inputs that only `LAYER_COLUMNS` (and the split) decide: (parameters held per rank column,
    one layer's activation bytes per micro-batch, routed-expert parameters held per rank column, the ranks
    those are ZeRO-sharded over, one layer's local parameters)."""
    c = _col
    tp, ep = table["tp"], table["ep"]
    sp = table["sp"].astype(bool)
    expert_local = lc.expert_params / (tp * ep)
    layer_local = lc.dense_params / tp + expert_local
    params = n * c(layer_local) + first * c(ctx.embedding_params / tp) + last * c(ctx.head_params / tp)
    act = memory.activation_bytes_per_layer(ctx, table["mb"], tp, table["cp"], sp, table["rc"])
    return params, act, n * c(expert_local), expert_shard(table), layer_local
