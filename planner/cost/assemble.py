"""The one step-time assembler: per-pipeline-rank work and memory in, step time, breakdown and peak memory out.

Every costing path builds a `RankWork` (per layout row and pipeline-rank column: seconds per micro-batch,
parameters, layers, memory) and calls `assemble`:
  - the search's compact table (`evaluate.evaluate_table`): four representative columns per row, the first
    and last rank, an untrimmed and a trimmed middle rank, each weighted by how many ranks it stands for
    (exact for the makespan and the peak memory, see cost/partition.py);
  - the rank-by-rank costing of a given partition (`evaluate.evaluate_table(rank_layers=...)`): one column
    per pipeline rank;
  - the costing by layer type on each rank's own GPU (`cost.typed`).
So the search, the plans and the schedule figure share every formula below:

  t_r, f_r, w_r     rank r's time per micro-batch (forward + backward + recompute + exposed in-layer
                    communication), its forward part and its weight-gradient GEMMs (the W pass); the
                    pipeline phase is the schedule's makespan (`planner.layout.schedules`, with the
                    zero-bubble unit g_r = t_r - 2 w_r), the bubble that minus m * max_r t_r;
  PP transfers      2 * (m * v + p - 1) p2p transfers of one micro-batch's activations, as exposed as the
                    runtime leaves them (`comm.pp_exposed_s`: Megatron's interleaved schedule overlaps the
                    steady-state ones with a chunk's forward);
  DP/FSDP           the exposed data-parallel time of the slowest rank (`comm.dp_time_s`, windows: its
                    layers' forward and backward; zero-bubble schedules shard whole chunks), plus the tied
                    word-embedding gradient all-reduce between the end stages (`comm.tied_embedding_allreduce_s`);
  optimizer         the slowest rank's AdamW step with clipping and the runtime's per-step passes
                    (`fixed_costs.optimizer_step_s`); step = pipeline + p2p + DP + optimizer, then at least
                    the host's CPU work over its cores for CPU processes (`host_share`);
  breakdown         compute and in-layer communication of the bottleneck rank (the first rank with the
                    largest t_r), times m;
  memory            per rank (`rank_memory`): model states (ZeRO), activations x micro-batches in flight
                    (schedule registry) plus the sent stage outputs the runtime keeps, logits on the last rank,
                    FSDP buffers and the pipeline receive buffers the runtime keeps, reserve; peak = the largest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.cost import comm, fixed_costs, host_share, memory
from planner.cost.context import CostContext
from planner.cost.dp_groups import replicate_coeffs
from planner.cost.partition import StageSplit
from planner.layout.expert_groups import state_shard_ranks
from planner.layout.schedules import (
    by_code,
    extra_recv_buffers,
    inflight_microbatches,
    inflight_sent_outputs,
    makespan,
)

MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "logits", "buffers", "reserve")


@dataclass
class TableResult:
    """Per-row outputs of a costing (all arrays)."""

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
    rank_memory: dict[str, np.ndarray] | None = None  # rank by rank: rows x pp arrays per memory component
    pipeline_s: np.ndarray | None = None  # the pipeline phase (makespan) per row
    rank_total_s: np.ndarray | None = None  # rows x columns: t_r, seconds per micro-batch
    rank_forward_s: np.ndarray | None = None  # rows x columns: f_r
    rank_weight_grad_s: np.ndarray | None = None  # rows x columns: w_r, the W pass inside t_r
    rank_capacity_bytes: np.ndarray | None = None  # rows x columns: memory of each rank's GPU


@dataclass
class RankWork:
    """Per row (axis 0) and pipeline-rank column (axis 1); seconds are per micro-batch."""

    total_s: np.ndarray  # t_r: forward + backward + recompute + exposed in-layer communication
    forward_s: np.ndarray  # f_r: its forward part
    weight_grad_s: np.ndarray  # w_r: its weight-gradient GEMMs (the W pass of zero-bubble schedules)
    compute_s: np.ndarray  # compute part of t_r (embedding / head included)
    tp_s: np.ndarray  # exposed in-layer TP, CP and EP communication parts of t_r
    cp_s: np.ndarray
    ep_s: np.ndarray
    params: np.ndarray  # parameters held (local to the GPU)
    layers: np.ndarray  # decoder layers
    fwd_window_s: np.ndarray  # the layers' forward and backward time, behind which DP traffic can hide
    bwd_window_s: np.ndarray
    memory: dict[str, np.ndarray]  # MEMORY_PARTS and "total", bytes per GPU
    capacity_bytes: Any  # per column, or one number
    weight: np.ndarray  # pipeline ranks the column stands for (1 rank by rank; 0 = no such rank)
    optimizer_contexts: list[CostContext] | None = field(default=None)  # per column (its GPU), else the main one


def rank_memory(ctx: CostContext, table: dict[str, np.ndarray], params: np.ndarray, layers: np.ndarray,
                rank: np.ndarray, activation_bytes: np.ndarray, last: np.ndarray, buffer_bytes: np.ndarray,
                expert_params: Any = 0.0, expert_shard: Any = None) -> dict[str, np.ndarray]:
    """Memory components of ranks (arrays broadcast against rows x columns; table columns are per row):
    `params` held (`expert_params` of them routed experts, ZeRO-sharded over `expert_shard` ranks), `layers`,
    pipeline index `rank`, one layer's activation bytes per micro-batch, whether it is the last rank
    (logits), FSDP buffers."""
    col = _col
    sched, pp, v, m, zero, shard = (col(table[k]) for k in ("sched", "pp", "v", "m", "zero", "dp_shard"))
    wgt, grd, opt = memory.model_state_bytes(ctx, params, zero, shard, pp, expert_params, expert_shard,
                                             cp=col(table["cp"]))
    acts = activation_bytes * layers * inflight_microbatches(sched, rank, pp, v, m)
    # the stage outputs it has sent and still holds (`memory.sent_output_bytes`; 0 where the runtime frees them)
    sent = col(memory.sent_output_bytes(ctx, table["mb"], table["tp"], table["cp"], table["sp"]))
    acts = acts + sent * inflight_sent_outputs(sched, rank, pp, v, m, last)
    logits = last * col(memory.logits_bytes(ctx, table["mb"], table["tp"], table["cp"]))
    # the receive buffers a runtime allocates for every micro-batch of the step, beyond the in-flight stage inputs
    # (`memory.recv_buffer_bytes`, `schedules.extra_recv_buffers`; 0 where the runtime allocates them per transfer)
    recv = col(memory.recv_buffer_bytes(ctx, table["mb"], table["tp"], table["cp"], table["sp"]))
    buffer_bytes = buffer_bytes + recv * extra_recv_buffers(sched, rank, pp, v, m, last)
    shape = np.broadcast(wgt, acts, logits).shape
    out = {"weights": wgt, "gradients": grd, "optimizer": opt, "activations": acts, "logits": logits,
           "buffers": np.broadcast_to(buffer_bytes, shape), "reserve": np.full(shape, memory.reserve_bytes(ctx))}
    out = {k: np.broadcast_to(x, shape).astype(float) for k, x in out.items()}
    out["total"] = sum(out[k] for k in MEMORY_PARTS)
    return out


def _col(x: Any) -> np.ndarray:
    return np.asarray(x).reshape(-1, 1)


def masked_max(x: np.ndarray, present: np.ndarray) -> np.ndarray:
    return np.where(present, x, -np.inf).max(axis=1)


def memory_fit(total: np.ndarray, present: np.ndarray, capacity_bytes: float) -> tuple[np.ndarray, np.ndarray]:
    """(fits, peak bytes) per row from the ranks' memory totals (`present`: the columns that are real ranks)."""
    return np.all(~present | (total <= capacity_bytes), axis=1), masked_max(total, present)


