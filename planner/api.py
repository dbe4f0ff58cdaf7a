"""The Python API: `search`, `evaluate`, and the helpers that turn table rows into `Plan`s.

    import hardware_profiles, planner
    from planner.model import preset
    plans = planner.search(preset("llama3-70b"), hardware_profiles.cluster("dgx-h100", nodes=8),
                           planner.Workload(global_batch=512, seq_len=8192), top=5, tp=8)
    plans[0].layout, plans[0].prediction.step_time_s
"""

from __future__ import annotations

from typing import Any

import numpy as np

from planner.cost.comm import AxisBandwidth
from planner.cost.context import CostContext
from planner.cost.evaluate import COLUMNS, MESH_ORDERS, RECOMPUTE, SCHEDULES, evaluate_table
from planner.cost.partition import chunk_partition
from planner.errors import InfeasibleError, UserError
from planner.layout import Layout
from planner.model import ModelSpec
from planner.plan import (
    Breakdown,
    Plan,
    PlanInputs,
    Prediction,
    RankPlacement,
    StageMemory,
    peak_flops_of_ranks,
)
from planner.plan_checks import check_against_model
from planner.solver.exact import SearchResult, exact_search
from planner.solver.rank_costs import needs_typed_costing
from planner.solver.refine import Refinement, refine
from planner.solver.space import PIN_FIELDS, SET_PIN_FIELDS, Pins, SearchLimits
from planner.workload import Workload

GiB = 2**30


_TOPOLOGIES: dict[str, Any] = {}


def _cached_topology(cluster: Any):
    """Topology of a cluster, built once per cluster fingerprint (large clusters take a moment to build)."""
    from planner.topology import Topology

    key = cluster.fingerprint() if hasattr(cluster, "fingerprint") else str(id(cluster))
    topo = _TOPOLOGIES.get(key)
    if topo is None:
        if len(_TOPOLOGIES) >= 8:
            _TOPOLOGIES.pop(next(iter(_TOPOLOGIES)))
        topo = _TOPOLOGIES[key] = Topology(cluster)
    return topo


def make_context(model: ModelSpec, cluster: Any, workload: Workload, **options: Any) -> CostContext:
    """The cost context; a `flash_attention` option is folded into the workload so plans record it, and a
    `framework` option (`planner.frameworks`) sets the workload's runtime costs to that framework's, checks
    the model and workload against it, and makes the search keep only layouts it can build."""
    from planner.frameworks import framework, workload_for

    profile = framework(options.pop("framework", None))
    workload = workload_for(profile, workload)
    problems = profile.model_problems(model, workload)
    if problems:
        raise UserError(problems[0], where=f"--framework {profile.name}",
                        fix="plan for another framework (--framework) or change the model / workload")
    options["framework"] = profile.name
    if options.get("flash_attention") is not None:
        workload = workload.model_copy(update={"flash_attention": bool(options.pop("flash_attention"))})
    options.pop("flash_attention", None)
    if workload.seq_len > model.max_seq_len:
        raise UserError(
            f"seq_len={workload.seq_len} exceeds the model's max_seq_len={model.max_seq_len}",
            where="workload.seq_len",
            fix=f"use --seq-len <= {model.max_seq_len}",
        )
    topo = _cached_topology(cluster)
    return CostContext(model=model, cluster=cluster, workload=workload, topology=topo, **options)


def layout_to_row(layout: Layout) -> dict[str, np.ndarray]:
    """One-row table (see cost.evaluate.COLUMNS) for a Layout."""
    values = {
        "dp": layout.dp, "tp": layout.tp, "pp": layout.pp, "cp": layout.cp, "ep": layout.ep,
        "mb": layout.micro_batch, "m": layout.num_microbatches, "sched": SCHEDULES.index(layout.schedule),
        "v": layout.virtual_stages, "zero": layout.zero, "dp_shard": layout.dp_shard,
        "rc": RECOMPUTE.index(layout.recompute), "sp": int(layout.sequence_parallel),
        "order": MESH_ORDERS.index(tuple(layout.mesh_axes)),
    }
    return {k: np.array([values[k]], dtype=np.int64) for k in COLUMNS}


