"""Communication terms: the time of every dimension's collectives over the links it really uses.

Bandwidth and latency come from the topology graph (`Topology.axis_collective`): the group of each mesh axis
as laid out in rank order, with all groups of that axis running at once (they share NICs and uplinks).
Collective times follow NCCL's bus-bandwidth conventions (NCCL tests, doc/PERFORMANCE.md): all-reduce
2(n-1)/n * S / busbw, all-gather and reduce-scatter (n-1)/n * S / busbw, all-to-all (n-1)/n * S / busbw,
p2p S / bw, each plus the topology's latency term. A topology estimate is affine in the message size, so we
read its two coefficients once per (mesh, axis, kind) and apply them to whole columns of message sizes.

What each dimension sends, per layer and micro-batch (T tokens per CP rank, h hidden, 16-bit activations):
- TP (Megatron, Shoeybi et al. 2019 Sec. 3; Korthikanti et al. 2022 Sec. 4.2.2): two all-reduces of T*h in
  forward and two in backward; with SP the same volume as all-gather + reduce-scatter pairs. Not overlapped.
- CP (Llama 3 paper Sec. 3.3.2): all-gather of K and V (2*T*kv_dim/tp per rank, cp ranks) in forward and a
  reduce-scatter of their gradients in backward; overlapped with the attention core, only the excess shows.
- EP (Lepikhin et al. 2020, GShard): all-to-all dispatch and combine of T*top_k*h per MoE layer, forward and
  backward, plus the forward's exchange of per-expert token counts (E integers per rank: the split sizes,
  executor.ep). Not overlapped. Groups: `evaluate._ep_groups`; calibrated (measured_comm) by the executor's
  own uneven-split exchange.
- PP (Narayanan et al. 2021 Sec. 4.1 scatter/gather): one p2p of T*h/tp (with SP) per stage boundary and
  micro-batch chunk, forward and backward, on the critical path.
- DP/FSDP (Rajbhandari et al. 2020; Zhao et al. 2023, PyTorch FSDP): see `dp_time_s`.
"""

from __future__ import annotations

import weakref

import numpy as np

from planner.cost import overhead
from planner.cost.context import CostContext
from planner.cost.measured_comm import MeasuredComm

_PROBE_BYTES = 1e9
_FIELD_BITS = 21  # group size, stride and world are packed into one int64 key, 21 bits each
_FIELD_MASK = (1 << _FIELD_BITS) - 1
_EMPTY = (np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0))


class _Store:
    """The coefficient caches of one topology, shared by every `AxisBandwidth` over it for as long as the
    topology lives (the search, the plan builder, `explain` and a sweep's searches all ask the same groups).

    `columns` holds, per collective kind, the sorted packed keys (size, stride, world) with their (a, b)
    coefficients; a real `Topology`'s table is also kept on disk per cluster fingerprint
    (`planner.cost.comm_cache`), so a new process starts with the groups earlier ones asked.
    """

    def __init__(self, topology) -> None:
        from planner.topology import Topology

        self.scalar: dict[tuple, tuple[float, float, str]] = {}
        self.measured = MeasuredComm(topology)  # calibrated per-kind costs, where the profile has them
        self.columns: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.disk = None
        if type(topology) is Topology:  # not the search's optimistic views, whose answers differ
            from planner.cost import comm_cache

            self.disk = comm_cache.open_entry(topology.cluster)
            if self.disk is not None:
                self.columns = self.disk.load()


