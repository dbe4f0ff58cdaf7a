"""Assemble the cost terms into step time and memory for a whole table of layouts at once.

A table is a dict of equal-length numpy arrays, one row per candidate layout, with the integer-coded columns
in `COLUMNS`. `evaluate_table` returns arrays of step time, its breakdown, peak memory and feasibility.

Pipeline step time with per-micro-batch stage times t_r (forward + backward + recompute, communication
inside layers included) and m micro-batches (Narayanan et al. 2021 Sec. 2.2, generalised to unequal stages):
  GPipe, 1F1B:  sum_r t_r + (m - 1) * max_r t_r           (bubble (p-1)/m of the ideal for equal stages)
  interleaved:  m * max_r t_r + (sum_r t_r - max_r t_r) / v   (bubble divided by v, Sec. 2.2.2)
  ZB-H1:        m * max_r t_r + (sum_r f_r - max_r f_r)       (Qi et al. 2023 Sec. 3: bubble (p-1)(T_F + T_B - T_W)
                                                              with T_B = T_W, i.e. only forward times)
plus the exposed PP transfers 2 * (m * v + p - 1) p2p, the exposed DP/FSDP time of the slowest rank and the
optimizer step. The three representative ranks (first, busiest middle, last) are exact for both the
makespan and the peak memory because middle ranks differ only by one trimmed layer (see partition.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from planner.cost import comm, compute, host_share, memory, overhead
from planner.cost.context import CostContext
from planner.cost.partition import StageSplit, balanced_split
from planner.expert_groups import data_axes_inner_first, expert_shard_size

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1")
RECOMPUTE = ("none", "selective", "full")
_SEARCHED_ORDERS: tuple[tuple[str, ...], ...] = (
    ("pp", "dp_replicate", "dp_shard", "cp", "tp"),  # PP outermost: DP groups stay near each other
    ("dp_replicate", "dp_shard", "pp", "cp", "tp"),  # DP outermost: pipeline neighbours share hosts
)
MESH_ORDERS: tuple[tuple[str, ...], ...] = _SEARCHED_ORDERS + tuple(
    o for o in itertools.permutations(_SEARCHED_ORDERS[0]) if o not in _SEARCHED_ORDERS
)
"""Every axis order; the search tries the first `NUM_SEARCHED_ORDERS`, `evaluate` accepts any."""
NUM_SEARCHED_ORDERS = len(_SEARCHED_ORDERS)
COLUMNS = ("dp", "tp", "pp", "cp", "ep", "mb", "m", "sched", "v", "zero", "dp_shard", "rc", "sp", "order")


@dataclass
class TableResult:
    """Per-row outputs of `evaluate_table` (all arrays)."""

    step_time_s: np.ndarray
    compute_s: np.ndarray
    tp_comm_s: np.ndarray
    cp_comm_s: np.ndarray
    ep_comm_s: np.ndarray
    pp_comm_s: np.ndarray
    dp_comm_s: np.ndarray
    bubble_s: np.ndarray
    optimizer_s: np.ndarray
    peak_memory_bytes: np.ndarray
    fits: np.ndarray
    split: StageSplit | None
    rank_memory: dict[str, np.ndarray] | None = None  # explicit mode: rows x pp arrays per memory component


def _axis_groups(table: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per row and axis name: (group size, stride) of that axis in the row's rank order.

    Along a row-major mesh the groups of an axis are ranks base + j * stride (j < size), stride being the
    product of the sizes of the axes inside it; so (size, stride, ranks in use) fixes every group of the axis,
    and the topology is asked once per distinct triple, not once per layout.
    """
    sizes = {"pp": table["pp"], "dp_replicate": table["dp"] // table["dp_shard"], "dp_shard": table["dp_shard"],
             "cp": table["cp"], "tp": table["tp"]}
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    codes = np.unique(table["order"])
    for axis in MESH_ORDERS[0]:
        stride = np.ones_like(table["tp"])
        for code in codes:
            order = MESH_ORDERS[int(code)]
            inner = order[order.index(axis) + 1:]
            sel = table["order"] == code
            prod = np.ones(int(sel.sum()), dtype=np.int64)
            for name in inner:
                prod = prod * sizes[name][sel]
            stride[sel] = prod
        out[axis] = (sizes[axis], stride)
    return out