def assemble(ctx: CostContext, table: dict[str, np.ndarray], work: RankWork, lc: Any,
             split: StageSplit | None = None, per_rank_memory: bool = False) -> TableResult:
    """Step time, breakdown and peak memory of every row from its ranks' work (module docstring).
    `lc` holds the collective coefficients and tokens per micro-batch (`layer_costs.LayerCosts`)."""
    pp, m, v, zero, shard = table["pp"], table["m"], table["v"], table["zero"], table["dp_shard"]
    sp = table["sp"].astype(bool)
    w = work.weight
    present = w > 0
    mf = m.astype(float)
    t, f = work.total_s, work.forward_s
    g = t - 2 * work.weight_grad_s  # T_F + T_B - T_W per rank: the zero-bubble schedules' bubble unit
    t_max, f_max, g_max = masked_max(t, present), masked_max(f, present), masked_max(g, present)
    t_sum, g_sum = (w * t).sum(axis=1), (w * g).sum(axis=1)
    pipe = makespan(table["sched"], mf, v, t_max, t_sum, g_max, g_sum, pp)
    bubble = pipe - mf * t_max
    transfer = comm.pp_p2p_s(ctx, lc.pp_p2p, lc.tokens, table["tp"], sp)
    p2p = comm.pp_exposed_s(ctx, transfer, m, v, pp, table["sched"], f_max / v)
    rows = np.arange(len(pp))
    bn = np.where(present, t, -np.inf).argmax(axis=1)  # the bottleneck rank: first column with the largest t_r
    zero_bubble = by_code(table["sched"], lambda s: s.splits_backward).astype(bool)
    # Every rank column at once: the per-row columns and coefficients broadcast as (rows, 1) against the ranks'
    # (rows, ranks) arrays, element for element the same arithmetic as one call per rank column.
    c = _col
    ar = replicate_coeffs(lc.ar_rep, lc.ar_ddp, zero)
    dp_all = comm.dp_time_s(ctx, work.params, c(zero), c(m), tuple(map(c, lc.rs_shard)), tuple(map(c, lc.ag_shard)),
                            tuple(map(c, ar)), c(state_shard_ranks(shard, table["cp"])), work.fwd_window_s,
                            work.bwd_window_s, work.layers, c(pp), c(zero_bubble),
                            c(lc.dp_slowdown))
    dp_t = masked_max(dp_all, present) + comm.tied_embedding_allreduce_s(ctx, lc.pp_p2p, pp, table["tp"])
    if not work.optimizer_contexts:  # one GPU kind: every column at once
        opt_all = fixed_costs.optimizer_step_s(ctx, work.params, c(zero), c(shard), cp=c(table["cp"]))
    else:
        opt_all = np.stack([fixed_costs.optimizer_step_s(oc, work.params[:, r], zero, shard, cp=table["cp"])
                            for r, oc in enumerate(work.optimizer_contexts)], axis=1)
    opt = masked_max(opt_all, present)
    step = pipe + p2p + dp_t + opt
    in_layer = work.tp_s[rows, bn] + work.cp_s[rows, bn] + work.ep_s[rows, bn]
    # CPU processes sharing a host's cores: at least the host's CPU work over its cores (host_share.py).
    step, shared = host_share.apply(ctx, table, step, mf, (w * work.compute_s).sum(axis=1), (w * work.params).sum(axis=1),
                                    mf * in_layer + p2p + dp_t)
    total = work.memory["total"]
    fits, peak = memory_fit(total, present, work.capacity_bytes)
    return TableResult(
        step_time_s=step,
        compute_s=mf * work.compute_s[rows, bn] + shared,
        tp_comm_s=mf * work.tp_s[rows, bn],
        cp_comm_s=mf * work.cp_s[rows, bn],
        ep_comm_s=mf * work.ep_s[rows, bn],
        pp_comm_s=p2p,
        dp_comm_s=dp_t,
        bubble_s=bubble,
        optimizer_s=opt,
        peak_memory_bytes=peak,
        fits=fits,
        split=split,
        rank_memory=work.memory if per_rank_memory else None,
        pipeline_s=pipe,
        rank_total_s=t,
        rank_forward_s=f,
        rank_weight_grad_s=work.weight_grad_s,
        rank_capacity_bytes=np.broadcast_to(np.asarray(work.capacity_bytes, dtype=float), total.shape),
    )