_STORES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class AxisBandwidth:
    """Affine collective-time coefficients per (mesh shape, axis, kind), cached per topology across calls."""

    def __init__(self, topology) -> None:
        self.topology = topology
        self.num_gpus = int(topology.num_gpus)
        store = _STORES.get(topology)
        if store is None:
            store = _STORES[topology] = _Store(topology)
        self._store = store
        self._cache = store.scalar
        self._measured = store.measured

    def coeffs(self, kind: str, mesh_shape: tuple[int, ...], axis: int) -> tuple[float, float, str]:
        """(seconds at 0 bytes, seconds per byte, bottleneck) for a collective along `axis`.

        All-gather and reduce-scatter run the same ring as all-reduce (the same links and loads, NCCL ring
        algorithm), so they reuse its bus bandwidth with their own byte factor and half the latency steps.
        """
        if mesh_shape[axis] == 1:
            return 0.0, 0.0, "none"
        key = (kind, mesh_shape, axis)
        hit = self._cache.get(key)
        if hit is None:
            measured = self._measured.coeffs(kind, mesh_shape, axis)
            if measured is not None:
                hit = (measured[0], measured[1], "measured")
            elif kind in ("all_gather", "reduce_scatter"):
                a_ar, b_ar, where = self.coeffs("all_reduce", mesh_shape, axis)
                hit = (a_ar / 2.0, b_ar / 2.0, where)  # (n-1)/n vs 2(n-1)/n bytes, (n-1) vs 2(n-1) steps
            else:
                est = self.topology.axis_collective(kind, mesh_shape, axis)
                t0 = float(est.time_s(1e-30))
                t1 = float(est.time_s(_PROBE_BYTES))
                hit = (t0, (t1 - t0) / _PROBE_BYTES, str(getattr(est, "bottleneck", "")))
            self._cache[key] = hit
        return hit

    def columns(self, kind: str, size: np.ndarray, stride: np.ndarray, world: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(a, b) coefficient columns of `kind` along groups of `size` ranks spaced `stride` apart, in a mesh
        over the first `world` ranks, one entry per row (vectorised: one lookup for the whole column).

        When a layout leaves GPUs idle, the groups are still costed over the whole cluster (world = all GPUs,
        where the group pattern tiles it): the idle GPUs' slots are assumed to carry traffic of the same
        pattern (other jobs on the fabric), a conservative choice that also lets one topology query serve
        every layout with that group pattern. Each distinct (size, stride, world) is asked of the topology
        once per topology (`coeffs` on the mesh (world / (size * stride), size, stride), axis 1); later
        columns only look their keys up.
        """
        size, stride = np.asarray(size, dtype=np.int64), np.asarray(stride, dtype=np.int64)
        total = self.num_gpus
        if total > _FIELD_MASK:
            raise ValueError(f"clusters of more than {_FIELD_MASK:,} GPUs are not supported (got {total:,})")
        world = np.where(total % (size * stride) == 0, total, np.asarray(world, dtype=np.int64))
        key = (size << (2 * _FIELD_BITS)) | (stride << _FIELD_BITS) | world
        keys, a, b = self._store.columns.get(kind, _EMPTY)
        pos = np.searchsorted(keys, key)
        found = pos < len(keys)
        found[found] = keys[pos[found]] == key[found]
        if not found.all():
            keys, a, b = self._add_columns(kind, np.unique(key[~found]))
            pos = np.searchsorted(keys, key)
        return a[pos], b[pos]

    def _add_columns(self, kind: str, new: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Ask the topology for the packed keys `new` (none cached yet) and merge them into the table."""
        new_a, new_b = np.empty(len(new)), np.empty(len(new))
        for i, k in enumerate(new.tolist()):
            n, st, w = k >> (2 * _FIELD_BITS), (k >> _FIELD_BITS) & _FIELD_MASK, k & _FIELD_MASK
            new_a[i], new_b[i], _ = self.coeffs(kind, (w // (n * st), n, st), 1)
        keys, a, b = self._store.columns.get(kind, _EMPTY)
        keys, a, b = np.concatenate([keys, new]), np.concatenate([a, new_a]), np.concatenate([b, new_b])
        order = np.argsort(keys, kind="stable")
        table = self._store.columns[kind] = (keys[order], a[order], b[order])
        if self._store.disk is not None:
            self._store.disk.changed(self._store.columns)
        return table


def affine(coeffs: tuple[np.ndarray, np.ndarray], nbytes: np.ndarray) -> np.ndarray:
    a, b = coeffs
    return np.where(nbytes > 0, a + b * nbytes, 0.0)


def affine_calls(coeffs: tuple[np.ndarray, np.ndarray], nbytes: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """`nbytes` moved in `calls` collectives: the latency `calls` times, the bytes once."""
    a, b = coeffs
    return np.where(nbytes > 0, a * calls + b * nbytes, 0.0)


def tp_layer_fwd_s(ctx: CostContext, ar, tokens: np.ndarray) -> np.ndarray:
    """Forward TP communication of one layer and micro-batch: 2 all-reduce-volumes of T*h activations."""
    return 2 * affine(ar, tokens * ctx.model.hidden_size * ctx.act_bytes)


def cp_layer_fwd_s(ctx: CostContext, ag, tokens: np.ndarray, tp: np.ndarray, cp: np.ndarray) -> np.ndarray:
    """Forward CP all-gather of K and V (full gathered size cp * local) for one layer and micro-batch."""
    kv_dim = ctx.model.num_kv_heads * ctx.model.head_dim
    gathered = 2 * tokens * cp * kv_dim / tp * ctx.act_bytes
    return affine(ag, np.where(cp > 1, gathered, 0.0))


COUNT_BYTES = 8
"""Bytes of one exchanged token count (int64, executor.ep)."""


def ep_layer_bwd_s(ctx: CostContext, a2a, tokens: np.ndarray, ep: np.ndarray) -> np.ndarray:
    """Backward EP all-to-alls of one MoE layer and micro-batch: the gradients of dispatch and combine."""
    if ctx.model.moe is None:
        return np.zeros_like(tokens, dtype=float)
    msg = tokens * ctx.model.moe.top_k * ctx.model.hidden_size * ctx.act_bytes
    return 2 * affine(a2a, np.where(ep > 1, msg, 0.0))


def ep_layer_fwd_s(ctx: CostContext, a2a, tokens: np.ndarray, ep: np.ndarray) -> np.ndarray:
    """Forward EP all-to-alls of one MoE layer and micro-batch: token counts, dispatch and combine."""
    if ctx.model.moe is None:
        return np.zeros_like(tokens, dtype=float)
    counts = np.where(ep > 1, ctx.model.moe.num_experts * COUNT_BYTES, 0.0)
    return ep_layer_bwd_s(ctx, a2a, tokens, ep) + affine(a2a, counts)


def pp_p2p_s(ctx: CostContext, p2p, tokens: np.ndarray, tp: np.ndarray, sp: np.ndarray) -> np.ndarray:
    """One stage-boundary transfer of one micro-batch's activations (scatter/gather: 1/tp of them)."""
    msg = tokens * ctx.model.hidden_size * ctx.act_bytes / np.where(sp | (tp > 1), tp, 1)
    return affine(p2p, msg) + overhead.pp_transfer_s(ctx)


def dp_time_s(
    ctx: CostContext,
    params: np.ndarray,
    zero: np.ndarray,
    m: np.ndarray,
    shard_rs,
    shard_ag,
    replicate_ar,
    dp_shard: np.ndarray,
    window_fwd_s: np.ndarray,
    window_bwd_s: np.ndarray,
    layers: np.ndarray,
    pp: np.ndarray,
) -> np.ndarray:
    """Exposed data-parallel time per step on one pipeline rank holding `params` parameters.

    Volumes (G = grads, W = 16-bit weights; S = sharding group, R = replicate group):
      ZeRO-0 (DDP): all-reduce G over R once per step (grad accumulation keeps local sums).
      ZeRO-1: reduce-scatter G over S + all-reduce G/S over R once per step; all-gather W over S after the
              optimizer (Megatron distributed optimizer).
      ZeRO-2: reduce-scatter G over S after every micro-batch (gradients are kept sharded) + the R all-reduce
              and W all-gather once.
      ZeRO-3 (FSDP): per micro-batch all-gather W in forward, again in backward, reduce-scatter G; R all-reduce
              once (HSDP).
    Overlap model (Megatron --overlap-grad-reduce/--overlap-param-gather, FSDP prefetching): per-step
    gradient traffic hides behind the last micro-batch's backward, per-step parameter gathers behind the next
    step's first forward, and per-micro-batch traffic behind that micro-batch's forward/backward; only the
    excess is exposed, plus one layer's bucket (the first gather / last reduction cannot overlap).
    Under pipeline parallelism (pp > 1) the pipeline schedule owns gradient synchronisation
    (memory.state_sharding_stage): ZeRO-2 reduces once per step like ZeRO-1; ZeRO-3 gathers W for the first
    forward and for every micro-batch's backward (the forward reshards, the backward does not) and reduces G
    once. With the pytorch runtime that once-per-step reduction runs after the last backward
    (`PipelineStage.perform_reduce_grad`), so nothing hides it; Megatron-Core overlaps it as without PP.
    """
    grad_b = params * ctx.grad_bytes
    w_b = params * ctx.weight_bytes
    shard = dp_shard.astype(float)
    # One collective per FSDP/DDP unit (each decoder layer, and the chunk root with embeddings/head), so the
    # per-call latency is paid that many times (PyTorch FSDP2 per-module units; Zhao et al. 2023 Sec. 3.2).
    units = np.maximum(layers.astype(float), 0.0) + 1.0
    rs = affine_calls(shard_rs, grad_b, units)
    ag = affine_calls(shard_ag, w_b, units)
    ar_rep = affine_calls(replicate_ar, grad_b / np.where(zero >= 1, shard, 1.0), units)
    mf = m.astype(float)
    bucket = 1.0 / np.maximum(layers.astype(float), 1.0)
    if ctx.gpu_kind_is_cpu or not ctx.workload.overlap_dp_comm:
        # A framework that does not overlap (Workload.overlap_dp_comm) exposes it all. CPU processes: the cores
        # that compute also run gloo's copies and reductions, and FSDP has no side stream to overlap on, so
        # nothing hides (measured: a 4-rank ZeRO-1 step waits out every unit's
        # reduce-scatter; see planner/cost/host_share.py for how CPU work shares cores).
        window_fwd_s, window_bwd_s = np.zeros_like(window_fwd_s), np.zeros_like(window_bwd_s)

    def hidden(comm, window):
        return np.maximum(comm - window, comm * bucket)

    piped = np.asarray(pp) > 1
    # The once-per-step gradient reduction: behind the last backward, except after a PyTorch pipeline schedule.
    step_grad_window = np.where(piped & (ctx.workload.runtime == "pytorch"), 0.0, window_bwd_s)
    z0 = hidden(ar_rep, step_grad_window)
    z1 = hidden(rs + ar_rep, step_grad_window) + hidden(ag, window_fwd_s)
    z2 = mf * hidden(rs, window_bwd_s) + hidden(ar_rep, window_bwd_s) + hidden(ag, window_fwd_s)
    z3 = mf * (hidden(ag, window_fwd_s) + hidden(ag + rs, window_bwd_s)) + hidden(ar_rep, window_bwd_s)
    z3_piped = hidden(ag, window_fwd_s) + mf * hidden(ag, window_bwd_s) + hidden(rs + ar_rep, step_grad_window)
    z2 = np.where(piped, z1, z2)
    z3 = np.where(piped, z3_piped, z3)
    return np.select([zero == 0, zero == 1, zero == 2], [z0, z1, z2], z3)


def optimizer_step_s(ctx: CostContext, params: np.ndarray, zero: np.ndarray, dp_shard: np.ndarray) -> np.ndarray:
    """AdamW update: memory-bound pass over master weights, moments, gradients and 16-bit weights.

    Bytes per parameter touched: read+write fp32 master, m, v (24), read gradient (2 or 4), write 16-bit
    weight (2) — the fused Adam kernels are bandwidth-bound (Apex/PyTorch fused AdamW).
    """
    per_param = 24 + ctx.grad_bytes + ctx.weight_bytes
    local = params / np.where(zero >= 1, dp_shard.astype(float), 1.0)
    traffic = local * per_param / ctx.memory_bandwidth_Bps
    # An unfused optimizer (eager PyTorch AdamW on CPU) makes many passes: its measured time per parameter,
    # where calibrated (planner.cost.overhead), bounds the step from below.
    measured = overhead.optimizer_s(ctx, local)
    return traffic if measured is None else np.maximum(traffic, measured)
