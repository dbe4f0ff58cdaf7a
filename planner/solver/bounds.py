"""Lower bounds on the step time and memory of a shape, and of a shape at one micro-batch size, over every
other knob: what lets the branch and bound in `exact.py` skip most of the space and stay exact.

Shape bound (tp, cp, pp, dp, ep), vectorised over all shapes, nothing but FLOPs and parameter counts:
  time   the busiest GPU does at least 1/W of the step's model FLOPs (no recompute) at the fastest rate any
         kernel reaches (the GEMM plateau or the fused attention kernel's efficiency, whichever is higher);
  memory its model states with everything sharded (ZeRO-3 over all of DP x CP) plus the reserve.

Micro-batch bound (shape, micro_batch): the pipeline's own makespan, its stage-boundary transfers and the
optimizer step. A rank's time is at least its layers' forward + backward compute (no recomputation, the faster of
SP on or off) plus the TP collectives that nothing hides (two forward volumes per layer and micro-batch,
comm.tp_layer_fwd_s; with TP overlap the part comm.tp_exposed_s leaves with SP, the least any layout can expose;
in backward the least over SP on and off of what comm.tp_backward_exposed_s leaves) and the CP exchange as exposed
as the runtime leaves it beside the longest attention window (comm.cp_exposed_s), plus the embedding on rank 0 and
the head on the last. So every per-rank time t_r and zero-bubble unit g_r = t_r - 2 w_r has a lower bound, and so
have sum_r t_r (every layer counted once), sum_r g_r and max_r t_r (the exact min-max split of the lower per-layer
times, `partition.balanced_split`; the min-max makespan only grows with the layer and end times). Every registry
makespan grows with t_max, t_sum and g_sum and shrinks with g_max (planner.layout.schedules), and g_max <= t_max,
so each schedule's formula at (t_max, t_sum, g_max := t_max, g_sum) bounds it; schedules that need a micro-batch
per rank are left out when m < pp. To it each schedule adds its stage-boundary transfers (comm.pp_exposed_s, with
an unbounded overlap window and the capacity-only p2p cost of the pipeline groups, `Topology.
axis_collective_bound`, over the orders the search can build); the bound is the least over the schedules (and
virtual-stage counts) the pins allow. The optimizer step adds at least that of a rank holding 1/pp of the
parameters sharded over all of DP (fixed_costs.optimizer_step_s grows with the parameters held).
Left out (each >= 0): EP exposure, recomputation, DP/FSDP exposure (bounded per row below). Given a recompute
policy (`micro_batch_bounds(..., rc=)`), the bound is over the layouts with that policy and adds its recomputed
compute per layer (compute.recompute_time_s, the faster of SP on or off): exact.py bounds rows with it.

Row bound before evaluation (`dp_bound_s`): once a row's ZeRO stage, sharding group and mesh order are known,
its exposed DP/FSDP time has a lower bound from the one DP formula (comm.dp_time_s) for a rank with 1/pp of the
parameters (the busiest holds at least as many), overlap windows without limit, the smallest first-bucket
share and its groups at their capacity-only cost (each only lowers the exposure; what cannot hide, such as
PyTorch's step reduction after a pipeline's last backward, stays). With unbounded windows a rank's exposure is
linear in its parameters and in its FSDP units (layers + 1, each paying the group's latency once), so the
busiest rank's is at least the mean rank's: 1/pp of the parameters and L / pp + 1 units. Added to the row's
(shape, micro-batch) bound, which leaves DP out, it lets exact.py skip rows before evaluating them; so does a
row whose model states alone (`state_memory_bound_bytes`: its ZeRO stage and sharding group, 1/pp of the
parameters) exceed the GPU. Both are known before the row's schedule and mesh order are: `dp_option_bound_s`,
the least of `dp_bound_s` over every order the row can have and over zero-bubble schedules or not, bounds a
(shape, micro-batch, ZeRO option) from below, so exact.py skips such options before building their rows.

Row bound (`optimistic_bw`): the table evaluated with DP and PP collectives at a capacity-only cost that is
never slower than the topology's (`Topology.axis_collective_bound`), everything else exact.

tests/unit/test_search_bounds.py checks every bound against every layout it covers (brute force), and
tests/unit/test_search_oracle.py that the search with them returns the brute-force optimum.
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from planner.cost import comm, compute, fixed_costs, interference
from planner.cost.comm import AxisBandwidth
from planner.cost.context import CostContext
from planner.cost.dp_groups import GroupCoeffCache, distinct_axis_groups, dp_group_coeffs, replicate_coeffs
from planner.cost.memory import model_state_bytes, reserve_bytes
from planner.cost.partition import StageSplit, balanced_split
from planner.layout.expert_groups import state_shard_ranks
from planner.layout.numeric import distinct_rows, sorted_unique
from planner.layout.schedules import SCHEDULES, by_code
from planner.layout.table import SEARCHED_ORDERS, axis_strides
from planner.solver.space import Pins, SearchLimits

SAFETY = 1.0 - 1e-9  # bounds are scaled down by this so float rounding never prunes the optimum


def _fastest_flops(ctx: CostContext) -> float:
    """FLOP/s no kernel of the cost model exceeds: peak x the higher of the GEMM plateau and attention's."""
    attention = float(getattr(ctx, "attention_efficiency", 0.0) or 0.0)
    return ctx.peak_flops * max(ctx.max_fraction, attention)


