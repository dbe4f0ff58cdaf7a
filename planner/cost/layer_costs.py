"""The per-layer terms of a table of layouts: the mean decoder layer's and the end ranks' times per micro-batch.

`layer_costs` prices the mean decoder layer and the end-rank extras per micro-batch (compute, exposed TP/CP/EP
communication) and reads the collective coefficients every row needs (`LayerCosts`), for every row of a table
(`planner.layout.table.COLUMNS`). `cost.evaluate` lays these layers out on the pipeline ranks and hands them to
the step assembler; the schedule figure and the typed (several layer kinds or GPU kinds) costing read them too.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from planner.cost import comm, compute, interference, moe_dispatch, overhead
from planner.cost.context import CostContext
from planner.cost.dp_groups import axis_groups, dp_group_coeffs
from planner.layout.expert_groups import data_axes_inner_first, expert_shard_size
from planner.layout.numeric import sorted_unique
from planner.layout.table import FULL_RECOMPUTE_SHARE, MESH_ORDERS, RecomputeCode

__all__ = ["LayerCosts", "coeff_columns", "expert_shard", "layer_costs", "layer_costs_of_rows", "rows_of"]


def coeff_columns(bw: comm.AxisBandwidth, kind: str, size: np.ndarray, stride: np.ndarray, world: np.ndarray):
    """(a, b) affine coefficient columns of `kind` along groups (size, stride) over `world` ranks, per row
    (`AxisBandwidth.columns`: idle GPUs are costed as carrying the same pattern where it tiles the cluster)."""
    return bw.columns(kind, size, stride, world)


def _ep_inner_stride(table, groups) -> np.ndarray:
    """Per row, the stride of the EP group: that of the innermost data axis with more than one rank. EP
    groups are the ep consecutive ranks of dp_replicate x dp_shard x cp in the row's axis order, as the
    executor builds them (planner.layout.expert_groups); a group that spans two data axes with another axis
    between them is costed as if contiguous with this stride (an approximation of its links)."""
    stride = np.ones_like(table["ep"])
    for code in sorted_unique(table["order"]):
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
    return coeff_columns(bw, "all_to_all", ep, _ep_inner_stride(table, groups), world)


def expert_shard(table: dict[str, np.ndarray]) -> np.ndarray:
    """Per row, the ranks ZeRO shards the routed experts' states over: the dp_shard x cp ranks outside the EP
    group (dp_shard x cp when ep = 1), as executor.mesh builds the experts' gradient mesh."""
    out = (table["dp_shard"] * table["cp"]).astype(np.int64)
    sizes = {"dp_replicate": table["dp"] // table["dp_shard"], "dp_shard": table["dp_shard"], "cp": table["cp"]}
    for code in sorted_unique(table["order"]):
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
    dp_slowdown: np.ndarray  # compute slowdown beside the DP collectives (interference.data_group_slowdown)


def layer_costs(ctx: CostContext, table: dict[str, np.ndarray], bw: comm.AxisBandwidth) -> LayerCosts:
    """Mean-layer costs per micro-batch, averaged over layer types (weights = layer counts)."""
    s = ctx.workload.seq_len
    tp, cp, ep, pp = table["tp"], table["cp"], table["ep"], table["pp"]
    mb, rc, sp = table["mb"], table["rc"], table["sp"].astype(bool)
    tokens = mb * s / cp
    groups = axis_groups(table)
    world = table["dp"] * tp * pp * cp
    tp_ar = coeff_columns(bw, "all_reduce", *groups["tp"], world)
    cp_ag = coeff_columns(bw, "all_gather", *groups["cp"], world)
    ep_a2a = _ep_coeffs(bw, table, groups, world)
    counts = ctx.layer_type_counts().astype(float)
    w = counts / counts.sum()
    zeros = np.zeros_like(tokens, dtype=float)
    u_comp, u_fwd, u_w, u_tp, u_cp, u_ep = (zeros.copy() for _ in range(6))
    dense_params = expert_params = 0.0
    tp_f = comm.tp_layer_fwd_s(ctx, tp_ar, tokens)
    cp_f = comm.cp_layer_fwd_s(ctx, cp_ag, tokens, tp, cp)
    whole = FULL_RECOMPUTE_SHARE[rc]
    # The forward collectives a recomputation issues again: full repeats them all (every-k: on the 1/k of the layers
    # it recomputes); "op" (executor.ac) repeats the TP collectives it does not save (both all-reduces without SP;
    # with SP the two all-gathers, half the forward volume, its reduce-scatters being saved) and the CP K/V
    # all-gather, and saves the EP all-to-alls.
    op = rc == RecomputeCode.OP
    tp_again = np.where(op, np.where(sp, 0.5, 1.0), whole)
    cp_again = np.where(op, 1.0, whole)
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
        u_ep += wk * (ep_f * (1 + whole) + ep_b)
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
        pp_p2p=coeff_columns(bw, "p2p", *groups["pp"], world), dp_slowdown=interference.data_group_slowdown(ctx, groups),
    )


def rows_of(x, rows: np.ndarray, count: int):
    """`x` at the row indices `rows` where it is per row (arrays of `count` rows, tuples and dicts of them)."""
    if isinstance(x, tuple):
        return tuple(rows_of(y, rows, count) for y in x)
    if isinstance(x, dict):
        return {k: rows_of(v, rows, count) for k, v in x.items()}
    return x[rows] if isinstance(x, np.ndarray) and x.ndim >= 1 and x.shape[0] == count else x


def layer_costs_of_rows(lc: LayerCosts, rows: np.ndarray) -> LayerCosts:
    """`lc` at the row indices `rows` (per-row arrays and coefficient columns taken; per-model scalars kept)."""
    count = len(lc.tokens)
    return LayerCosts(**{f.name: rows_of(getattr(lc, f.name), rows, count) for f in fields(LayerCosts)})
