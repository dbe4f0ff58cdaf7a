"""Cost a whole table of layouts at once: the per-layer terms, then each row's pipeline ranks.

A table is a dict of equal-length int64 arrays, one row per candidate layout, with the columns of
`planner.layout.table.COLUMNS`. `layer_costs` prices the mean decoder layer and the end-rank extras per
micro-batch (compute, exposed TP/CP/EP communication) and reads the collective coefficients every row needs;
`evaluate_table` lays the layers out on the pipeline ranks, either with the optimal mean-layer split in
compact form (the search; `cost.partition`) or with a given number of layers per rank, and hands the ranks'
work to the one step-time assembler (`cost.assemble`, where the formulas are).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from planner.cost import comm, compute, memory, moe_dispatch, overhead
from planner.cost.assemble import RankWork, TableResult, assemble, memory_fit, rank_memory
from planner.cost.context import CostContext
from planner.cost.dp_groups import axis_groups, dp_group_coeffs
from planner.cost.partition import balanced_split
from planner.layout.expert_groups import data_axes_inner_first, expert_shard_size
from planner.layout.numeric import distinct_rows
from planner.layout.table import MESH_ORDERS, RecomputeCode

__all__ = ["LAYER_COLUMNS", "FittingRows", "LayerCosts", "TableResult", "evaluate_again", "evaluate_fitting",
           "evaluate_table", "fitting_rows", "layer_costs"]


def _coeff_columns(bw: comm.AxisBandwidth, kind: str, size: np.ndarray, stride: np.ndarray, world: np.ndarray):
    """(a, b) affine coefficient columns of `kind` along groups (size, stride) over `world` ranks, per row
    (`AxisBandwidth.columns`: idle GPUs are costed as carrying the same pattern where it tiles the cluster)."""
    return bw.columns(kind, size, stride, world)


def _ep_inner_stride(table, groups) -> np.ndarray:
    """Per row, the stride of the EP group: that of the innermost data axis with more than one rank. EP
    groups are the ep consecutive ranks of dp_replicate x dp_shard x cp in the row's axis order, as the
    executor builds them (planner.layout.expert_groups); a group that spans two data axes with another axis
    between them is costed as if contiguous with this stride (an approximation of its links)."""
    stride = np.ones_like(table["ep"])
    for code in np.unique(table["order"]):
        sel = table["order"] == code
        found = np.zeros(int(sel.sum()), dtype=bool)
        inner = np.ones(int(sel.sum()), dtype=np.int64)
        for axis in data_axes_inner_first(MESH_ORDERS[int(code)]):
            size, axis_stride = groups[axis]
            take = (size[sel] > 1) & ~found
            inner = np.where(take, axis_stride[sel], inner)
            found |= take
        stride[sel] = inner
    return stride


def _ep_coeffs(bw: comm.AxisBandwidth, table, groups, world):
    """All-to-all coefficient columns over each row's EP groups (zeros where ep = 1)."""
    ep = table["ep"]
    if not np.any(ep > 1):
        z = np.zeros(len(ep))
        return z, z
    return _coeff_columns(bw, "all_to_all", ep, _ep_inner_stride(table, groups), world)