def shape_bounds(ctx: CostContext, tp, cp, pp, dp, ep) -> tuple[np.ndarray, np.ndarray]:
    """(step-time, memory) lower bounds of every shape over all its knobs (see the module docstring)."""
    W = (tp * cp * pp * dp).astype(float)
    flops_per_token, _ = ctx.model.training_flops_per_token(ctx.workload.seq_len, "none", causal=ctx.flash_attention)
    step_flops = float(flops_per_token) * ctx.workload.tokens_per_step
    time_lb = SAFETY * step_flops / (W * _fastest_flops(ctx))
    dense = sum(lt.dense_params * lt.count for lt in ctx.layer_types) + ctx.embedding_params + ctx.head_params
    expert = sum(lt.expert_params * lt.count for lt in ctx.layer_types)
    per_param = ctx.weight_bytes + ctx.grad_bytes + ctx.optimizer_bytes
    shard = state_shard_ranks(dp, cp)  # every state sharded over all of DP x CP
    mem_lb = (dense / (tp * pp * shard) + expert / (tp * pp * ep * shard)) * per_param + reserve_bytes(ctx)
    return time_lb, mem_lb


def _tp_allreduce_coeffs(bw: AxisBandwidth, tp: np.ndarray, world: np.ndarray, pins: Pins):
    """TP all-reduce (a, b) columns as `cost.evaluate` reads them: the innermost axis (stride 1) in every
    searched order. A pinned order with tp elsewhere gets (0, 0), which keeps the bound valid."""
    order = pins.get("mesh_axes")
    if order is not None and tuple(order)[-1] != "tp":
        zero = np.zeros(len(tp))
        return zero, zero
    return _tiling_groups_exact(bw, "all_reduce", tp, np.ones_like(tp), world)


def _tiling_groups_exact(bw: AxisBandwidth, kind: str, size: np.ndarray, stride: np.ndarray, world: np.ndarray):
    """(a, b) columns for a bound: the topology's own for groups whose pattern tiles the cluster, capacity-only
    ones (never slower, `Topology.axis_collective_bound`; the layer bound grows with both) for the rest.

    A pattern that leaves GPUs idle (tp = 3 on 1,024 GPUs) is costed over the ranks in use, one ring routing per
    distinct count: hundreds on a cluster whose size shares few divisors with the batch, which the first search
    would pay for shapes with idle GPUs it rarely visits; their rows are still evaluated exactly."""
    tiles = bw.num_gpus % (size * stride) == 0
    if tiles.all():
        return bw.columns(kind, size, stride, world)
    a, b = AxisBandwidth(_bound_topology(bw.topology)).columns(kind, size, stride, world)
    if tiles.any():
        a, b = a.copy(), b.copy()
        a[tiles], b[tiles] = bw.columns(kind, size[tiles], stride[tiles], world[tiles])
    return a, b