def row_to_layout(row: dict[str, int], partition: tuple[int, ...] | None) -> Layout:
    return Layout(
        dp=row["dp"], tp=row["tp"], pp=row["pp"], cp=row["cp"], ep=row["ep"], micro_batch=row["mb"],
        num_microbatches=row["m"], schedule=SCHEDULES[row["sched"]], virtual_stages=row["v"], zero=row["zero"],
        dp_shard=row["dp_shard"], recompute=RECOMPUTE[row["rc"]], sequence_parallel=bool(row["sp"]),
        mesh_axes=MESH_ORDERS[row["order"]], layer_partition=partition,
    )


def _rank_layers_from_partition(layout: Layout, num_layers: int) -> list[int]:
    parts = layout.partition(num_layers)
    per_rank = [0] * layout.pp
    for c, n in enumerate(parts):
        per_rank[c % layout.pp] += n
    return per_rank


def _placement(ctx: CostContext, world: int) -> tuple[RankPlacement, ...]:
    topo = ctx.topology
    return tuple(RankPlacement(rank=r, host=int(topo.host_of(r)), gpu=int(topo.local_index(r))) for r in range(world))


def _cluster_json(cluster: Any) -> dict[str, Any]:
    return cluster.model_dump(mode="json") if hasattr(cluster, "model_dump") else dict(cluster)


def build_plan(ctx: CostContext, row: dict[str, int], rank_layers: list[int], *, proven: bool, notes: tuple[str, ...] = (),
               chunks: tuple[int, ...] | None = None, refined: Refinement | None = None) -> Plan:
    """Cost one layout rank by rank and wrap it with its inputs, placement and per-stage memory.

    Models with several layer types and clusters with several GPU kinds are costed by type and by each rank's
    own GPU (`solver.refine`), with the layers per chunk `chunks` (default: `rank_layers` split evenly within
    each rank) or an already computed refinement; otherwise with `evaluate_table`'s rank-by-rank path.
    """
    pp = row["pp"]
    if chunks is None and pp > 1:
        chunks = refined.chunks if refined is not None else chunk_partition(rank_layers, row["v"])
    if refined is None and needs_typed_costing(ctx):
        refined = refine(ctx, row, rank_layers, chunks=chunks)
    if refined is not None:
        res, capacity = refined.result, [float(c) for c in refined.costs.capacity_bytes]
    else:
        table = {k: np.array([row[k]], dtype=np.int64) for k in COLUMNS}
        res = evaluate_table(ctx, table, AxisBandwidth(ctx.topology), rank_layers=np.array([rank_layers]))
        capacity = [ctx.memory_capacity_bytes] * pp
    layout = row_to_layout(row, chunks if pp > 1 else None)
    W = layout.world_size
    step = float(res.step_time_s[0])
    tokens = ctx.workload.tokens_per_step
    model_flops = ctx.model_flops_per_token * tokens
    _, hw_per_token = ctx.model.training_flops_per_token(ctx.workload.seq_len, layout.recompute, causal=False)
    mem = res.rank_memory
    assert mem is not None
    stages = tuple(
        StageMemory(
            stage=r, weights_bytes=float(mem["weights"][0, r]), gradients_bytes=float(mem["gradients"][0, r]),
            optimizer_bytes=float(mem["optimizer"][0, r]), activations_bytes=float(mem["activations"][0, r]),
            logits_bytes=float(mem["logits"][0, r]), buffers_bytes=float(mem["buffers"][0, r]),
            reserve_bytes=float(mem["reserve"][0, r]), total_bytes=float(mem["total"][0, r]),
            capacity_bytes=capacity[r],
        )
        for r in range(layout.pp)
    )
    breakdown = Breakdown(
        compute_s=float(res.compute_s[0]), tp_comm_s=float(res.tp_comm_s[0]), cp_comm_s=float(res.cp_comm_s[0]),
        ep_comm_s=float(res.ep_comm_s[0]), pp_comm_s=float(res.pp_comm_s[0]), dp_comm_s=float(res.dp_comm_s[0]),
        bubble_s=float(res.bubble_s[0]), optimizer_s=float(res.optimizer_s[0]),
    )
    cluster_json, placement = _cluster_json(ctx.cluster), _placement(ctx, W)
    prediction = Prediction(
        step_time_s=step,
        tokens_per_s=tokens / step,
        mfu=model_flops / step / peak_flops_of_ranks(cluster_json, placement, ctx.compute_dtype),
        model_tflops_per_gpu=model_flops / step / W / 1e12,
        hardware_tflops_per_gpu=float(hw_per_token) * tokens / step / W / 1e12,
        peak_memory_bytes=float(res.peak_memory_bytes[0]),
        memory_per_stage=stages,
        breakdown=breakdown,
        bubble_fraction=float(res.bubble_s[0]) / step,
        idle_gpus=int(ctx.cluster.num_gpus) - W,
    )
    inputs = PlanInputs(model=ctx.model, cluster=cluster_json, workload=ctx.workload)
    from planner.frameworks import framework

    notes = (*notes, *framework(ctx.framework).notes(layout, ctx.model, ctx.workload))
    if layout.pp > 1 and layout.zero >= 2:
        notes = (*notes, f"ZeRO-{layout.zero} with pipeline parallelism holds weights and gradients like ZeRO-1: the "
                 "pipeline schedule keeps gradients (and ZeRO-3's gathered weights) unsharded until the step's one "
                 "gradient reduction, so only the optimizer state is sharded; costed that way")
    return Plan(inputs=inputs, layout=layout, placement=placement, prediction=prediction,
                proven_optimal=proven, notes=notes, framework=ctx.framework)