def expert_shard(table: dict[str, np.ndarray]) -> np.ndarray:
    """Per row, the ranks ZeRO shards the routed experts' states over: the dp_shard x cp ranks outside the EP
    group (dp_shard x cp when ep = 1), as executor.mesh builds the experts' gradient mesh."""
    out = (table["dp_shard"] * table["cp"]).astype(np.int64)
    sizes = {"dp_replicate": table["dp"] // table["dp_shard"], "dp_shard": table["dp_shard"], "cp": table["cp"]}
    for code in np.unique(table["order"]):
        sel = table["order"] == code
        inner = data_axes_inner_first(MESH_ORDERS[int(code)])
        out[sel] = expert_shard_size(table["ep"][sel], {a: v[sel] for a, v in sizes.items()}, inner)
    return out


@dataclass
class LayerCosts:
    """Per-row, per-micro-batch times of the mean decoder layer and the end-rank extras, and the collective
    coefficients the step assembly needs. One definition, used by `evaluate_table` and the schedule figure."""

    tokens: np.ndarray
    u: np.ndarray  # one layer: forward + backward + recompute + exposed in-layer communication
    u_fwd: np.ndarray  # its forward part (with forward communication)
    u_w: np.ndarray  # its weight-gradient GEMMs (the W pass of zero-bubble schedules)
    u_comp: np.ndarray  # its compute part
    u_tp: np.ndarray
    u_cp: np.ndarray
    u_ep: np.ndarray
    emb_f: np.ndarray  # embedding forward
    head_f: np.ndarray  # final norm + LM head + loss forward
    e_first: np.ndarray  # embedding forward + backward (rank 0)
    e_last: np.ndarray  # head forward + backward (last rank)
    head_w: np.ndarray  # the head's weight-gradient GEMM inside e_last (the last rank's W pass)
    dense_params: float  # mean per layer
    expert_params: float
    rs_shard: tuple  # reduce-scatter over the sharding group dp_shard x cp (cost.dp_groups)
    ag_shard: tuple  # all-gather over it
    ar_rep: tuple  # all-reduce over HSDP's replicate group dp_replicate (ZeRO >= 1)
    ar_ddp: tuple  # all-reduce over every data rank, dp_replicate x dp_shard x cp (ZeRO-0: DDP)
    pp_p2p: tuple


def layer_costs(ctx: CostContext, table: dict[str, np.ndarray], bw: comm.AxisBandwidth) -> LayerCosts:
    """Mean-layer costs per micro-batch, averaged over layer types (weights = layer counts)."""
    s = ctx.workload.seq_len
    tp, cp, ep, pp = table["tp"], table["cp"], table["ep"], table["pp"]
    mb, rc, sp = table["mb"], table["rc"], table["sp"].astype(bool)
    tokens = mb * s / cp
    groups = axis_groups(table)
    world = table["dp"] * tp * pp * cp
    tp_ar = _coeff_columns(bw, "all_reduce", *groups["tp"], world)
    cp_ag = _coeff_columns(bw, "all_gather", *groups["cp"], world)
    ep_a2a = _ep_coeffs(bw, table, groups, world)
    counts = ctx.layer_type_counts().astype(float)
    w = counts / counts.sum()
    zeros = np.zeros_like(tokens, dtype=float)
    u_comp, u_fwd, u_w, u_tp, u_cp, u_ep = (zeros.copy() for _ in range(6))
    dense_params = expert_params = 0.0
    tp_f = comm.tp_layer_fwd_s(ctx, tp_ar, tokens)
    cp_f = comm.cp_layer_fwd_s(ctx, cp_ag, tokens, tp, cp)
    full = rc == RecomputeCode.FULL
    # The forward collectives a recomputation issues again: full repeats them all; "op" (executor.ac) repeats the
    # TP collectives it does not save (both all-reduces without SP; with SP the two all-gathers, half the forward
    # volume, its reduce-scatters being saved) and the CP K/V all-gather, and saves the EP all-to-alls.
    op = rc == RecomputeCode.OP
    tp_again = np.where(full, 1.0, np.where(op, np.where(sp, 0.5, 1.0), 0.0))
    cp_again = (full | op).astype(float)
    for wk, lt in zip(w, ctx.layer_types):
        lt_time = compute.layer_time_s(ctx, lt, tokens, tp, cp, ep, sp)
        attn = lt_time.attn_fwd_s
        rec = compute.recompute_time_s(rc, lt_time)
        ep_f = ep_b = 0.0
        if lt.expert_flops_per_token:
            # EP all-to-alls of the tokens the dispatcher sends, plus the expert-TP exchange where it applies.
            sent = moe_dispatch.ep_dispatch_tokens(ctx, tokens, tp, sp)
            etp = comm.etp_layer_s(ctx, tp_ar, tokens, tp, sp)
            ep_f = comm.ep_layer_fwd_s(ctx, ep_a2a, sent, ep) + etp
            ep_b = comm.ep_layer_bwd_s(ctx, ep_a2a, sent, ep) + etp
        # CP: the K/V all-gather before the attention core's forward, the gradient reduce-scatter after its
        # backward (exposed, or overlapped with it by ring attention: comm.cp_exposed_s); full recomputation
        # repeats the gather.
        cp_exp_f = comm.cp_exposed_s(ctx, cp_f, attn)
        cp_exp_b = comm.cp_exposed_s(ctx, cp_f, (lt_time.bwd_s / np.maximum(lt_time.fwd_s, 1e-30)) * attn)
        # TP: exposed, or partly hidden behind the GEMMs of the same pass (comm.tp_exposed_s; in backward also
        # Megatron's asynchronous column-parallel collectives, comm.tp_backward_exposed_s).
        tp_exp_f = comm.tp_exposed_s(ctx, tp_f, lt_time.wgrad_s, sp, tp)
        tp_exp_b = comm.tp_backward_exposed_s(ctx, tp_f, lt_time.wgrad_s, lt_time.column_wgrad_s, sp, tp)
        u_comp += wk * (lt_time.fwd_s + lt_time.bwd_s + rec)
        u_fwd += wk * (lt_time.fwd_s + tp_exp_f + cp_exp_f + ep_f)
        u_w += wk * lt_time.wgrad_s
        u_tp += wk * (tp_exp_f * (1 + tp_again) + tp_exp_b)
        u_cp += wk * (cp_exp_f * (1 + cp_again) + cp_exp_b)
        u_ep += wk * (ep_f * (1 + full) + ep_b)
        dense_params += wk * lt.dense_params
        expert_params += wk * lt.expert_params
    # FSDP/DDP hooks around every layer when gradients are reduced across ranks (measured; 0 uncalibrated).
    dp_f, dp_b = overhead.dp_unit_overhead_s(ctx, table)
    u_comp, u_fwd = u_comp + dp_f + dp_b, u_fwd + dp_f
    emb_f = compute.embedding_forward_time_s(ctx, tokens, tp)
    head_f = compute.head_forward_time_s(ctx, tokens, tp)
    rs_shard, ag_shard, ar_rep, ar_ddp = dp_group_coeffs(bw, table, world, groups)  # FSDP over dp_shard x cp
    return LayerCosts(
        tokens=tokens, u=u_comp + u_tp + u_cp + u_ep, u_fwd=u_fwd, u_w=u_w, u_comp=u_comp, u_tp=u_tp, u_cp=u_cp,
        u_ep=u_ep, emb_f=emb_f, head_f=head_f, e_first=compute.embedding_time_s(ctx, tokens, tp),
        e_last=compute.head_time_s(ctx, tokens, tp), head_w=compute.head_weight_grad_time_s(ctx, tokens, tp),
        dense_params=dense_params, expert_params=expert_params,
        rs_shard=rs_shard, ag_shard=ag_shard, ar_rep=ar_rep, ar_ddp=ar_ddp,
        pp_p2p=_coeff_columns(bw, "p2p", *groups["pp"], world),
    )


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
        work = replace(self.work, **{f.name: _rows_of(getattr(self.work, f.name), at, count)
                                     for f in fields(RankWork) if f.name != "optimizer_contexts"})
        return FittingRows({k: v[at] for k, v in self.table.items()}, work, _layer_costs_of_rows(self.lc, at))


def fitting_rows(ctx: CostContext, table: dict[str, np.ndarray], bw: comm.AxisBandwidth
                 ) -> tuple[np.ndarray, np.ndarray, FittingRows | None]:
    """`evaluate_fitting` before the step assembly: (fits, peak bytes per GPU, the fitting rows' parts)."""
    distinct_at, inverse = distinct_rows(*(table[k] for k in LAYER_COLUMNS))
    distinct = {k: table[k][distinct_at] for k in LAYER_COLUMNS}
    lc_distinct = layer_costs(ctx, distinct, bw)
    _, n, first, last, rank, weight = _mean_layer_ranks(ctx, distinct, lc_distinct)
    layer_memory = tuple(x[inverse] for x in _layer_memory(ctx, distinct, lc_distinct, n, first, last))
    lc = _layer_costs_of_rows(lc_distinct, inverse)
    n, first, last, rank, weight = (x[inverse] for x in (n, first, last, rank, weight))
    params, mem = _memory(ctx, table, lc, n, first, last, rank, layer_memory)
    fits, peak = memory_fit(mem["total"], weight > 0, ctx.memory_capacity_bytes)
    if not fits.any():
        return fits, peak, None
    rows = np.nonzero(fits)[0]
    lc_fit = _layer_costs_of_rows(lc, rows)
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
                 pp_p2p=_coeff_columns(bw, "p2p", *groups["pp"], world))
    return assemble(ctx, table, rows.work, lc)