def _coeff_columns(bw: comm.AxisBandwidth, kind: str, size: np.ndarray, stride: np.ndarray, world: np.ndarray):
    """(a, b) affine coefficient columns of `kind` along groups (size, stride) over `world` ranks, per row
    (`AxisBandwidth.columns`: idle GPUs are costed as carrying the same pattern where it tiles the cluster)."""
    return bw.columns(kind, size, stride, world)


def _ep_inner_stride(table, groups) -> np.ndarray:
    """Per row, the stride of the EP group: that of the innermost data axis with more than one rank. EP
    groups are the ep consecutive ranks of dp_replicate x dp_shard x cp in the row's axis order, as the
    executor builds them (planner.expert_groups); a group that spans two data axes with another axis
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
    """Per row, the ranks ZeRO shards the routed experts' states over: the dp_shard ranks outside the EP
    group (dp_shard when ep = 1), as executor.mesh builds the experts' gradient mesh."""
    out = table["dp_shard"].astype(np.int64).copy()
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
    u_comp: np.ndarray  # its compute part
    u_tp: np.ndarray
    u_cp: np.ndarray
    u_ep: np.ndarray
    emb_f: np.ndarray  # embedding forward
    head_f: np.ndarray  # final norm + LM head + loss forward
    e_first: np.ndarray  # embedding forward + backward (rank 0)
    e_last: np.ndarray  # head forward + backward (last rank)
    dense_params: float  # mean per layer
    expert_params: float
    rs_shard: tuple
    ag_shard: tuple
    ar_rep: tuple
    pp_p2p: tuple


def layer_costs(ctx: CostContext, table: dict[str, np.ndarray], bw: comm.AxisBandwidth) -> LayerCosts:
    """Mean-layer costs per micro-batch, averaged over layer types (weights = layer counts)."""
    s = ctx.workload.seq_len
    tp, cp, ep, pp = table["tp"], table["cp"], table["ep"], table["pp"]
    mb, rc, sp = table["mb"], table["rc"], table["sp"].astype(bool)
    tokens = mb * s / cp
    groups = _axis_groups(table)
    world = table["dp"] * tp * pp * cp
    tp_ar = _coeff_columns(bw, "all_reduce", *groups["tp"], world)
    cp_ag = _coeff_columns(bw, "all_gather", *groups["cp"], world)
    ep_a2a = _ep_coeffs(bw, table, groups, world)
    counts = ctx.layer_type_counts().astype(float)
    w = counts / counts.sum()
    zeros = np.zeros_like(tokens, dtype=float)
    u_comp, u_fwd, u_tp, u_cp, u_ep = (zeros.copy() for _ in range(5))
    dense_params = expert_params = 0.0
    tp_f = comm.tp_layer_fwd_s(ctx, tp_ar, tokens)
    cp_f = comm.cp_layer_fwd_s(ctx, cp_ag, tokens, tp, cp)
    full = rc == 2
    for wk, lt in zip(w, ctx.layer_types):
        lt_time = compute.layer_time_s(ctx, lt, tokens, tp, cp, ep, sp)
        attn = lt_time.attn_fwd_s
        rec = compute.recompute_time_s(rc, lt_time.fwd_s, attn)
        ep_f = comm.ep_layer_fwd_s(ctx, ep_a2a, tokens, ep) if lt.expert_flops_per_token else 0.0
        ep_b = comm.ep_layer_bwd_s(ctx, ep_a2a, tokens, ep) if lt.expert_flops_per_token else 0.0
        # CP: the K/V all-gather hides behind the attention core's forward, the gradient reduce-scatter behind
        # its backward; full recomputation repeats the gather.
        cp_exp_f = np.maximum(cp_f - attn, 0.0)
        cp_exp_b = np.maximum(cp_f - (lt_time.bwd_s / np.maximum(lt_time.fwd_s, 1e-30)) * attn, 0.0)
        u_comp += wk * (lt_time.fwd_s + lt_time.bwd_s + rec)
        u_fwd += wk * (lt_time.fwd_s + tp_f + cp_exp_f + ep_f)
        u_tp += wk * tp_f * (2 + full)
        u_cp += wk * (cp_exp_f * (1 + full) + cp_exp_b)
        u_ep += wk * (ep_f * (1 + full) + ep_b)
        dense_params += wk * lt.dense_params
        expert_params += wk * lt.expert_params
    # FSDP/DDP hooks around every layer when gradients are reduced across ranks (measured; 0 uncalibrated).
    dp_f, dp_b = overhead.dp_unit_overhead_s(ctx, table)
    u_comp, u_fwd = u_comp + dp_f + dp_b, u_fwd + dp_f
    emb_f = compute.embedding_forward_time_s(ctx, tokens, tp)
    head_f = compute.head_forward_time_s(ctx, tokens, tp)
    return LayerCosts(
        tokens=tokens, u=u_comp + u_tp + u_cp + u_ep, u_fwd=u_fwd, u_comp=u_comp, u_tp=u_tp, u_cp=u_cp, u_ep=u_ep,
        emb_f=emb_f, head_f=head_f, e_first=emb_f * (1 + compute.BACKWARD_TO_FORWARD),
        e_last=head_f * (1 + compute.BACKWARD_TO_FORWARD), dense_params=dense_params, expert_params=expert_params,
        rs_shard=_coeff_columns(bw, "reduce_scatter", *groups["dp_shard"], world),
        ag_shard=_coeff_columns(bw, "all_gather", *groups["dp_shard"], world),
        ar_rep=_coeff_columns(bw, "all_reduce", *groups["dp_replicate"], world),
        pp_p2p=_coeff_columns(bw, "p2p", *groups["pp"], world),
    )