def _cp_allgather_coeffs(bw: AxisBandwidth, tp: np.ndarray, cp: np.ndarray, world: np.ndarray, pins: Pins):
    """CP all-gather (a, b) columns as `cost.evaluate` reads them: the axis just outside TP (stride tp) in every
    searched order. A pinned order with another axis between cp and tp gets (0, 0), which keeps the bound valid."""
    order = tuple(pins.get("mesh_axes") or SEARCHED_ORDERS[0])
    if order[order.index("cp") + 1:] != ("tp",):
        zero = np.zeros(len(tp))
        return zero, zero
    return _tiling_groups_exact(bw, "all_gather", cp, tp, world)


def _layer_bounds(ctx: CostContext, bw: AxisBandwidth, pins: Pins, mb, tp, cp, ep, world, cp_world, rc):
    """Per row: (layer time u, layer zero-bubble unit u - 2 u_w, embedding end e0, head end el, head end's
    zero-bubble unit el - 2 x its weight-gradient GEMM) lower bounds per micro-batch; `rc` the recompute policy
    (code) of the rows, whose extra forward compute is added."""
    tokens = (mb * ctx.workload.seq_len / cp).astype(float)
    counts = ctx.layer_type_counts().astype(float)
    u, ug = np.zeros(len(tp)), np.zeros(len(tp))
    tp_f = np.where(tp > 1, comm.tp_layer_fwd_s(ctx, _tp_allreduce_coeffs(bw, tp, world, pins), tokens), 0.0)
    cp_f = np.where(cp > 1, comm.cp_layer_fwd_s(ctx, _cp_allgather_coeffs(bw, tp, cp, cp_world, pins), tokens, tp, cp),
                    0.0)
    on = np.ones(len(tp), dtype=bool)
    for wk, lt in zip(counts / counts.sum(), ctx.layer_types):
        both = [compute.layer_time_s(ctx, lt, tokens, tp, cp, ep, np.full(len(tp), sp)) for sp in (True, False)]
        # TP traffic of the forward and backward passes, as exposed as the workload's TP overlap leaves it with
        # sequence parallelism (never more exposed than without it).
        # The backward's exposure is the least over SP on and off (comm.tp_backward_exposed_s: Megatron's
        # asynchronous column-parallel collectives can leave less exposed without SP).
        gemm = both[0].wgrad_s
        tp_exposed = comm.tp_exposed_s(ctx, tp_f, gemm, on, tp) + np.minimum(*(
            comm.tp_backward_exposed_s(ctx, tp_f, t.wgrad_s, t.column_wgrad_s, np.full(len(tp), sp), tp)
            for t, sp in zip(both, (True, False))))
        # CP exchange beside the attention core of each pass (layer_costs.layer_costs), the least over SP.
        cp_exposed = np.minimum(*(comm.cp_exposed_s(ctx, cp_f, t.attn_fwd_s)
                                  + comm.cp_exposed_s(ctx, cp_f, t.bwd_s / np.maximum(t.fwd_s, 1e-30) * t.attn_fwd_s)
                                  for t in both))
        rec = np.minimum(*(compute.recompute_time_s(rc, t) for t in both))
        u += wk * (np.minimum(*(t.fwd_s + t.bwd_s for t in both)) + rec + tp_exposed + cp_exposed)
        ug += wk * (np.minimum(*(t.fwd_s + t.bwd_s - 2 * t.wgrad_s for t in both)) + rec + tp_exposed + cp_exposed)
    e0 = compute.embedding_time_s(ctx, tokens, tp)
    el = compute.head_time_s(ctx, tokens, tp)
    return u, ug, e0, el, el - 2 * compute.head_weight_grad_time_s(ctx, tokens, tp)


