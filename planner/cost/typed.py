"""Rank-by-rank costs of one layout by layer TYPE, each pipeline rank on its own GPU kind.

`cost.evaluate` prices every decoder layer at the mean over layer types, on the cluster's slowest GPU: exact
for uniform models on one GPU kind, which is what the search needs. A partition over layer types (DeepSeek-V3:
3 dense + 58 MoE layers) or over ranks that run on different GPUs (A100 and H100 hosts in one pipeline)
needs each (rank, type) priced on its own:

- A pipeline rank's GPUs are the mesh's ranks with that pp coordinate (in the layout's axis order); TP, CP and
  DP inside the stage are synchronous, so the stage runs on its slowest GPU (least peak FLOP/s at the compute
  dtype) and fits in its smallest memory.
- Per (GPU kind, layer type) the per-micro-batch layer times come from `layer_costs.layer_costs` on a context
  that holds only that GPU and that layer type; communication coefficients come from the topology as usual.
- Step time and memory are assembled by the one assembler (`cost.assemble`), with sum_k n[r, k] * x[r, k]
  in place of n[r] * x for every per-layer quantity x; with one layer type on one GPU kind this equals the
  rank-by-rank costing of `evaluate_table` (tests/unit/test_partition_cpsat.py checks it). FSDP buffers hold
  two layers of the largest type (the mean layer in `evaluate_table`); each rank's optimizer step runs at its
  GPU's memory bandwidth.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from planner.cost import comm, memory
from planner.cost.assemble import MEMORY_PARTS, RankWork, TableResult, assemble, rank_memory
from planner.cost.context import CostContext
from planner.cost.layer_costs import expert_shard, layer_costs
from planner.layout.table import MESH_ORDERS, axis_sizes, table_of


def needs_typed_costing(ctx: CostContext) -> bool:
    """More than one layer type, or more than one GPU kind in the cluster."""
    return len(ctx.layer_types) > 1 or len(set(ctx.cluster.host_gpu_names)) > 1


def context_on(ctx: CostContext, gpu: Any, layer_type: Any | None = None) -> CostContext:
    """A copy of `ctx` whose hardware is `gpu` alone (and whose layers are all `layer_type`, if given)."""
    new = copy.copy(ctx)
    for name, attr in vars(type(ctx)).items():
        if isinstance(attr, cached_property):
            new.__dict__.pop(name, None)  # derived hardware facts are recomputed from the new GPU
    new.__dict__["gpu_profiles"] = [gpu]
    if layer_type is not None:
        new.layer_types = [layer_type]
    return new


def stage_gpus(ctx: CostContext, row: dict[str, int]) -> list[Any]:
    """GPU profile each pipeline rank runs at: the slowest GPU among the stage's ranks."""
    sizes = axis_sizes(row)
    order = MESH_ORDERS[row["order"]]
    ranks = np.arange(int(np.prod([sizes[a] for a in order]))).reshape([sizes[a] for a in order])
    by_stage = np.moveaxis(ranks, order.index("pp"), 0).reshape(row["pp"], -1)
    names = np.asarray(ctx.cluster.host_gpu_names)[by_stage // int(ctx.cluster.gpus_per_node)]
    dtype = ctx.compute_dtype
    out = []
    for stage in names:
        gpus = [ctx.cluster.gpus[n] for n in sorted(set(stage.tolist()))]
        out.append(min(gpus, key=lambda g: (g.peak_flops.get(dtype, 0.0), g.memory_bytes)))
    return out


@dataclass
class RankCosts:
    """Per pipeline rank r (p of them) and layer type k (K of them) costs of one layout; times per micro-batch."""

    row: dict[str, int]
    gpu_names: list[str]
    layer_s: np.ndarray  # (p, K) one layer: forward + backward + recompute + exposed in-layer communication
    layer_fwd_s: np.ndarray  # (p, K) its forward part
    layer_w_s: np.ndarray  # (p, K) its weight-gradient GEMMs (the W pass of zero-bubble schedules)
    layer_comp_s: np.ndarray  # (p, K) compute part, then TP, CP, EP parts
    layer_tp_s: np.ndarray
    layer_cp_s: np.ndarray
    layer_ep_s: np.ndarray
    extra_s: np.ndarray  # (p,) embedding (rank 0) and head (last rank), forward + backward
    extra_fwd_s: np.ndarray  # (p,) their forward part
    extra_w_s: np.ndarray  # (p,) their weight-gradient GEMMs in the W pass (the head's, on the last rank)
    layer_params: np.ndarray  # (K,) parameters of one layer of each type on one GPU
    layer_expert_params: np.ndarray  # (K,) the routed experts among them (their states shard differently)
    expert_shard: np.ndarray  # (1,) ranks ZeRO shards expert states over (layer_costs.expert_shard)
    extra_params: np.ndarray  # (p,) embedding on rank 0, final norm + head on the last
    layer_memory_bytes: np.ndarray  # (p, K) model states of one layer + its activations x in-flight micro-batches
    fixed_memory_bytes: np.ndarray  # (p,) embedding/head states, logits, FSDP buffers, reserve
    capacity_bytes: np.ndarray  # (p,)
    contexts: list[CostContext]  # per rank: the context on that rank's GPU
    base: Any  # LayerCosts of the whole model (coefficients, tokens)

    @property
    def pp(self) -> int:
        return len(self.gpu_names)

    @property
    def layer_bubble_s(self) -> np.ndarray:
        """(p, K) T_F + T_B - T_W of one layer: the zero-bubble schedules' bubble unit (planner.layout.schedules)."""
        return self.layer_s - 2 * self.layer_w_s

    @property
    def extra_bubble_s(self) -> np.ndarray:
        """(p,) T_F + T_B - T_W of the embedding / head on the end ranks."""
        return self.extra_s - 2 * self.extra_w_s


def rank_costs(ctx: CostContext, row: dict[str, int], bw: comm.AxisBandwidth) -> RankCosts:
    """Price every (pipeline rank, layer type) of the layout `row` (see the module docstring)."""
    table = table_of(row)
    gpus = stage_gpus(ctx, row)
    by_name = {g.name: g for g in gpus}
    per_gpu = {name: [layer_costs(context_on(ctx, g, lt), table, bw) for lt in ctx.layer_types]
               for name, g in by_name.items()}
    ctxs = {name: context_on(ctx, g) for name, g in by_name.items()}
    p, K = row["pp"], len(ctx.layer_types)
    tp, ep, zero = row["tp"], row["ep"], table["zero"]

    def grid(attr: str) -> np.ndarray:
        return np.array([[float(getattr(lc, attr)[0]) for lc in per_gpu[g.name]] for g in gpus]).reshape(p, K)

    first = np.arange(p) == 0
    last = np.arange(p) == p - 1
    lc0 = [per_gpu[g.name][0] for g in gpus]  # embedding/head costs do not depend on the layer type
    extra_s = np.array([float(first[r] * lc0[r].e_first[0] + last[r] * lc0[r].e_last[0]) for r in range(p)])
    extra_fwd = np.array([float(first[r] * lc0[r].emb_f[0] + last[r] * lc0[r].head_f[0]) for r in range(p)])
    extra_w = np.array([float(last[r] * lc0[r].head_w[0]) for r in range(p)])
    layer_experts = np.array([lt.expert_params / (tp * ep) for lt in ctx.layer_types])
    layer_params = np.array([lt.dense_params / tp for lt in ctx.layer_types]) + layer_experts
    eshard = expert_shard(table)
    extra_params = first * ctx.embedding_params / tp + last * ctx.head_params / tp
    rank_ctx = [ctxs[g.name] for g in gpus]
    sp = table["sp"].astype(bool)
    layer_mem = np.zeros((p, K))
    fixed = np.zeros(p)
    cap = np.zeros(p)
    for r, c in enumerate(rank_ctx):
        # Memory is linear in the layers a rank holds (`assemble.rank_memory`): its value with no layer and
        # the embedding/head, and what one layer of each type adds, are the CP-SAT model's coefficients.
        act = memory.activation_bytes_per_layer(c, table["mb"], table["tp"], table["cp"], sp, table["rc"])
        buf = memory.fsdp_buffer_bytes(c, np.array([layer_params.max()]), zero, table["pp"])

        def total(params: float, layers: float, experts: float, _c=c, _r=r, _act=act, _buf=buf) -> float:
            return float(rank_memory(_c, table, np.array([[params]]), np.array([[layers]]), np.array([[_r]]),
                                     _act.reshape(1, 1), np.array([[last[_r]]]), _buf.reshape(1, 1),
                                     np.array([[experts]]), eshard.reshape(1, 1))["total"][0, 0])

        empty = total(0.0, 0.0, 0.0)
        fixed[r] = total(float(extra_params[r]), 0.0, 0.0)
        layer_mem[r] = [total(float(lp), 1.0, float(le)) - empty for lp, le in zip(layer_params, layer_experts)]
        cap[r] = c.memory_capacity_bytes
    return RankCosts(
        row=dict(row), gpu_names=[g.name for g in gpus], layer_s=grid("u"), layer_fwd_s=grid("u_fwd"), layer_w_s=grid("u_w"),
        layer_comp_s=grid("u_comp"), layer_tp_s=grid("u_tp"), layer_cp_s=grid("u_cp"), layer_ep_s=grid("u_ep"),
        extra_s=extra_s, extra_fwd_s=extra_fwd, extra_w_s=extra_w, layer_params=layer_params, layer_expert_params=layer_experts,
        expert_shard=eshard, extra_params=extra_params,
        layer_memory_bytes=layer_mem, fixed_memory_bytes=fixed, capacity_bytes=cap, contexts=rank_ctx,
        base=layer_costs(ctx, table, bw),
    )


def evaluate_partition(ctx: CostContext, costs: RankCosts, counts: np.ndarray) -> TableResult:
    """Step time, breakdown and per-rank memory of the partition with `counts[r, k]` type-k layers on rank r,
    each type priced on each rank's GPU, by the one assembler (one-row arrays)."""
    table = table_of(costs.row)
    n = np.asarray(counts, dtype=float)
    p = costs.pp

    def per_rank(x: np.ndarray) -> np.ndarray:  # sum over layer types, as a 1 x p row
        return (n * x).sum(axis=1).reshape(1, p)

    params = per_rank(np.broadcast_to(costs.layer_params, n.shape)) + costs.extra_params.reshape(1, p)
    layers = n.sum(axis=1).reshape(1, p)
    work = RankWork(
        total_s=per_rank(costs.layer_s) + costs.extra_s.reshape(1, p),
        forward_s=per_rank(costs.layer_fwd_s) + costs.extra_fwd_s.reshape(1, p),
        weight_grad_s=per_rank(costs.layer_w_s) + costs.extra_w_s.reshape(1, p),
        compute_s=per_rank(costs.layer_comp_s) + costs.extra_s.reshape(1, p),
        tp_s=per_rank(costs.layer_tp_s), cp_s=per_rank(costs.layer_cp_s), ep_s=per_rank(costs.layer_ep_s),
        params=params, layers=layers, fwd_window_s=per_rank(costs.layer_fwd_s),
        bwd_window_s=per_rank(costs.layer_s - costs.layer_fwd_s),
        memory=_rank_memory(costs, table, params, layers, n), capacity_bytes=costs.capacity_bytes.reshape(1, p),
        weight=np.ones((1, p)), optimizer_contexts=costs.contexts,
    )
    return assemble(ctx, table, work, costs.base, per_rank_memory=True)


def _rank_memory(costs: RankCosts, table: dict[str, np.ndarray], params: np.ndarray, layers: np.ndarray,
                 n: np.ndarray) -> dict[str, np.ndarray]:
    """Per-rank memory components (1 x p arrays), each rank on its own GPU's context (`assemble.rank_memory`)."""
    p = costs.pp
    sp = table["sp"].astype(bool)
    parts = []
    eshard = expert_shard(table)
    experts = (n * costs.layer_expert_params).sum(axis=1)
    for r, c in enumerate(costs.contexts):
        act = memory.activation_bytes_per_layer(c, table["mb"], table["tp"], table["cp"], sp, table["rc"])
        buf = memory.fsdp_buffer_bytes(c, np.array([costs.layer_params.max()]), table["zero"], table["pp"])
        parts.append(rank_memory(c, table, params[:, r:r + 1], layers[:, r:r + 1], np.array([[r]]),
                                 act.reshape(1, 1), np.array([[r == p - 1]]), buf.reshape(1, 1),
                                 np.array([[experts[r]]]), eshard.reshape(1, 1)))
    return {k: np.hstack([x[k] for x in parts]) for k in (*MEMORY_PARTS, "total")}


def counts_of(layer_types: tuple[int, ...], chunks: tuple[int, ...], pp: int, num_types: int) -> np.ndarray:
    """(pp, K) layers of each type per rank for per-chunk layer counts (chunk c on rank c % pp)."""
    out = np.zeros((pp, num_types), dtype=np.int64)
    start = 0
    for c, size in enumerate(chunks):
        for k in layer_types[start:start + size]:
            out[c % pp, k] += 1
        start += size
    return out
