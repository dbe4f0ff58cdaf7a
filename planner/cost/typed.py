"""Rank-by-rank costs of one layout by layer TYPE, each pipeline rank on its own GPU kind.

`cost.evaluate` prices every decoder layer at the mean over layer types, on the cluster's slowest GPU: exact
for uniform models on one GPU kind, which is what the search needs. A partition over layer types (DeepSeek-V3:
3 dense + 58 MoE layers) or over ranks that run on different GPUs (A100 and H100 hosts in one pipeline)
needs each (rank, type) priced on its own:

- A pipeline rank's GPUs are the mesh's ranks with that pp coordinate (in the layout's axis order); TP, CP and
  DP inside the stage are synchronous, so the stage runs on its slowest GPU (least peak FLOP/s at the compute
  dtype) and fits in its smallest memory.
- Per (GPU kind, layer type) the per-micro-batch layer times come from `evaluate.layer_costs` on a context
  that holds only that GPU and that layer type; communication coefficients come from the topology as usual.
- Step time and memory are assembled with the same formulas as `evaluate_table`'s explicit (rank_layers)
  path, with sum_k n[r, k] * x[r, k] in place of n[r] * x for every per-layer quantity x; with one layer type
  on one GPU kind the two are equal (tests/unit/test_partition_cpsat.py checks it). FSDP buffers hold two
  layers of the largest type (the mean layer in `evaluate_table`); the host-sharing bound of CPU processes
  (`cost.host_share`) gets the mean compute of the layers as placed.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from planner.cost import comm, host_share, memory
from planner.cost.context import CostContext
from planner.cost.evaluate import COLUMNS, MESH_ORDERS, TableResult, expert_shard, layer_costs


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
    sizes = {"pp": row["pp"], "dp_replicate": row["dp"] // row["dp_shard"], "dp_shard": row["dp_shard"],
             "cp": row["cp"], "tp": row["tp"]}
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
    layer_comp_s: np.ndarray  # (p, K) compute part, then TP, CP, EP parts
    layer_tp_s: np.ndarray
    layer_cp_s: np.ndarray
    layer_ep_s: np.ndarray
    extra_s: np.ndarray  # (p,) embedding (rank 0) and head (last rank), forward + backward
    extra_fwd_s: np.ndarray  # (p,) their forward part
    layer_params: np.ndarray  # (K,) parameters of one layer of each type on one GPU
    layer_expert_params: np.ndarray  # (K,) the routed experts among them (their states shard differently)
    expert_shard: np.ndarray  # (1,) ranks ZeRO shards expert states over (evaluate.expert_shard)
    extra_params: np.ndarray  # (p,) embedding on rank 0, final norm + head on the last
    layer_memory_bytes: np.ndarray  # (p, K) model states of one layer + its activations x in-flight micro-batches
    fixed_memory_bytes: np.ndarray  # (p,) embedding/head states, logits, FSDP buffers, reserve
    capacity_bytes: np.ndarray  # (p,)
    contexts: list[CostContext]  # per rank: the context on that rank's GPU
    base: Any  # LayerCosts of the whole model (coefficients, tokens)

    @property
    def pp(self) -> int:
        return len(self.gpu_names)


def rank_costs(ctx: CostContext, row: dict[str, int], bw: comm.AxisBandwidth) -> RankCosts:
    """Price every (pipeline rank, layer type) of the layout `row` (see the module docstring)."""
    table = {k: np.array([row[k]], dtype=np.int64) for k in COLUMNS}
    gpus = stage_gpus(ctx, row)
    by_name = {g.name: g for g in gpus}
    per_gpu = {name: [layer_costs(context_on(ctx, g, lt), table, bw) for lt in ctx.layer_types]
               for name, g in by_name.items()}
    ctxs = {name: context_on(ctx, g) for name, g in by_name.items()}
    p, K = row["pp"], len(ctx.layer_types)
    tp, ep, zero, shard = row["tp"], row["ep"], table["zero"], table["dp_shard"]

    def grid(attr: str) -> np.ndarray:
        return np.array([[float(getattr(lc, attr)[0]) for lc in per_gpu[g.name]] for g in gpus]).reshape(p, K)

    first = np.arange(p) == 0
    last = np.arange(p) == p - 1
    lc0 = [per_gpu[g.name][0] for g in gpus]  # embedding/head costs do not depend on the layer type
    extra_s = np.array([float(first[r] * lc0[r].e_first[0] + last[r] * lc0[r].e_last[0]) for r in range(p)])
    extra_fwd = np.array([float(first[r] * lc0[r].emb_f[0] + last[r] * lc0[r].head_f[0]) for r in range(p)])
    layer_experts = np.array([lt.expert_params / (tp * ep) for lt in ctx.layer_types])
    layer_params = np.array([lt.dense_params / tp for lt in ctx.layer_types]) + layer_experts
    eshard = expert_shard(table)
    extra_params = first * ctx.embedding_params / tp + last * ctx.head_params / tp
    rank_ctx = [ctxs[g.name] for g in gpus]
    sched, v, m, mb, cp, rc = (table[k] for k in ("sched", "v", "m", "mb", "cp", "rc"))
    sp = table["sp"].astype(bool)
    layer_mem = np.zeros((p, K))
    fixed = np.zeros(p)
    cap = np.zeros(p)
    for r, c in enumerate(rank_ctx):
        infl = float(memory.inflight_microbatches(sched, np.array([r]), table["pp"], v, m)[0])
        act = float(memory.activation_bytes_per_layer(c, mb, table["tp"], cp, sp, rc)[0])
        states = np.array([sum(x[0] for x in memory.model_state_bytes(c, np.array([lp]), zero, shard, table["pp"],
                                                                      np.array([le]), eshard))
                           for lp, le in zip(layer_params, layer_experts, strict=True)])
        layer_mem[r] = states + act * infl
        extra_states = sum(float(x[0]) for x in memory.model_state_bytes(c, np.array([extra_params[r]]), zero, shard,
                                                                         table["pp"]))
        logits = float(memory.logits_bytes(c, mb, table["tp"], cp)[0]) if last[r] else 0.0
        buf = float(memory.fsdp_buffer_bytes(c, np.array([layer_params.max()]), zero, table["pp"])[0])
        fixed[r] = extra_states + logits + buf + memory.reserve_bytes(c)
        cap[r] = c.memory_capacity_bytes
    return RankCosts(
        row=dict(row), gpu_names=[g.name for g in gpus], layer_s=grid("u"), layer_fwd_s=grid("u_fwd"),
        layer_comp_s=grid("u_comp"), layer_tp_s=grid("u_tp"), layer_cp_s=grid("u_cp"), layer_ep_s=grid("u_ep"),
        extra_s=extra_s, extra_fwd_s=extra_fwd, layer_params=layer_params, layer_expert_params=layer_experts,
        expert_shard=eshard, extra_params=extra_params,
        layer_memory_bytes=layer_mem, fixed_memory_bytes=fixed, capacity_bytes=cap, contexts=rank_ctx,
        base=layer_costs(ctx, table, bw),
    )


def evaluate_partition(ctx: CostContext, costs: RankCosts, counts: np.ndarray) -> TableResult:
    """Step time, breakdown and per-rank memory of the partition with `counts[r, k]` type-k layers on rank r
    (the formulas of `evaluate_table`'s explicit path, per type and per rank GPU; one-row arrays)."""
    row, lc = costs.row, costs.base
    n = np.asarray(counts, dtype=float)
    p = costs.pp
    one = lambda x: np.array([float(x)])  # noqa: E731
    m, v, zero, shard, sched = (np.array([row[k]]) for k in ("m", "v", "zero", "dp_shard", "sched"))
    mf = float(row["m"])
    t = (n * costs.layer_s).sum(axis=1) + costs.extra_s
    f = (n * costs.layer_fwd_s).sum(axis=1) + costs.extra_fwd_s
    t_max, t_sum, f_max, f_sum = t.max(), t.sum(), f.max(), f.sum()
    if p == 1:
        pipe = mf * t_max
    elif row["sched"] == 2:
        pipe = mf * t_max + (t_sum - t_max) / row["v"]
    elif row["sched"] == 3:
        pipe = mf * t_max + (f_sum - f_max)
    else:
        pipe = t_sum + (mf - 1) * t_max
    sp = np.array([bool(row["sp"])])
    p2p = 0.0 if p == 1 else float(2 * (mf * row["v"] + p - 1) * comm.pp_p2p_s(ctx, lc.pp_p2p, lc.tokens, np.array([row["tp"]]), sp)[0])
    params = (n * costs.layer_params).sum(axis=1) + costs.extra_params
    layers = n.sum(axis=1)
    fwd_window = (n * costs.layer_fwd_s).sum(axis=1)
    bwd_window = (n * (costs.layer_s - costs.layer_fwd_s)).sum(axis=1)
    dp_t = max(float(comm.dp_time_s(ctx, one(params[r]), zero, m, lc.rs_shard, lc.ag_shard, lc.ar_rep, shard,
                                    one(fwd_window[r]), one(bwd_window[r]), one(layers[r]), one(p))[0])
               for r in range(p))
    opt = max(float(comm.optimizer_step_s(c, one(params[r]), zero, shard)[0]) for r, c in enumerate(costs.contexts))
    bn = int(t.argmax())
    # CPU processes sharing a host's cores (cost.host_share), with the mean compute of the layers as placed.
    table = {k: np.array([row[k]]) for k in COLUMNS}
    mean_comp = (n * costs.layer_comp_s).sum() / max(n.sum(), 1.0)
    first_s, last_s = (costs.extra_s[0], costs.extra_s[-1]) if p > 1 else (costs.extra_s[0], 0.0)
    exposed = mf * (n[bn] * (costs.layer_tp_s[bn] + costs.layer_cp_s[bn] + costs.layer_ep_s[bn])).sum() + p2p + dp_t
    step, shared = host_share.apply(ctx, table, one(pipe + p2p + dp_t + opt), np.array([mf]), one(mean_comp),
                                    one(first_s), one(last_s), one(params.sum()), one(exposed))
    rank_memory = _rank_memory(costs, n, params)
    total = rank_memory["total"][0]
    return TableResult(
        step_time_s=step,
        compute_s=one(mf * ((n[bn] * costs.layer_comp_s[bn]).sum() + costs.extra_s[bn])) + shared,
        tp_comm_s=one(mf * (n[bn] * costs.layer_tp_s[bn]).sum()),
        cp_comm_s=one(mf * (n[bn] * costs.layer_cp_s[bn]).sum()),
        ep_comm_s=one(mf * (n[bn] * costs.layer_ep_s[bn]).sum()),
        pp_comm_s=one(p2p), dp_comm_s=one(dp_t), bubble_s=one(pipe - mf * t_max), optimizer_s=one(opt),
        peak_memory_bytes=one(total.max()), fits=np.array([bool((total <= costs.capacity_bytes).all())]), split=None,
        rank_memory=rank_memory,
    )


def _rank_memory(costs: RankCosts, n: np.ndarray, params: np.ndarray) -> dict[str, np.ndarray]:
    """Per-rank memory components (1 x p arrays, as `TableResult.rank_memory`), summed as `evaluate_table` does."""
    row, p = costs.row, costs.pp
    table = {k: np.array([row[k]]) for k in COLUMNS}
    sp = table["sp"].astype(bool)
    names = ("weights", "gradients", "optimizer", "activations", "logits", "buffers", "reserve")
    out = {k: np.zeros((1, p)) for k in names}
    experts = (n * costs.layer_expert_params).sum(axis=1)
    for r, c in enumerate(costs.contexts):
        states = memory.model_state_bytes(c, np.array([params[r]]), table["zero"], table["dp_shard"], table["pp"],
                                          np.array([experts[r]]), costs.expert_shard)
        out["weights"][0, r], out["gradients"][0, r], out["optimizer"][0, r] = (float(x[0]) for x in states)
        infl = float(memory.inflight_microbatches(table["sched"], np.array([r]), table["pp"], table["v"], table["m"])[0])
        act = float(memory.activation_bytes_per_layer(c, table["mb"], table["tp"], table["cp"], sp, table["rc"])[0])
        out["activations"][0, r] = act * n[r].sum() * infl
        out["logits"][0, r] = float(memory.logits_bytes(c, table["mb"], table["tp"], table["cp"])[0]) if r == p - 1 else 0.0
        out["buffers"][0, r] = float(memory.fsdp_buffer_bytes(c, np.array([costs.layer_params.max()]), table["zero"],
                                                              table["pp"])[0])
        out["reserve"][0, r] = memory.reserve_bytes(c)
    out["total"] = sum(out[k] for k in names)
    return out
