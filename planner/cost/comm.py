"""Communication terms: the time of every dimension's collectives over the links it really uses.

Bandwidth and latency come from the topology graph (`Topology.axis_collective`): the group of each mesh axis
as laid out in rank order, with all groups of that axis running at once (they share NICs and uplinks).
Collective times follow NCCL's bus-bandwidth conventions (NCCL tests, doc/PERFORMANCE.md): all-reduce
2(n-1)/n * S / busbw, all-gather and reduce-scatter (n-1)/n * S / busbw, all-to-all (n-1)/n * S / busbw,
p2p S / bw, each plus the topology's latency term. A topology estimate is affine in the message size, so we
read its two coefficients once per (mesh, axis, kind) and apply them to whole columns of message sizes.

What each dimension sends, per layer and micro-batch (T tokens per CP rank, h hidden, 16-bit activations):
- TP (Megatron, Shoeybi et al. 2019 Sec. 3; Korthikanti et al. 2022 Sec. 4.2.2): two all-reduces of T*h in
  forward and two in backward; with SP the same volume as all-gather + reduce-scatter pairs. Not overlapped,
  unless the workload pipelines them with the GEMMs (`tp_exposed_s`: Megatron --tp-comm-overlap, PyTorch async TP)
  or Megatron's column-parallel backward runs them beside its own GEMMs (`tp_backward_exposed_s`).
- CP (Llama 3 paper Sec. 3.3.2): all-gather of K and V (2*T*kv_dim/tp per rank, cp ranks) in forward and a
  reduce-scatter of their gradients in backward. The executor gathers before attention (exposed); ring
  attention (Megatron-Core) overlaps the exchange with the attention core: `cp_exposed_s`.
- EP (Lepikhin et al. 2020, GShard): all-to-all dispatch and combine of T*top_k*h per MoE layer, forward and
  backward, plus the forward's exchange of per-expert token counts (E integers per rank: the split sizes,
  executor.ep). Not overlapped. Groups: `evaluate._ep_groups`; calibrated (measured_comm) by the executor's
  own uneven-split exchange.
- PP (Narayanan et al. 2021 Sec. 4.1 scatter/gather): one p2p of T*h/tp (with SP) per stage boundary and
  micro-batch chunk, forward and backward, on the critical path.
- DP/FSDP (Rajbhandari et al. 2020; Zhao et al. 2023, PyTorch FSDP): see `dp_time_s`.
"""

from __future__ import annotations

import math
import weakref
from functools import cache

import numpy as np

