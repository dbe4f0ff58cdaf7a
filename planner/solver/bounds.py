"""Lower bounds on the step time and memory of a shape, and of a shape at one micro-batch size, over every
other knob: what lets the branch and bound in `exact.py` skip most of the space and stay exact.

Shape bound (tp, cp, pp, dp, ep), vectorised over all shapes, nothing but FLOPs and parameter counts:
  time   the busiest GPU does at least 1/W of the step's model FLOPs (no recompute) at the fastest rate any
         kernel reaches (the GEMM plateau or the fused attention kernel's efficiency, whichever is higher);
  memory its model states with everything sharded (ZeRO-3 over all of DP) plus the reserve.

Micro-batch bound (shape, micro_batch), the pipeline's own makespan: with m micro-batches and per-micro-batch
rank times t_r, every schedule of the registry (planner.layout.schedules) takes at least m * max_r t_r (GPipe
and 1F1B add sum_r t_r - max_r t_r, interleaved (sum - max) / v, ZB-H1 sum_r f_r - max_r f_r, all >= 0), and
with m < pp only the schedules that need no micro-batch per rank are valid (GPipe, sum_r t_r + (m - 1) max_r t_r). A rank's time is at least its
layers' forward + backward compute (no recomputation, the faster of SP on or off) plus the TP all-reduces
that nothing hides (two forward volumes per layer and micro-batch, comm.tp_layer_fwd_s; with TP overlap the
part comm.tp_exposed_s leaves with SP, the least any layout can expose), plus the embedding
on rank 0 and the head on the last. max_r t_r is at least the exact min-max split of those lower per-layer
times (`partition.balanced_split`; the min-max makespan only grows with the layer and end times). Left out
(each >= 0): CP and EP exposure, recomputation, PP transfers, DP/FSDP exposure, the optimizer step.

Row bound (`optimistic_bw`): the table evaluated with DP and PP collectives at a capacity-only cost that is
never slower than the topology's (`Topology.axis_collective_bound`), everything else exact.

tests/unit/test_search_bounds.py checks every bound against every layout it covers (brute force), and
tests/unit/test_search_oracle.py that the search with them returns the brute-force optimum.
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from planner.cost import comm, compute
from planner.cost.comm import AxisBandwidth
from planner.cost.context import CostContext
from planner.cost.memory import reserve_bytes
from planner.cost.partition import StageSplit, balanced_split
from planner.layout.schedules import SCHEDULES
from planner.layout.table import axis_strides
from planner.solver.space import Pins

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
    mem_lb = (dense / (tp * pp * dp) + expert / (tp * pp * ep * dp)) * per_param + reserve_bytes(ctx)
    return time_lb, mem_lb


def _tp_allreduce_coeffs(bw: AxisBandwidth, tp: np.ndarray, world: np.ndarray, pins: Pins):
    """TP all-reduce (a, b) columns as `cost.evaluate` reads them: the innermost axis (stride 1) in every
    searched order. A pinned order with tp elsewhere gets (0, 0), which keeps the bound valid."""
    order = pins.get("mesh_axes")
    if order is not None and tuple(order)[-1] != "tp":
        zero = np.zeros(len(tp))
        return zero, zero
    return bw.columns("all_reduce", tp, np.ones_like(tp), world)


def _distinct_rows(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of each distinct row's first occurrence, each row's distinct-row number) of positive int columns."""
    key = np.zeros(len(cols[0]), dtype=np.int64)
    span = 1
    for col in cols:
        radix = int(col.max()) + 1 if len(col) else 1
        if span * radix >= 2**62:  # too many combinations to pack into one int64: compare whole rows
            _, first, inverse = np.unique(np.stack(cols), axis=1, return_index=True, return_inverse=True)
            return first, inverse.reshape(-1)
        key, span = key * radix + col, span * radix
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse


def _layer_bounds(ctx: CostContext, bw: AxisBandwidth, pins: Pins, mb, tp, cp, ep, world):
    """Per row: (layer time u, embedding end e0, head end el) lower bounds per micro-batch."""
    tokens = (mb * ctx.workload.seq_len / cp).astype(float)
    counts = ctx.layer_type_counts().astype(float)
    u = np.zeros(len(tp))
    tp_f = np.where(tp > 1, comm.tp_layer_fwd_s(ctx, _tp_allreduce_coeffs(bw, tp, world, pins), tokens), 0.0)
    on = np.ones(len(tp), dtype=bool)
    for wk, lt in zip(counts / counts.sum(), ctx.layer_types):
        both = [compute.layer_time_s(ctx, lt, tokens, tp, cp, ep, np.full(len(tp), sp)) for sp in (True, False)]
        u += wk * np.minimum(*(t.fwd_s + t.bwd_s for t in both))
        # TP traffic of the forward and backward passes, as exposed as the workload's TP overlap leaves it with
        # sequence parallelism (never more exposed than without it).
        gemm = both[0].wgrad_s
        u += wk * (comm.tp_exposed_s(ctx, tp_f, gemm, on, tp) + comm.tp_exposed_s(ctx, tp_f, 2 * gemm, on, tp))
    e0 = compute.embedding_time_s(ctx, tokens, tp)
    el = compute.head_time_s(ctx, tokens, tp)
    return u, e0, el


def micro_batch_bounds(
    ctx: CostContext, bw: AxisBandwidth, pins: Pins, tp, cp, pp, dp, ep, mb
) -> np.ndarray:
    """Step-time lower bound of every (shape, micro_batch) row over the remaining knobs (module docstring)."""
    m = (ctx.workload.batch // (dp * mb)).astype(float)
    # A layer's bound depends on (micro-batch, tp, cp, ep) and, through the TP all-reduce, on the ranks in use
    # where tp does not tile the cluster (AxisBandwidth.columns): computed once per distinct combination (a
    # few hundred among ~10^5 rows on large clusters), element-wise as for every row, then gathered.
    tp_world = np.where(bw.num_gpus % tp == 0, bw.num_gpus, tp * cp * pp * dp)
    first, inverse = _distinct_rows(mb, tp, cp, ep, tp_world)
    u, e0, el = (x[inverse] for x in _layer_bounds(ctx, bw, pins, *(c[first] for c in (mb, tp, cp, ep, tp_world))))
    L = ctx.model.num_layers
    # The best split depends on pp and those three times only: once per distinct (combination, pp).
    at, again = _distinct_rows(inverse + 1, pp)
    part = balanced_split(L, pp[at], u[at], e0[at], el[at])
    split = StageSplit(*(x[again] for x in (part.n_first, part.n_mid, part.n_last, part.mid_trimmed)))
    single = pp == 1
    t_sum = L * u + e0 + el
    t_max = np.maximum.reduce([split.n_first * u + e0, np.where(pp > 2, split.n_mid * u, 0.0), split.n_last * u + el])
    t_max = np.where(single, t_sum, t_max)
    # Every schedule's makespan is m * t_max plus a bubble >= 0 (planner.layout.schedules); with m < pp only
    # the schedules that need no micro-batch per rank are valid, and their least makespan (forward bubble 0,
    # a lower bound) is the bound there.
    few = ~single & (m < pp)
    pipe = m * t_max
    if few.any():
        fewest = np.min([s.makespan_formula(m, 1, t_max, t_sum, 0.0, 0.0) for s in SCHEDULES.values()
                         if not s.needs_microbatches_per_rank], axis=0)
        pipe = np.where(few, fewest, pipe)
    return SAFETY * pipe


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
    pairs = np.unique(np.concatenate([(table[axis].astype(np.int64) << 21) | axis_strides(table, axis)
                                      for axis in ("tp", "cp")]))
    if cache is None:
        return _OptimisticBandwidth(topology, pairs)
    key = pairs.tobytes()
    if key not in cache:
        cache[key] = _OptimisticBandwidth(topology, pairs)
    return cache[key]