def _p2p_transfer_bound_s(ctx: CostContext, pins: Pins, mb, tp, cp, pp, dp) -> np.ndarray:
    """Per row, a lower bound of one stage-boundary transfer (comm.pp_p2p_s): the capacity-only p2p cost of the
    pipeline groups, the least over the orders the search can build (the pinned one, else the searched ones).
    A pinned order that puts one data axis inside pp (stride unknown here) gets no link cost."""
    orders = [tuple(pins.get("mesh_axes"))] if pins.get("mesh_axes") is not None else list(SEARCHED_ORDERS)
    sizes = {"tp": tp, "cp": cp, "dp": dp}
    view = AxisBandwidth(_bound_topology(ctx.topology))
    tokens = (mb * ctx.workload.seq_len / cp).astype(float)
    sp = tp > 1  # the message is split by TP whenever tp > 1 (scatter/gather), as with SP
    world = tp * cp * pp * dp
    best = np.full(len(tp), np.inf)
    for order in orders:
        inside = set(order[order.index("pp") + 1:])
        if len(inside & {"dp_replicate", "dp_shard"}) == 1:
            coeffs = (np.zeros(len(tp)), np.zeros(len(tp)))
        else:
            stride = np.ones_like(tp)
            for axis in ("tp", "cp"):
                stride = stride * np.where(axis in inside, sizes[axis], 1)
            stride = stride * np.where("dp_shard" in inside, dp, 1)
            coeffs = view.columns("p2p", pp, stride, world)
        best = np.minimum(best, comm.pp_p2p_s(ctx, coeffs, tokens, tp, sp))
    return best