from planner.cost import fixed_costs, interference, overhead
from planner.cost.context import CostContext
from planner.cost.dp_groups import GroupCoeffCache
from planner.cost.measured_comm import MeasuredComm
from planner.cost.runtime import grad_reduce_bytes, p2p_sync_s, runtime_costs
from planner.layout.numeric import first_match, sorted_unique
from planner.layout.schedules import ScheduleCode
from planner.topology.ring_scaling import nodes_spanned, ring_bandwidth_factor

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
        self.group_coeffs = GroupCoeffCache()  # `dp_groups.dp_group_coeffs`'s, per distinct key
        # A world-free view's (a, b) per (kind, packed (size, stride)): asked once per pattern, whatever the world
        self.patterns: dict[tuple[str, int], tuple[float, float]] = {}
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
        self.group_coeffs = store.group_coeffs  # the DP groups' coefficients over this topology (`cost.dp_groups`)
        # A capacity-only view answers the same for every world of a group pattern (size, stride); measured
        # collectives (which check whether the groups lie in one host) may not.
        self._world_free = bool(getattr(topology, "answers_ignore_world", False)) and not self._measured.any

    def coeffs(self, kind: str, mesh_shape: tuple[int, ...], axis: int) -> tuple[float, float, str]:
        """(seconds at 0 bytes, seconds per byte, bottleneck) for a collective along `axis`.

        All-gather and reduce-scatter run the same ring as all-reduce (the same links and loads, NCCL ring
        algorithm), so they reuse its bus bandwidth with their own byte factor and half the latency steps. A ring
        that crosses more than a few nodes gets less than the topology's bus bandwidth
        (`planner.topology.ring_scaling`, measured). Measured collectives (planner.cost.measured_comm) replace
        this inside a host and floor it across a measured network.
        """
        if mesh_shape[axis] == 1:
            return 0.0, 0.0, "none"
        key = (kind, mesh_shape, axis)
        hit = self._cache.get(key)
        if hit is None:
            measured = self._measured.coeffs(kind, mesh_shape, axis)
            own_floor = self._measured.network_floor(kind, mesh_shape, axis)
            if measured is not None:
                hit = (measured[0], measured[1], "measured")
            elif kind in ("all_gather", "reduce_scatter") and own_floor is None:
                a_ar, b_ar, where = self.coeffs("all_reduce", mesh_shape, axis)  # with the all-reduce's floor, if any
                hit = (a_ar / 2.0, b_ar / 2.0, where)  # (n-1)/n vs 2(n-1)/n bytes, (n-1) vs 2(n-1) steps
            elif kind in ("all_gather", "reduce_scatter"):
                a_ar, b_ar, where = self._ring(mesh_shape, axis, "all_reduce")
                hit = _floored((a_ar / 2.0, b_ar / 2.0, where), own_floor)
            else:
                hit = _floored(self._ring(mesh_shape, axis, kind), own_floor)
            self._cache[key] = hit
        return hit

    def _ring(self, mesh_shape: tuple[int, ...], axis: int, kind: str) -> tuple[float, float, str]:
        """The topology's ring/p2p/all-to-all estimate of `kind` as (a, b, bottleneck), read at two sizes."""
        est = self.topology.axis_collective(kind, mesh_shape, axis)
        t0 = float(est.time_s(1e-30))
        t1 = float(est.time_s(_PROBE_BYTES))
        per_byte = (t1 - t0) / _PROBE_BYTES
        per_node = getattr(self.topology, "gpus_per_node", None)
        if kind == "all_reduce" and per_node:  # a ring over many nodes runs below its few-node bus bandwidth
            per_byte /= ring_bandwidth_factor(nodes_spanned(mesh_shape[axis], math.prod(mesh_shape[axis + 1:]),
                                                            int(per_node)))
        return t0, per_byte, str(getattr(est, "bottleneck", ""))

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
            keys, a, b = self._add_columns(kind, sorted_unique(key[~found]))
            pos = np.searchsorted(keys, key)
        return a[pos], b[pos]

    def _add_columns(self, kind: str, new: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Ask the topology for the packed keys `new` (none cached yet) and merge them into the table (once per
        group pattern where the answer does not depend on the world)."""
        ask, spread = new, None
        # All-to-all goes to the real topology even from a capacity-only view (`solver.bounds`), so it keeps its world.
        patterns = self._store.patterns if self._world_free and kind != "all_to_all" else None
        if self._world_free:
            _, first, spread = np.unique(new >> _FIELD_BITS, return_index=True, return_inverse=True)
            ask = new[first]
        new_a, new_b = np.empty(len(ask)), np.empty(len(ask))
        for i, k in enumerate(ask.tolist()):
            hit = None if patterns is None else patterns.get((kind, k >> _FIELD_BITS))
            if hit is None:
                n, st, w = k >> (2 * _FIELD_BITS), (k >> _FIELD_BITS) & _FIELD_MASK, k & _FIELD_MASK
                hit = self.coeffs(kind, (w // (n * st), n, st), 1)[:2]
                if patterns is not None:
                    patterns[kind, k >> _FIELD_BITS] = hit
            new_a[i], new_b[i] = hit
        if spread is not None:
            new_a, new_b = new_a[spread.reshape(-1)], new_b[spread.reshape(-1)]
        keys, a, b = self._store.columns.get(kind, _EMPTY)
        keys, a, b = np.concatenate([keys, new]), np.concatenate([a, new_a]), np.concatenate([b, new_b])
        order = np.argsort(keys, kind="stable")
        table = self._store.columns[kind] = (keys[order], a[order], b[order])
        if self._store.disk is not None:
            self._store.disk.changed(self._store.columns)
        return table


def _floored(model: tuple[float, float, str], floor: tuple[float, float] | None) -> tuple[float, float, str]:
    """The model's (a, b, bottleneck) held at or above a measured network floor (planner.cost.measured_comm: a
    measured bottleneck caps, it never speeds a collective up); the bottleneck names the measurement where it
    binds."""
    if floor is None:
        return model
    a, b, where = model
    return max(a, floor[0]), max(b, floor[1]), ("measured network" if floor[1] > b else where)


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


def tp_exposed_s(ctx: CostContext, tp_s: np.ndarray, gemm_s: np.ndarray, sp: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """Exposed seconds of one pass's TP collectives (`tp_s`) beside that pass's GEMMs (`gemm_s`).

    Without TP-communication overlap all of it. With it (`Workload.tp_comm_overlap`, layouts with sequence
    parallelism) the runtime hides the share `RuntimeCosts.tp_overlap_hidden` of it behind the GEMMs it feeds
    (never more than the GEMMs' own time), and that hidden part slows them by the interference factor
    (interference.py).
    """
    on = _tp_overlap_rows(ctx, sp, tp)
    if on is None:
        return tp_s
    hidden = runtime_costs(ctx.workload).tp_overlap_hidden
    overlapped = interference.exposed_s(tp_s, gemm_s, 1.0 - hidden, interference.slowdown(ctx))
    return np.where(on, overlapped, tp_s)


def _tp_overlap_rows(ctx: CostContext, sp: np.ndarray, tp: np.ndarray) -> np.ndarray | None:
    """The rows TP-communication overlap applies to (sequence parallelism, tp > 1), or None where the workload
    does not ask for it or its runtime cannot hide any of it (`tp_exposed_s`)."""
    asked = getattr(ctx.workload, "tp_comm_overlap", False)
    if not asked or runtime_costs(ctx.workload).tp_overlap_hidden <= 0.0:
        return None
    return np.asarray(sp, dtype=bool) & (np.asarray(tp) > 1)


def tp_backward_exposed_s(ctx: CostContext, tp_s: np.ndarray, wgrad_s: np.ndarray, column_wgrad_s: np.ndarray,
                          sp: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """Exposed seconds of one layer's backward TP collectives (`tp_s`: two all-reduce volumes, `tp_layer_fwd_s`).

    Rows under TP-communication overlap (`tp_exposed_s`) keep that model. Otherwise, where the runtime launches the
    column-parallel linears' backward collectives asynchronously (`RuntimeCosts.async_tp_backward`, Megatron):
    - no SP, with the release's async all-reduce (`Workload.async_tp_backward`): the two input-gradient all-reduces
      run beside the column-parallel weight-gradient GEMMs (`column_wgrad_s`): only what exceeds them shows, and
      the overlapped part slows them by the interference factor (interference.py);
    - SP: the two reduce-scatters (half the volume) run beside those weight-gradient GEMMs, the re-gathers of the
      layer input for them (another half, which Megatron does not keep from the forward) beside the
      input-gradient GEMMs of the same linears (as long: same shapes), and the row-parallel linears' gradient
      all-gathers (the last half) block.
    Everything else (eager PyTorch's DTensor TP, releases without the async all-reduce, CPU) is exposed.
    """
    overlapped = tp_exposed_s(ctx, tp_s, 2 * wgrad_s, sp, tp)
    if ctx.gpu_kind_is_cpu or not runtime_costs(ctx.workload).async_tp_backward:
        return overlapped
    overlap_on = _tp_overlap_rows(ctx, sp, tp)
    factor = interference.slowdown(ctx)
    half = 0.5 * np.asarray(tp_s, dtype=float)
    with_sp = half + 2 * interference.exposed_s(half, column_wgrad_s, 0.0, factor)
    without_sp = interference.exposed_s(tp_s, column_wgrad_s, 0.0, factor)
    if not getattr(ctx.workload, "async_tp_backward", True):
        without_sp = np.asarray(tp_s, dtype=float)
    asynced = np.where(np.asarray(sp, dtype=bool), with_sp, without_sp)
    return asynced if overlap_on is None else np.where(overlap_on, overlapped, asynced)


def cp_exposed_s(ctx: CostContext, cp_s: np.ndarray, attention_s: np.ndarray) -> np.ndarray:
    """Exposed seconds of one pass's CP exchange (`cp_s`) beside the attention core of that pass.

    The executor all-gathers K/V before attention and reduce-scatters their gradients after it, on the compute
    stream (executor/cp.py, `all_gather_single_autograd`): all exposed. Ring attention overlaps each step's
    P2P with the previous step's attention: only the excess shows, and the overlapped part slows attention.
    """
    if not runtime_costs(ctx.workload).cp_overlapped or ctx.gpu_kind_is_cpu:
        return cp_s
    return interference.exposed_s(cp_s, attention_s, 0.0, interference.slowdown(ctx))


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


def etp_layer_s(ctx: CostContext, ar, tokens: np.ndarray, tp: np.ndarray, sp: np.ndarray) -> np.ndarray:
    """Expert-TP exchange of one MoE layer and micro-batch, one pass (forward or backward alike).

    Where the dispatcher sends sequence shards (`ep_dispatch_tokens`), the rows an EP rank receives are
    all-gathered over TP before the expert GEMMs and their outputs reduce-scattered after them: together one
    all-reduce volume of the top_k T h routed rows (the backward runs the same pair reversed). The MoE layer then
    makes no dense-MLP TP exchange, one of the two all-reduce volumes `tp_layer_fwd_s` counts per layer, unless
    shared experts (which gather the hidden states like a dense MLP) are present: that one is taken off here.
    """
    moe = ctx.model.moe
    if moe is None or not runtime_costs(ctx.workload).ep_dispatch_sequence_shard:
        return np.zeros_like(tokens, dtype=float)
    on = np.asarray(sp, dtype=bool) & (tp > 1)
    rows = tokens * moe.top_k * ctx.model.hidden_size * ctx.act_bytes
    mlp = tokens * ctx.model.hidden_size * ctx.act_bytes if moe.num_shared_experts == 0 else 0.0
    return np.where(on, affine(ar, rows) - affine(ar, np.where(on, mlp, 0.0)), 0.0)


def pp_p2p_s(ctx: CostContext, p2p, tokens: np.ndarray, tp: np.ndarray, sp: np.ndarray) -> np.ndarray:
    """One stage-boundary transfer of one micro-batch's activations: 1/tp of them per TP rank when they are
    sequence-sharded (SP) or the runtime scatters them (`RuntimeCosts.p2p_scatter_gather`), else all of them."""
    split = sp | (tp > 1) if runtime_costs(ctx.workload).p2p_scatter_gather else sp
    msg = tokens * ctx.model.hidden_size * ctx.act_bytes / np.where(split, tp, 1)
    return affine(p2p, msg) + overhead.pp_transfer_s(ctx)


def pp_exposed_s(ctx: CostContext, transfer_s: np.ndarray, m: np.ndarray, v: np.ndarray, pp: np.ndarray,
                 sched: np.ndarray, chunk_fwd_s: np.ndarray) -> np.ndarray:
    """Exposed seconds of a step's stage-boundary transfers, `transfer_s` each.

    A pipeline step sends 2 (m v + p - 1) activations and gradients across stage boundaries (forward and
    backward, every micro-batch chunk plus the fill). Blocking sends (torch.distributed.pipelining, Megatron's
    1F1B) put each on the critical path. Megatron's interleaved schedule overlaps them with the next chunk's
    compute (`--overlap-p2p-communication`: an opt-in flag in 2023's Megatron-LM, on by default in Megatron-Core
    since 2024 (`--no-overlap-p2p-communication` turns it off); `Workload.overlap_pp_comm` says which): there the 2 m v steady-state transfers show only
    beyond one chunk's forward time `chunk_fwd_s` (plus the interference of the hidden part), the 2 (p - 1) fill
    and drain transfers stay exposed.
    Where the runtime synchronizes the host after every blocking exchange (`runtime.p2p_sync_s`), each exchange call
    adds that cost once (`blocking_exchange_calls`).
    """
    mf = np.asarray(m, dtype=float)
    vf = np.asarray(v, dtype=float)
    blocking = 2 * (mf * vf + pp - 1) * transfer_s + p2p_sync_s(ctx) * blocking_exchange_calls(mf, vf, pp, sched)
    overlaps = runtime_costs(ctx.workload).interleaved_p2p_overlapped and getattr(ctx.workload, "overlap_pp_comm", True)
    if not overlaps or ctx.gpu_kind_is_cpu:
        return np.where(pp > 1, blocking, 0.0)
    steady = interference.exposed_s(transfer_s, chunk_fwd_s, 0.0, interference.slowdown(ctx))
    overlapped = 2 * (pp - 1) * transfer_s + 2 * mf * vf * steady
    return np.where(pp > 1, np.where(np.asarray(sched) == ScheduleCode.INTERLEAVED, overlapped, blocking), 0.0)


def blocking_exchange_calls(m: np.ndarray, v: np.ndarray, pp: np.ndarray, sched: np.ndarray) -> np.ndarray:
    """Blocking exchange calls per step on the first pipeline rank of Megatron's schedules (megatron/schedules.py at
    285068c8), each one `_communicate` ending in a synchronize: 1F1B sends and receives through two calls per
    micro-batch (send_forward_recv_backward, send_backward_recv_forward, and the warm-up / cool-down singles):
    2 (m + p - 1); the interleaved schedule pairs each steady forward with a backward in one
    send_forward_backward_recv_forward_backward call, plus one call per warm-up and cool-down chunk
    ((p - 1) * 2 + (v - 1) p warm-up chunks on rank 0): m v + 2 (p - 1) + (v - 1) p. Zero-bubble schedules make
    none: the one Megatron runtime that runs them (Qi et al.'s fork, sail-sg/zero-bubble-pipeline-parallelism at
    82b2eb67, 2023-12, megatron/core/pipeline_parallel/zb_schedules.py) batches its sends in `fused_pipeline_ops` and
    waits on the returned requests (`h.wait()`, a stream wait) without synchronizing the host."""
    m, v, pp = np.asarray(m, dtype=float), np.asarray(v, dtype=float), np.asarray(pp, dtype=float)
    sched = np.asarray(sched)
    interleaved = m * v + 2 * (pp - 1) + (v - 1) * pp
    calls = np.where(sched == ScheduleCode.INTERLEAVED, interleaved, 2 * (m + pp - 1))
    return np.where(sched == ScheduleCode.ZB_H1, 0.0, calls)


def tied_embedding_allreduce_s(ctx: CostContext, p2p, pp: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """Seconds per step of the word-embedding gradient all-reduce between the first and the last pipeline stage
    (`RuntimeCosts.tied_embedding_allreduce`, tied embeddings, pp > 1): a ring of two ranks moves the whole
    V/tp x h gradient once each way (reduce-scatter + all-gather of halves), over the stages' p2p path, with two
    steps of its latency; nothing overlaps it."""
    pp = np.asarray(pp)
    if not (runtime_costs(ctx.workload).tied_embedding_allreduce and getattr(ctx.model, "tied_embeddings", False)):
        return np.zeros(pp.shape)
    tp = np.asarray(tp, dtype=np.int64)
    nbytes = -(-int(ctx.model.vocab_size) // tp) * float(ctx.model.hidden_size) * grad_reduce_bytes(ctx)
    a, b = p2p
    return np.where(pp > 1, 2.0 * a + b * nbytes, 0.0)


def dp_time_s(
    ctx: CostContext,
    params: np.ndarray,
    zero: np.ndarray,
    m: np.ndarray,
    shard_rs,
    shard_ag,
    replicate_ar,
    shard_ranks: np.ndarray,
    window_fwd_s: np.ndarray,
    window_bwd_s: np.ndarray,
    layers: np.ndarray,
    pp: np.ndarray,
    zero_bubble: np.ndarray | None = None,
    slowdown: np.ndarray | None = None,
) -> np.ndarray:
    """Exposed data-parallel time per step on one pipeline rank holding `params` parameters.

    Volumes (G = gradients at the runtime's reduction precision, `runtime.grad_reduce_bytes`: fp32 in
    mixed-precision training; W = 16-bit weights; S = sharding group dp_shard x cp of `shard_ranks` ranks,
    R = replicate group dp_replicate, or dp_replicate x cp under ZeRO-0: `cost.dp_groups`):
      ZeRO-0 (DDP): all-reduce G over R once per step (grad accumulation keeps local sums).
      ZeRO-1: reduce-scatter G over S + all-reduce G/S over R once per step; all-gather W over S after the
              optimizer (Megatron distributed optimizer). With `Workload.zero1_grad_allreduce` (DeepSpeed's
              BF16_Optimizer) G is all-reduced over S instead: the reduce-scatter plus an all-gather of G.
      ZeRO-2: reduce-scatter G over S after every micro-batch (gradients are kept sharded) + the R all-reduce
              and W all-gather once.
      ZeRO-3 (FSDP): per micro-batch all-gather W in forward, again in backward, reduce-scatter G; R all-reduce
              once (HSDP).
    FSDP2 (the pytorch runtimes) reshards ZeRO-1/2 weights after every micro-batch's backward, so without
    pipelining they are gathered again for every micro-batch's forward (`RuntimeCosts.regather_after_backward`),
    and each gather copies the weights out of its flat buffer on the compute stream (`fixed_costs.fsdp_copy_s`).
    Overlap model (Megatron --overlap-grad-reduce/--overlap-param-gather, FSDP prefetching): per-step
    gradient traffic hides behind the last micro-batch's backward, per-step parameter gathers behind the next
    step's first forward, and per-micro-batch traffic behind that micro-batch's forward/backward; only the
    excess is exposed, plus one layer's bucket (the first gather / last reduction cannot overlap), and the
    overlapped part slows the compute beside it by `slowdown` per row (`interference.data_group_slowdown`: the
    SMs NCCL takes for the row's DP group; the GPU family's factor where not given).
    Under pipeline parallelism (pp > 1) the pipeline schedule owns gradient synchronisation
    (memory.state_sharding_stage): ZeRO-2 reduces once per step like ZeRO-1; ZeRO-3 gathers W for the first
    forward and for every micro-batch's backward (the forward reshards, the backward does not) and reduces G
    once. With the pytorch runtimes that once-per-step reduction runs after the last backward
    (`PipelineStage.perform_reduce_grad`), so nothing hides it; Megatron-Core overlaps it as without PP. Under
    a zero-bubble schedule the executor shards only the chunk root (`RuntimeCosts.zero_bubble_chunk_fsdp`): one
    unit, gathered whole before the first forward and never resharded, reduced whole after the last W pass.
    """
    rc = runtime_costs(ctx.workload)
    grad_b = params * grad_reduce_bytes(ctx)
    w_b = params * ctx.weight_bytes
    shard = np.asarray(shard_ranks, dtype=float)
    piped = np.asarray(pp) > 1
    chunk_unit = piped & (np.zeros(np.shape(piped), dtype=bool) if zero_bubble is None else np.asarray(zero_bubble))
    chunk_unit = chunk_unit & rc.zero_bubble_chunk_fsdp
    # One collective per FSDP/DDP unit (each decoder layer, and the chunk root with embeddings/head), so the
    # per-call latency is paid that many times (PyTorch FSDP2 per-module units; Zhao et al. 2023 Sec. 3.2).
    units = np.where(chunk_unit, 1.0, np.maximum(layers.astype(float), 0.0) + 1.0)
    rs = affine_calls(shard_rs, grad_b, units)
    ag = affine_calls(shard_ag, w_b, units)
    ar_rep = affine_calls(replicate_ar, grad_b / np.where(zero >= 1, shard, 1.0), units)
    mf = m.astype(float)
    bucket = np.where(chunk_unit, 1.0, 1.0 / np.maximum(layers.astype(float), 1.0))
    if ctx.gpu_kind_is_cpu or not ctx.workload.overlap_dp_comm:
        # A framework that does not overlap (Workload.overlap_dp_comm) exposes it all. CPU processes: the cores
        # that compute also run gloo's copies and reductions, and FSDP has no side stream to overlap on, so
        # nothing hides (measured: a 4-rank ZeRO-1 step waits out every unit's
        # reduce-scatter; see planner/cost/host_share.py for how CPU work shares cores).
        window_fwd_s, window_bwd_s = np.zeros_like(window_fwd_s), np.zeros_like(window_bwd_s)
    factor = interference.slowdown(ctx) if slowdown is None else slowdown

    def hidden(comm, window):
        return interference.exposed_s(comm, window, bucket, factor)

    # Each stage's exposure is computed only where some row runs it (a search table seldom holds all four, and
    # ZeRO-2 is pruned under PP); the parts several stages share are computed once (`functools.cache`). Every formula is
    # element-wise, so a row's value is the same whichever others are computed beside it.
    zero = np.asarray(zero)
    staged = {s: zero == s for s in range(4)}
    piped_b = np.broadcast_to(piped, np.broadcast_shapes(np.shape(piped), zero.shape))
    chunk_b = np.broadcast_to(chunk_unit, piped_b.shape)
    needs = {"z0": staged[0].any(), "z2": (staged[2] & ~piped_b).any(), "z3": (staged[3] & ~piped_b).any(),
             "z3_piped": (staged[3] & piped_b & ~chunk_b).any()}
    needs["z1"] = bool(staged[1].any() or (staged[2] & piped_b).any() or (staged[3] & chunk_b).any())
    gather_fwd, reduce_bwd = cache(lambda: hidden(ag, window_fwd_s)), cache(lambda: hidden(ar_rep, window_bwd_s))
    # The once-per-step gradient reduction: behind the last backward, except after a PyTorch pipeline schedule.
    step_grad_window = np.where(piped & rc.reduce_after_last_backward_under_pp, 0.0, window_bwd_s)
    # ZeRO-1/2 weight gathers per step: one, or one per micro-batch where FSDP2 reshards after every backward.
    gathers12 = np.where(rc.regather_after_backward & ~piped, mf, 1.0)
    z0 = z1 = z2 = z3 = z3_piped = 0.0  # a stage no row runs: never selected
    if needs["z0"]:
        z0 = hidden(ar_rep, step_grad_window)
    if needs["z1"]:
        # DeepSpeed's BF16_Optimizer all-reduces the whole gradient under ZeRO-1: a ring all-reduce is the
        # reduce-scatter plus an all-gather of the same bytes (`Workload.zero1_grad_allreduce`).
        grad_rs = rs + affine_calls(shard_ag, grad_b, units) if ctx.workload.zero1_grad_allreduce else rs
        z1 = hidden(grad_rs + ar_rep, step_grad_window) + gathers12 * gather_fwd()
    if needs["z2"]:
        z2 = mf * hidden(rs, window_bwd_s) + reduce_bwd() + gathers12 * gather_fwd()
    if needs["z3"]:
        z3 = mf * (gather_fwd() + hidden(ag + rs, window_bwd_s)) + reduce_bwd()
    if needs["z3_piped"]:
        z3_piped = gather_fwd() + mf * hidden(ag, window_bwd_s) + hidden(rs + ar_rep, step_grad_window)
    z2 = np.where(piped, z1, z2)
    z3 = np.where(piped, np.where(chunk_unit, z1, z3_piped), z3)
    gathers = first_match([zero == 0, zero <= 2, piped & chunk_unit, piped], [0.0, np.where(piped, 1.0, gathers12), 1.0,
                                                                          1.0 + mf], 2.0 * mf)
    copies = fixed_costs.fsdp_copy_s(ctx, params, gathers)
    return first_match([staged[0], staged[1], staged[2]], [z0, z1, z2], z3) + copies