MAX_PIN_VALUE = 2**31 - 1


def _split_pins(pins: dict[str, Any]) -> tuple[Pins, SearchLimits, dict[str, Any]]:
    limit_names = {"max_tp", "max_cp", "max_micro_batch", "max_virtual_stages"}
    context_names = {"flash_attention", "dropout", "framework"}
    layout_pins = {k: v for k, v in pins.items() if v is not None and k not in limit_names | context_names}
    unknown = set(layout_pins) - set(PIN_FIELDS)
    if unknown:
        raise UserError(f"unknown option(s) {sorted(unknown)}", fix=f"pin one of {', '.join(PIN_FIELDS)}")
    for name, value in layout_pins.items():
        # Degrees and sizes beyond any cluster would overflow the vectorised int64 search columns.
        if isinstance(value, int) and not isinstance(value, bool) and value > MAX_PIN_VALUE:
            raise UserError(f"{value} is larger than any layout can be", where="--" + name.replace("_", "-"),
                            fix=f"pin at most {MAX_PIN_VALUE:,} (the GPU count bounds every degree)")
    limits = SearchLimits(**{k: v for k, v in pins.items() if k in limit_names and v is not None})
    options = {k: v for k, v in pins.items() if k in context_names and v is not None}
    if "mesh_axes" in layout_pins:
        layout_pins["mesh_axes"] = tuple(layout_pins["mesh_axes"])
    for name in SET_PIN_FIELDS:  # a list or set of allowed values (what a framework implements)
        if isinstance(layout_pins.get(name), (list, set, frozenset)):
            layout_pins[name] = tuple(sorted(layout_pins[name], key=str))
    return Pins(layout_pins), limits, options


def search_result(model: ModelSpec, cluster: Any, workload: Workload, top: int = 1, keep_all: bool = False,
                  **pins: Any) -> tuple[CostContext, SearchResult]:
    """Run the exact search; returns the context and the raw result (rows, stats)."""
    from planner.frameworks import framework
    from planner.frameworks.search import check_pins

    check_pins(framework(pins.get("framework")), pins)
    layout_pins, limits, options = _split_pins(pins)
    ctx = make_context(model, cluster, workload, **options)
    return ctx, exact_search(ctx, layout_pins, limits, top=top, keep_all=keep_all)