def evaluate_table(
    ctx: CostContext, table: dict[str, np.ndarray], bw: comm.AxisBandwidth, rank_layers: np.ndarray | None = None
) -> TableResult:
    """Step time, breakdown and peak memory of every row of `table` (see module docstring).

    With `rank_layers` (rows x pp decoder layers per pipeline rank; every row must have that pp) the given
    partition is costed rank by rank instead of the optimal split, and per-rank memory is returned.
    """
    L = ctx.model.num_layers
    tp, cp, ep, pp = table["tp"], table["cp"], table["ep"], table["pp"]
    mb, m, v, zero, shard = table["mb"], table["m"], table["v"], table["zero"], table["dp_shard"]
    sched, rc, sp = table["sched"], table["rc"], table["sp"].astype(bool)
    lc = layer_costs(ctx, table, bw)
    tokens = lc.tokens
    u, u_fwd, u_comp, u_tp, u_cp, u_ep = lc.u, lc.u_fwd, lc.u_comp, lc.u_tp, lc.u_cp, lc.u_ep
    emb_f, head_f, e_first, e_last = lc.emb_f, lc.head_f, lc.e_first, lc.e_last
    dense_params, expert_params = lc.dense_params, lc.expert_params
    rs_shard, ag_shard, ar_rep, pp_p2p = lc.rs_shard, lc.ag_shard, lc.ar_rep, lc.pp_p2p
    expert_local = expert_params / (tp * ep)
    layer_local = dense_params / tp + expert_local
    eshard = expert_shard(table)
    emb_local = ctx.embedding_params / tp
    head_local = ctx.head_params / tp
    act = memory.activation_bytes_per_layer(ctx, mb, tp, cp, sp, rc)
    reserve = memory.reserve_bytes(ctx)
    buf = memory.fsdp_buffer_bytes(ctx, layer_local, zero, pp)
    logits = memory.logits_bytes(ctx, mb, tp, cp)
    if rank_layers is not None:
        return _explicit(ctx, table, rank_layers, u, u_fwd, u_comp, u_tp, u_cp, u_ep, emb_f, head_f, e_first, e_last,
                         layer_local, emb_local, head_local, act, reserve, buf, logits, tokens,
                         (rs_shard, ag_shard, ar_rep, pp_p2p), (expert_local, eshard))
    split = balanced_split(L, pp, u, e_first, e_last)
    single = pp == 1
    n0, nm, nl, trim = split.n_first, split.n_mid, split.n_last, split.mid_trimmed
    t0 = n0 * u + e_first + np.where(single, e_last, 0.0)
    tm = np.where(pp > 2, nm * u, 0.0)
    tl = nl * u + e_last
    f0 = n0 * u_fwd + emb_f + np.where(single, head_f, 0.0)
    fm = np.where(pp > 2, nm * u_fwd, 0.0)
    fl = nl * u_fwd + head_f
    t_max = np.where(single, t0, np.maximum(np.maximum(t0, tm), tl))
    f_max = np.where(single, f0, np.maximum(np.maximum(f0, fm), fl))
    n_mid_ranks = np.maximum(pp - 2, 0)
    t_sum = np.where(single, t0, t0 + tl + n_mid_ranks * tm - trim * u)
    f_sum = np.where(single, f0, f0 + fl + n_mid_ranks * fm - trim * u_fwd)
    mf = m.astype(float)
    pipe = np.select(
        [sched == 2, sched == 3],
        [mf * t_max + (t_sum - t_max) / v, mf * t_max + (f_sum - f_max)],
        t_sum + (mf - 1) * t_max,
    )
    pipe = np.where(single, mf * t0, pipe)
    bubble = pipe - mf * t_max
    p2p = np.where(single, 0.0, 2 * (mf * v + pp - 1) * comm.pp_p2p_s(ctx, pp_p2p, tokens, tp, sp))

    # Which representative rank is the bottleneck: its layers give the compute/comm split of the breakdown.
    n_bn = np.where(single, n0, np.select([t_max == t0, t_max == tl], [n0, nl], nm))
    e_bn = np.where(single, e_first + e_last, np.select([t_max == t0, t_max == tl], [e_first, e_last], 0.0))

    # Parameters per rank and DP/optimizer time of the slowest rank.
    params0 = n0 * layer_local + emb_local + np.where(single, head_local, 0.0)
    paramsm = nm * layer_local
    paramsl = nl * layer_local + head_local
    dp_terms = []
    for params, n in ((params0, n0), (paramsm, nm), (paramsl, nl)):
        dp_terms.append(
            comm.dp_time_s(ctx, params, zero, m, rs_shard, ag_shard, ar_rep, shard,
                           n * u_fwd, n * (u - u_fwd), n, pp)
        )
    dp_t = np.where(single, dp_terms[0], np.maximum(np.maximum(dp_terms[0], np.where(pp > 2, dp_terms[1], 0)), dp_terms[2]))
    params_max = np.where(single, params0, np.maximum(np.maximum(params0, np.where(pp > 2, paramsm, 0)), paramsl))
    opt = comm.optimizer_step_s(ctx, params_max, zero, shard)
    step = pipe + p2p + dp_t + opt
    # CPU processes sharing a host's cores: at least the host's CPU work over its cores (host_share.py).
    step, shared = host_share.apply(ctx, table, step, mf, u_comp, e_first, e_last,
                                    L * layer_local + emb_local + head_local,
                                    mf * n_bn * (u_tp + u_cp + u_ep) + p2p + dp_t)

    # Memory of the representative ranks.
    def rank_mem(rank, n_layers, params, extra):
        wgt, grd, opt_b = memory.model_state_bytes(ctx, params, zero, shard, pp, n_layers * expert_local, eshard)
        infl = memory.inflight_microbatches(sched, rank, pp, v, m)
        return wgt + grd + opt_b + act * n_layers * infl + buf + extra + reserve

    mem0 = rank_mem(np.zeros_like(pp), n0, params0, np.where(single, logits, 0.0))
    first_untrimmed = 1 + np.minimum(trim, np.maximum(pp - 3, 0))
    mem_mid = np.maximum(
        rank_mem(np.ones_like(pp), nm - (trim > 0), paramsm - (trim > 0) * layer_local, 0.0),
        rank_mem(first_untrimmed, nm, paramsm, 0.0),
    )
    mem_last = rank_mem(pp - 1, nl, paramsl, logits)
    peak = np.where(single, mem0, np.maximum(np.maximum(mem0, np.where(pp > 2, mem_mid, 0.0)), mem_last))
    fits = peak <= ctx.memory_capacity_bytes

    return TableResult(
        step_time_s=step,
        compute_s=mf * (n_bn * u_comp + e_bn) + shared,
        tp_comm_s=mf * n_bn * u_tp,
        cp_comm_s=mf * n_bn * u_cp,
        ep_comm_s=mf * n_bn * u_ep,
        pp_comm_s=p2p,
        dp_comm_s=dp_t,
        bubble_s=bubble,
        optimizer_s=opt,
        peak_memory_bytes=peak,
        fits=fits,
        split=split,
    )