def micro_batch_bounds(
    ctx: CostContext, bw: AxisBandwidth, pins: Pins, tp, cp, pp, dp, ep, mb, limits: SearchLimits | None = None,
    rc: np.ndarray | None = None,
) -> np.ndarray:
    """Step-time lower bound of every (shape, micro_batch) row over the remaining knobs (module docstring);
    `limits` bounds the virtual stages tried (default `SearchLimits()`). With `rc` (a recompute policy code per
    row) the bound is over the layouts with that policy only: it adds the least recomputation time."""
    limits = limits or SearchLimits()
    rc = np.zeros(len(tp), dtype=np.int64) if rc is None else np.asarray(rc, dtype=np.int64)
    m = (ctx.workload.batch // (dp * mb)).astype(float)
    # A layer's bound depends on (micro-batch, tp, cp, ep) and, through the TP all-reduce, on the ranks in use
    # where tp does not tile the cluster (AxisBandwidth.columns): computed once per distinct combination (a
    # few hundred among ~10^5 rows on large clusters), element-wise as for every row, then gathered.
    tp_world = np.where(bw.num_gpus % tp == 0, bw.num_gpus, tp * cp * pp * dp)
    cp_world = np.where(bw.num_gpus % (tp * cp) == 0, bw.num_gpus, tp * cp * pp * dp)
    first, inverse = distinct_rows(mb, tp, cp, ep, tp_world, cp_world, rc)
    u, ug, e0, el, elg = (x[inverse] for x in _layer_bounds(ctx, bw, pins, *(c[first] for c in (mb, tp, cp, ep, tp_world,
                                                                                            cp_world, rc))))
    L = ctx.model.num_layers
    # The best split depends on pp and those three times only: once per distinct (combination, pp).
    at, again = distinct_rows(inverse + 1, pp)
    part = balanced_split(L, pp[at], u[at], e0[at], el[at])
    split = StageSplit(*(x[again] for x in (part.n_first, part.n_mid, part.n_last, part.mid_trimmed)))
    single = pp == 1
    t_sum = L * u + e0 + el
    g_sum = L * ug + e0 + elg
    t_max = np.maximum.reduce([split.n_first * u + e0, np.where(pp > 2, split.n_mid * u, 0.0), split.n_last * u + el])
    t_max = np.where(single, t_sum, t_max)
    # Each schedule's makespan at the lower bounds (g_max := t_max, see the module docstring) plus its exposed
    # stage-boundary transfers; the least over the schedules and virtual stages the pins allow (pipelines only).
    pipe = np.full(len(tp), np.inf)
    on = np.nonzero(~single)[0]
    if len(on):
        pipe[on] = _pipeline_bound_s(ctx, pins, limits, m[on], pp[on], t_max[on], t_sum[on], g_sum[on],
                                     _p2p_transfer_bound_s(ctx, pins, mb[on], tp[on], cp[on], pp[on], dp[on]))
    pipe = np.where(single, m * t_max, pipe)  # one rank: every schedule is the same loop, no transfers
    # A rank holds at least 1/pp of the parameters; ZeRO over all of DP (x CP where the runtime shards over it) is
    # the least any stage updates locally.
    params = (L * mean_layer_params(ctx, tp, ep) + (ctx.embedding_params + ctx.head_params) / tp) / pp
    opt = fixed_costs.optimizer_step_s(ctx, params, np.ones_like(tp), dp, cp=cp)
    return SAFETY * (pipe + opt)


def _pipeline_bound_s(ctx: CostContext, pins: Pins, limits: SearchLimits, m, pp, t_max, t_sum, g_sum,
                      transfer) -> np.ndarray:
    """Per pipelined row, the least over the allowed schedules of makespan + exposed transfers (module docstring).

    Every registry makespan is a / v + b v + c in the virtual stages v (interleaving divides the bubble, the
    transfers grow linearly with v), so over an unpinned range of v the least is at the integer next to
    sqrt(a / b): two evaluations instead of one per v."""
    n = len(pp)
    endless = np.full(n, np.inf)  # no overlap window bounds the hidden part from above

    def value(s, v: np.ndarray) -> np.ndarray:
        return (s.makespan_formula(m, v, t_max, t_sum, t_max, g_sum)
                + comm.pp_exposed_s(ctx, transfer, m, v, pp, np.full(n, s.code), endless))

    best = np.full(n, np.inf)
    top = max(limits.max_virtual_stages, 2)
    for s in SCHEDULES.values():
        if not pins.allow("schedule", s.name):
            continue
        allowed = (m >= pp) | (not s.needs_microbatches_per_rank)
        if not s.virtual_stages:
            candidates = [np.ones(n)]
        elif "virtual_stages" in pins.values:
            candidates = [np.full(n, v) for v in range(2, top + 1) if pins.allow("virtual_stages", v)]
        else:
            one, two = value(s, np.ones(n)), value(s, np.full(n, 2.0))
            slope = (two - one) - (t_sum - t_max) * (0.5 - 1.0)  # b: the linear part (the transfers)
            curve = t_sum - t_max  # a: the bubble divided by v
            ideal = np.sqrt(np.where(slope > 0, curve / np.where(slope > 0, slope, 1.0), np.inf))
            low = np.clip(np.floor(ideal), 2, top)
            candidates = [low, np.clip(low + 1, 2, top)]
        for v in candidates:
            best = np.where(allowed, np.minimum(best, value(s, v)), best)
    return best


def dp_bound_s(ctx: CostContext, table: dict[str, np.ndarray]) -> np.ndarray:
    """Per row of a search table, a lower bound of its exposed DP/FSDP time (module docstring): the one DP
    formula, `cost.comm.dp_time_s`, for the mean pipeline rank (1/pp of the parameters, L / pp + 1 FSDP units;
    the busiest rank's exposure is at least that) with unbounded overlap windows, the smallest first-bucket
    share (1/num_layers) and the row's own groups at their capacity-only cost; each only lowers the exposure."""
    return _dp_bound_s(ctx, table, by_code(table["sched"], lambda s: s.splits_backward).astype(bool))


def dp_option_bound_s(ctx: CostContext, options: dict[str, np.ndarray], orders: list[int]) -> np.ndarray:
    """Per (shape, micro-batch, ZeRO option) -- `options` holds every search-table column but the schedule and
    the mesh order -- a lower bound of `dp_bound_s` over every row it expands to: the least over the mesh
    orders `orders` (codes of `MESH_ORDERS`, a superset of those its rows get) and over zero-bubble schedules
    or not. Each candidate is that row's own `dp_bound_s`, element for element, so the least is never above it."""
    n, ways = len(options["tp"]), 2 * len(orders)  # every (order, zero-bubble) at once, in one call
    table = {k: np.tile(v, ways) for k, v in options.items()}
    table["order"] = np.repeat(np.asarray(orders, dtype=np.int64), 2 * n)
    zero_bubble = np.tile(np.repeat([False, True], n), len(orders))
    return _dp_bound_s(ctx, table, zero_bubble).reshape(ways, n).min(axis=0, initial=np.inf)


def _dp_bound_s(ctx: CostContext, table: dict[str, np.ndarray], zero_bubble: np.ndarray) -> np.ndarray:
    """`dp_bound_s` with the schedule's only part in it, whether it splits the backward pass, given per row."""
    tp, pp, cp, ep = (table[k] for k in ("tp", "pp", "cp", "ep"))
    zero, shard = table["zero"], table["dp_shard"]
    view = AxisBandwidth(_bound_topology(ctx.topology))

    # The groups of `cost.dp_groups` over the capacity-only view. `dp_time_s` pays a group's latency once per
    # unit, layers + 1 of them; it is called with all L layers (for the smallest first-bucket share), so the
    # latencies are scaled to the mean rank's L / pp + 1 units (module docstring).
    layers = max(ctx.model.num_layers, 1)
    per_unit = (ctx.model.num_layers / pp + 1.0) / (layers + 1.0)
    coeffs = _bound_group_coeffs(view, table)
    rs, ag, hsdp, ddp = ((coeffs[:, 2 * i] * per_unit, coeffs[:, 2 * i + 1]) for i in range(4))
    ar = replicate_coeffs(hsdp, ddp, zero)
    params = (ctx.model.num_layers * mean_layer_params(ctx, tp, ep) + (ctx.embedding_params + ctx.head_params) / tp) / pp
    endless = np.full(len(tp), np.inf)
    shapes, shape_of_row = distinct_axis_groups(table)
    slowdown = interference.data_group_slowdown(ctx, shapes)[shape_of_row]
    exposed = comm.dp_time_s(ctx, params, zero, table["m"], rs, ag, ar, state_shard_ranks(shard, cp), endless, endless,
                             np.full(len(tp), layers), pp, zero_bubble, slowdown)
    return SAFETY * exposed


def _bound_group_coeffs(view: AxisBandwidth, table: dict[str, np.ndarray]) -> np.ndarray:
    """Per row, `dp_group_coeffs` over the capacity-only view as 8 columns (a, b of the reduce-scatter,
    all-gather, HSDP and DDP all-reduces). The view's bandwidth store lives as long as the topology
    (`_bound_topology`), so `dp_group_coeffs` costs each distinct group once across calls and searches."""
    if not len(table["tp"]):
        return np.zeros((0, 8))
    world = table["tp"] * table["cp"] * table["pp"] * table["dp"]
    return np.column_stack([c for pair in dp_group_coeffs(view, table, world) for c in pair])


def state_memory_bound_bytes(ctx: CostContext, table: dict[str, np.ndarray]) -> np.ndarray:
    """Per row of a search table, a lower bound of its peak memory per GPU: the model states (at the row's ZeRO
    stage and sharding group, `memory.model_state_bytes`) of a rank holding 1/pp of the parameters, every one
    sharded like the dense ones (routed experts shard over no more ranks), plus the reserve."""
    tp, pp, ep = table["tp"], table["pp"], table["ep"]
    params = (ctx.model.num_layers * mean_layer_params(ctx, tp, ep) + (ctx.embedding_params + ctx.head_params) / tp) / pp
    return sum(model_state_bytes(ctx, params, table["zero"], table["dp_shard"], pp, cp=table["cp"])) + reserve_bytes(ctx)


def mean_layer_params(ctx: CostContext, tp: np.ndarray, ep: np.ndarray) -> np.ndarray:
    """Parameters of the mean decoder layer on one GPU (as `cost.evaluate` holds them: experts split by tp x ep)."""
    counts = ctx.layer_type_counts().astype(float)
    w = counts / counts.sum()
    dense = sum(wk * lt.dense_params for wk, lt in zip(w, ctx.layer_types))
    expert = sum(wk * lt.expert_params for wk, lt in zip(w, ctx.layer_types))
    return dense / tp + expert / (tp * ep)


class _OptimisticTopology:
    """The topology as the first evaluation pass sees it: exact answers for the groups whose cost enters a
    layer's time (TP, CP, and EP's all-to-all), so the pipeline part is exact; capacity-only estimates that
    are never slower (`Topology.axis_collective_bound`) for the DP and PP groups; measured collectives
    (cost.measured_comm) apply in both passes alike. The step time is monotone in the DP and PP
    coefficients (every DP/PP term of cost.evaluate is), so the pass gives a lower bound.

    With no exact groups it answers every ring and p2p query from capacities (`_bound_topology`);
    `_OptimisticBandwidth` mixes its coefficients with the real topology's per row."""

    def __init__(self, topology, exact: set[tuple[int, int]]) -> None:
        self.topology, self.exact, self.num_gpus = topology, exact, topology.num_gpus
        # Capacity-only answers depend on the group's size and stride alone, not on the ranks in use
        # (planner.topology.optimistic), so `AxisBandwidth` asks once per pattern.
        self.answers_ignore_world = not exact
        # `_OptimisticBandwidth.group_coeffs`, per set of exact pairs
        self.optimistic_groups: dict[bytes, GroupCoeffCache] = {}

    def __getattr__(self, name: str):  # everything else (cluster, mesh_groups, ...) is the real topology's
        return getattr(self.topology, name)

    def axis_collective(self, kind: str, mesh_shape: tuple[int, ...], axis: int):
        n, stride = int(mesh_shape[axis]), math.prod(mesh_shape[axis + 1:])
        if kind == "all_to_all" or (n, stride) in self.exact:
            return self.topology.axis_collective(kind, mesh_shape, axis)
        return self.topology.axis_collective_bound(kind, mesh_shape, axis)


_BOUND_TOPOLOGIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _bound_topology(topology) -> _OptimisticTopology:
    """The capacity-only view of `topology`, one per topology so its coefficient cache lives as long."""
    view = _BOUND_TOPOLOGIES.get(topology)
    if view is None:
        view = _BOUND_TOPOLOGIES[topology] = _OptimisticTopology(topology, set())
    return view


class _OptimisticBandwidth:
    """`AxisBandwidth.columns` of `_OptimisticTopology(topology, exact)`, row by row from two shared caches:
    the real topology's for all-to-all and for the rows whose (size, stride) is exact, the capacity-only
    view's for the others (the same numbers that view's own queries give, asked once per topology)."""

    def __init__(self, topology, exact_pairs: np.ndarray) -> None:
        self.exact, self.bound = AxisBandwidth(topology), AxisBandwidth(_bound_topology(topology))
        self.exact_pairs = exact_pairs  # sorted packed (size << 21) | stride
        self.num_gpus = self.exact.num_gpus
        # `cost.dp_groups`' coefficients: they depend on which pairs are exact, so one dict per set of them, kept
        # on the per-topology view for later searches
        groups = _bound_topology(topology).optimistic_groups
        self.group_coeffs = groups.setdefault(exact_pairs.tobytes(), GroupCoeffCache())

    def columns(self, kind: str, size, stride, world) -> tuple[np.ndarray, np.ndarray]:
        if kind == "all_to_all":
            return self.exact.columns(kind, size, stride, world)
        if not len(self.exact_pairs):
            return self.bound.columns(kind, size, stride, world)
        pair = (np.asarray(size, dtype=np.int64) << 21) | stride
        pos = np.minimum(np.searchsorted(self.exact_pairs, pair), len(self.exact_pairs) - 1)
        use = self.exact_pairs[pos] == pair
        if use.all() or not use.any():
            return (self.exact if use.all() else self.bound).columns(kind, size, stride, world)
        a, b = np.empty(len(use)), np.empty(len(use))
        for sel, bw in ((use, self.exact), (~use, self.bound)):
            a[sel], b[sel] = bw.columns(kind, size[sel], stride[sel], world[sel])
        return a, b


def optimistic_bw(topology, table: dict[str, np.ndarray], cache: dict | None = None) -> _OptimisticBandwidth:
    """Coefficients for the optimistic first pass over `table` (see `_OptimisticTopology`): exact for the
    (size, stride) of its TP and CP groups. `cache` keeps one object per set of exact groups across calls
    (the coefficients themselves are cached per topology either way)."""
    pairs = sorted_unique(np.concatenate([(table[axis].astype(np.int64) << 21) | axis_strides(table, axis)
                                      for axis in ("tp", "cp")]))
    if cache is None:
        return _OptimisticBandwidth(topology, pairs)
    key = pairs.tobytes()
    if key not in cache:
        cache[key] = _OptimisticBandwidth(topology, pairs)
    return cache[key]