def infeasible_message(ctx: CostContext, result: SearchResult, pins: dict[str, Any]) -> str:
    from planner.infeasible import memory_fixes, nothing_fits

    why = nothing_fits(ctx, result)
    per_param = ctx.weight_bytes + ctx.grad_bytes + ctx.optimizer_bytes
    states = ctx.model.num_params() * per_param
    cap = ctx.memory_capacity_bytes
    n = int(ctx.cluster.num_gpus)
    if why.kind == "states":
        return (
            f"{ctx.model.name} fits nowhere on {n} x {ctx.gpu.name}: its model states alone "
            f"({states / GiB:,.0f} GiB at {per_param} B/parameter) need {states / n / GiB:.1f} GiB per GPU even fully "
            f"sharded, over the {cap / GiB:.1f} GiB capacity; fix: at least {int(-(-states // (cap * 0.9)))} GPUs (--nodes/--gpus) "
            "or a larger-memory GPU"
        )
    if why.kind == "pins":
        what = ", ".join(f"{k}={v}" for k, v in pins.items() if v is not None) or "no pins"
        return (f"{ctx.model.name} does not fit on {n} x {ctx.gpu.name} with {what}: every allowed shape leaves more "
                f"model state per GPU than its {cap / GiB:.1f} GiB; fix: relax the pins (more tp/pp/dp) or add GPUs")
    if why.kind == "batch":
        from planner.frameworks import framework
        from planner.pin_conflicts import pin_conflict

        layout_pins, limits, _ = _split_pins(pins)
        culprit = pin_conflict(ctx, layout_pins, limits)
        if culprit is not None:
            return f"no valid layout for {ctx.model.name} on {ctx.cluster.num_gpus} GPUs: {culprit}"
        profile = framework(ctx.framework)
        rules = ", ".join(r.name for r in profile.rules)
        what = ", ".join(f"{k}={v}" for k, v in pins.items() if v is not None and k != "framework") or "no pins"
        return (f"no valid layout for {ctx.model.name} on {ctx.cluster.num_gpus} GPUs with global batch "
                f"{ctx.workload.batch} ({what}) that {profile.label()} can build (its rules: {rules or 'none'}); fix: "
                "relax the pins, change --global-batch to a multiple of the DP degrees, or plan for another --framework")
    assert result.best_infeasible is not None
    row, peak = result.best_infeasible
    layout = row_to_layout(row, None)
    return (
        f"{ctx.model.name} fits nowhere on {ctx.cluster.num_gpus} x {ctx.gpu.name}: the least-memory layout "
        f"({layout.describe()}) needs {peak / GiB:.1f} GiB per GPU, {(peak - cap) / GiB:.1f} GiB over the "
        f"{cap / GiB:.1f} GiB capacity; fix: {memory_fixes(layout, pins)}"
    )


def search(model: ModelSpec, cluster: Any, workload: Workload, top: int = 1, **pins: Any) -> list[Plan]:
    """The `top` best plans, best first; pins use Layout field names (`tp=8, pp=4, recompute="selective"`).

    `schedule`, `recompute` and `zero` also take a tuple of allowed values, to search only what a framework
    implements (`schedule=("1f1b", "interleaved"), recompute=("none", "full")`). `framework="torchtitan"`
    (any of `planner.frameworks.NAMES`; default meshplan's own executor) plans for that framework: only
    layouts it can build, costed with its runtime; the plans record it."""
    ctx, result = search_result(model, cluster, workload, top=top, **pins)
    return plans_from_result(ctx, result, pins)