def _explicit(ctx, table, rank_layers, u, u_fwd, u_comp, u_tp, u_cp, u_ep, emb_f, head_f, e_first, e_last,
              layer_local, emb_local, head_local, act, reserve, buf, logits, tokens, coeffs, experts) -> TableResult:
    """Rank-by-rank costing of a given partition (rows x pp); same formulas as the compact path."""
    rs_shard, ag_shard, ar_rep, pp_p2p = coeffs
    expert_local, eshard = experts
    pp, m, v, zero, shard, sched = table["pp"], table["m"], table["v"], table["zero"], table["dp_shard"], table["sched"]
    sp = table["sp"].astype(bool)
    n = np.asarray(rank_layers, dtype=float)
    p = n.shape[1]
    if np.any(pp != p):
        raise ValueError("rank_layers needs every row to have pp == number of columns")
    col = lambda x: np.asarray(x, dtype=float).reshape(-1, 1)  # noqa: E731
    first = np.zeros((1, p))
    first[0, 0] = 1.0
    last = np.zeros((1, p))
    last[0, -1] = 1.0
    t = n * col(u) + first * col(e_first) + last * col(e_last)
    f = n * col(u_fwd) + first * col(emb_f) + last * col(head_f)
    t_max, t_sum = t.max(axis=1), t.sum(axis=1)
    f_max, f_sum = f.max(axis=1), f.sum(axis=1)
    mf = m.astype(float)
    pipe = np.select(
        [sched == 2, sched == 3],
        [mf * t_max + (t_sum - t_max) / v, mf * t_max + (f_sum - f_max)],
        t_sum + (mf - 1) * t_max,
    )
    pipe = np.where(pp == 1, mf * t_max, pipe)
    bubble = pipe - mf * t_max
    p2p = np.where(pp == 1, 0.0, 2 * (mf * v + pp - 1) * comm.pp_p2p_s(ctx, pp_p2p, tokens, table["tp"], sp))
    bn = t.argmax(axis=1)
    rows = np.arange(len(pp))
    n_bn = n[rows, bn]
    e_bn = (first * col(e_first) + last * col(e_last))[rows, bn]
    params = n * col(layer_local) + first * col(emb_local) + last * col(head_local)
    dp_all = np.stack([
        comm.dp_time_s(ctx, params[:, r], zero, m, rs_shard, ag_shard, ar_rep, shard,
                       n[:, r] * u_fwd, n[:, r] * (u - u_fwd), n[:, r], pp)
        for r in range(p)
    ], axis=1)
    dp_t = dp_all.max(axis=1)
    opt = comm.optimizer_step_s(ctx, params.max(axis=1), zero, shard)
    step = pipe + p2p + dp_t + opt
    step, shared = host_share.apply(ctx, table, step, mf, u_comp, e_first, e_last, params.sum(axis=1),
                                    mf * n_bn * (u_tp + u_cp + u_ep) + p2p + dp_t)
    ranks = np.arange(p).reshape(1, -1)
    infl = memory.inflight_microbatches(col(sched), ranks, col(pp), col(v), col(m))
    wgt, grd, opt_b = memory.model_state_bytes(ctx, params, col(zero), col(shard), col(pp), n * col(expert_local),
                                               col(eshard))
    acts = col(act) * n * infl
    logit_b = last * col(logits)
    buf_b = np.broadcast_to(col(buf), n.shape)
    res_b = np.full(n.shape, reserve)
    total = wgt + grd + opt_b + acts + logit_b + buf_b + res_b
    peak = total.max(axis=1)
    return TableResult(
        step_time_s=step,
        compute_s=mf * (n_bn * u_comp + e_bn) + shared,
        tp_comm_s=mf * n_bn * u_tp,
        cp_comm_s=mf * n_bn * u_cp,
        ep_comm_s=mf * n_bn * u_ep,
        pp_comm_s=p2p,
        dp_comm_s=dp_t,
        bubble_s=bubble,
        optimizer_s=opt,
        peak_memory_bytes=peak,
        fits=peak <= ctx.memory_capacity_bytes,
        split=None,
        rank_memory={"weights": wgt, "gradients": grd, "optimizer": opt_b, "activations": acts, "logits": logit_b,
                     "buffers": buf_b, "reserve": res_b, "total": total},
    )