def _rows_of(x, rows: np.ndarray, count: int):
    """`x` at the row indices `rows` where it is per row (arrays of `count` rows, tuples and dicts of them)."""
    if isinstance(x, tuple):
        return tuple(_rows_of(y, rows, count) for y in x)
    if isinstance(x, dict):
        return {k: _rows_of(v, rows, count) for k, v in x.items()}
    return x[rows] if isinstance(x, np.ndarray) and x.ndim >= 1 and x.shape[0] == count else x


def _layer_costs_of_rows(lc: LayerCosts, rows: np.ndarray) -> LayerCosts:
    """`lc` at the row indices `rows` (per-row arrays and coefficient columns taken; per-model scalars kept)."""
    count = len(lc.tokens)
    return LayerCosts(**{f.name: _rows_of(getattr(lc, f.name), rows, count) for f in fields(LayerCosts)})


def _mean_layer_ranks(ctx: CostContext, table: dict[str, np.ndarray], lc: LayerCosts):
    """The optimal mean-layer split in compact form: (split, layers, first, last, pipeline index, weight)
    of four representative ranks per row (`cost.partition.balanced_split`)."""
    pp = table["pp"]
    split = balanced_split(ctx.model.num_layers, pp, lc.u, lc.e_first, lc.e_last)
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