def plans_from_result(ctx: CostContext, result: SearchResult, pins: dict[str, Any] | None = None) -> list[Plan]:
    """Turn a search's best rows into Plans (rank-by-rank costing, per-stage memory, placement)."""
    pins = pins or {}
    cluster = ctx.cluster
    n = len(result.step_time_s)
    if n == 0:
        raise InfeasibleError(infeasible_message(ctx, result, pins))
    plans = []
    typed = needs_typed_costing(ctx)
    for i in range(n):
        row = {k: int(v[i]) for k, v in result.table.items()}
        rank_layers = _mean_rank_layers(ctx, row)
        notes: tuple[str, ...] = ()
        used = row["dp"] * row["tp"] * row["pp"] * row["cp"]
        if i == 0 and int(cluster.num_gpus) > used:
            notes = (f"{int(cluster.num_gpus) - used} GPUs left idle: no layout using all of them is faster",)
        refined = refine(ctx, row, rank_layers) if typed else None  # CP-SAT partition by layer type and GPU
        if refined is not None:
            rank_layers, notes = refined.rank_layers, notes + refined.notes
        plans.append(build_plan(ctx, row, rank_layers, proven=result.stats.proven_optimal, notes=notes, refined=refined))
    if typed:  # the refined costing may reorder the search's ranking (made with the mean-layer split)
        plans.sort(key=lambda plan: plan.prediction.step_time_s)
    return plans


def _mean_rank_layers(ctx: CostContext, row: dict[str, int]) -> list[int]:
    """The optimal split of the compact evaluation (mean layer, slowest GPU), as layers per pipeline rank."""
    table = {k: np.array([row[k]], dtype=np.int64) for k in COLUMNS}
    res = evaluate_table(ctx, table, AxisBandwidth(ctx.topology))
    assert res.split is not None
    return res.split.counts(0, row["pp"])


def best_rank_layers(ctx: CostContext, row: dict[str, int]) -> list[int]:
    """Layers per pipeline rank of the best partition: the CP-SAT split by layer type and per-rank GPU when
    the model has several layer types or the cluster several GPU kinds, else the exact mean-layer split."""
    mean = _mean_rank_layers(ctx, row)
    return refine(ctx, row, mean).rank_layers if needs_typed_costing(ctx) and row["pp"] > 1 else mean


def evaluate(model: ModelSpec, cluster: Any, workload: Workload, layout: Layout, *, allow_oom: bool = False,
             **options: Any) -> Plan:
    """The prediction for exactly this layout; raises UserError if it is invalid, if the framework (option
    `framework`, default meshplan's executor) cannot build it, or (unless allow_oom) if it does not fit."""
    check_against_model(layout, model, workload, int(cluster.num_gpus))
    ctx = make_context(model, cluster, workload, **options)
    from planner.frameworks import framework

    breaches = framework(ctx.framework).breaches(layout, model, ctx.workload)
    if breaches:
        raise UserError(f"{framework(ctx.framework).label()} cannot run {layout.describe()}: " + "; ".join(map(str, breaches)))
    row = {k: int(v[0]) for k, v in layout_to_row(layout).items()}
    refined = None
    if layout.layer_partition is not None or layout.pp == 1:
        rank_layers = _rank_layers_from_partition(layout, model.num_layers)
    elif needs_typed_costing(ctx):
        refined = refine(ctx, row, _mean_rank_layers(ctx, row))
        rank_layers = refined.rank_layers
    else:
        rank_layers = _mean_rank_layers(ctx, row)
    plan = build_plan(ctx, row, rank_layers, proven=False, chunks=layout.layer_partition, refined=refined,
                      notes=refined.notes if refined else ())
    if not allow_oom:
        over = [s for s in plan.prediction.memory_per_stage if not s.fits]
        if over:
            worst = max(over, key=lambda s: s.total_bytes - s.capacity_bytes)
            raise InfeasibleError(
                f"layout {layout.describe()} does not fit: pipeline stage {worst.stage} needs "
                f"{worst.total_bytes / GiB:.1f} GiB, {(worst.total_bytes - worst.capacity_bytes) / GiB:.1f} GiB over "
                f"the {worst.capacity_bytes / GiB:.1f} GiB GPU (activations {worst.activations_bytes / GiB:.1f} GiB, "
                f"optimizer {worst.optimizer_bytes / GiB:.1f} GiB); fix: --recompute full, a higher --zero, a smaller "
                "--micro-batch, or more pp/tp"
            )
    return plan
