"""The Python API: `search`, `evaluate`, and the helpers that turn table rows into `Plan`s.

    import hardware_profiles, planner
    from planner.model import preset
    plans = planner.search(preset("llama3-70b"), hardware_profiles.cluster("dgx-h100", nodes=8),
                           planner.Workload(global_batch=512, seq_len=8192), top=5, tp=8)
    plans[0].layout, plans[0].prediction.step_time_s
"""

from __future__ import annotations

from typing import Any

from planner.cost import context as cost_context
from planner.cost.comm import AxisBandwidth
from planner.cost.context import CostContext
from planner.cost.evaluate import evaluate_table
from planner.cost.layout_cost import cost_layout, rank_layers_of
from planner.cost.partition import chunk_partition
from planner.cost.typed import needs_typed_costing
from planner.errors import InfeasibleError, UserError
from planner.frameworks import framework, workload_for
from planner.layout import Layout, Workload, choices, rules
from planner.layout.layout import row_to_layout
from planner.layout.names import DEFAULT_FRAMEWORK, MAX_SIZE
from planner.layout.table import layout_to_row, row_at, table_of
from planner.model import ModelSpec
from planner.plan import (
    Breakdown,
    ErrorBand,
    Plan,
    PlanInputs,
    Prediction,
    RankPlacement,
    StageMemory,
    peak_flops_of_hosts,
    placement_of,
)
from planner.solver.exact import OBJECTIVES, SearchResult, exact_search
from planner.solver.refine import Refinement, refine
from planner.solver.space import PIN_FIELDS, SET_PIN_FIELDS, Pins, SearchLimits
from planner.validation import honesty

__all__ = ["best_rank_layers", "build_plan", "evaluate", "infeasible_message", "layout_to_row", "make_context",
           "plans_from_result", "row_to_layout", "search", "search_result"]

GiB = 2**30


def make_context(model: ModelSpec, cluster: Any, workload: Workload, **options: Any) -> CostContext:
    """The cost context (`planner.cost.context.make_context`) for a framework: the `framework` option
    (`planner.frameworks`; default meshplan's executor, "any" for no framework's rules) sets the workload's
    runtime costs to that framework's unless the workload sets them explicitly; the model and workload must meet
    the framework's rules, and the search keeps only layouts it can build."""
    profile = framework(options.pop("framework", None))
    return cost_context.make_context(model, cluster, workload_for(profile, workload), framework=profile.name, **options)


def _placement(ctx: CostContext, world: int) -> tuple[RankPlacement, ...]:
    return placement_of(ctx.topology.hosts_and_indices(world))


def _cluster_json(cluster: Any) -> dict[str, Any]:
    return cluster.model_dump(mode="json") if hasattr(cluster, "model_dump") else dict(cluster)


def build_plan(ctx: CostContext, row: dict[str, int], rank_layers: list[int], *, proven: bool, notes: tuple[str, ...] = (),
               chunks: tuple[int, ...] | None = None, refined: Refinement | None = None, placed: bool = True) -> Plan:
    """Cost one layout rank by rank and wrap it with its inputs, placement and per-stage memory.

    Costed by `cost.layout_cost.cost_layout` (by layer type on each rank's own GPU where the model or the
    cluster needs it) with the layers per chunk `chunks` (default: `rank_layers` split evenly within each
    rank), or from an already computed refinement (`solver.refine`).

    `placed=False` is for display only (`meshplan plan` printing tables): the plan is the same in every field
    but `placement`, which is left empty instead of holding one object per rank (~0.1 s at 65,536 GPUs). Such
    a plan is not a valid plan file: write, export or run only placed plans.
    """
    pp = row["pp"]
    if chunks is None and pp > 1:
        chunks = refined.chunks if refined is not None else chunk_partition(rank_layers, row["v"])
    res = refined.result if refined is not None else cost_layout(ctx, row, rank_layers, chunks)
    assert res.rank_capacity_bytes is not None
    capacity = [float(c) for c in res.rank_capacity_bytes[0]]
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
    cluster_json = _cluster_json(ctx.cluster)
    mfu = model_flops / step / peak_flops_of_hosts(cluster_json, ctx.topology.hosts_of_ranks(W), ctx.compute_dtype)
    band, beyond = honesty(ctx, layout, mfu)
    prediction = Prediction(
        step_time_s=step,
        tokens_per_s=tokens / step,
        mfu=mfu,
        model_tflops_per_gpu=model_flops / step / W / 1e12,
        hardware_tflops_per_gpu=float(hw_per_token) * tokens / step / W / 1e12,
        peak_memory_bytes=float(res.peak_memory_bytes[0]),
        memory_per_stage=stages,
        breakdown=breakdown,
        bubble_fraction=float(res.bubble_s[0]) / step,
        idle_gpus=int(ctx.cluster.num_gpus) - W,
        error_band=ErrorBand(low=band.low, high=band.high, runs=band.runs, basis=band.basis),
        extrapolations=beyond,
    )
    inputs = PlanInputs(model=ctx.model, cluster=cluster_json, workload=ctx.workload)
    notes = (*notes, *framework(ctx.framework).notes(layout, ctx.model, ctx.workload))
    if layout.pp > 1 and layout.zero >= 2:
        notes = (*notes, f"ZeRO-{layout.zero} with pipeline parallelism holds weights and gradients like ZeRO-1: the "
                 "pipeline schedule keeps gradients (and ZeRO-3's gathered weights) unsharded until the step's one "
                 "gradient reduction, so only the optimizer state is sharded; costed that way")
    fields = dict(inputs=inputs, layout=layout, prediction=prediction, proven_optimal=proven, notes=notes,
                  framework=ctx.framework)
    if not placed:  # every field but the placement, as validated above (the nested models are built checked)
        return Plan.model_construct(**fields, placement=())
    return Plan(**fields, placement=_placement(ctx, W))


MAX_PIN_VALUE = MAX_SIZE


def _split_pins(pins: dict[str, Any]) -> tuple[Pins, SearchLimits, dict[str, Any]]:
    limit_names = {"max_tp", "max_cp", "max_micro_batch", "max_virtual_stages"}
    context_names = {"flash_attention", "dropout", "framework"}
    layout_pins = {k: v for k, v in pins.items() if v is not None and k not in limit_names | context_names}
    unknown = set(layout_pins) - set(PIN_FIELDS)
    if unknown:
        raise UserError(f"unknown option(s) {sorted(unknown)}", fix=f"pin one of {', '.join(PIN_FIELDS)}")
    for name, value in [*layout_pins.items(), *((k, v) for k, v in pins.items() if k in limit_names)]:
        # Degrees and sizes (and the search's limits on them) beyond any cluster would overflow the vectorised
        # int64 search columns.
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


def check_objective(objective: str) -> str:
    """`objective` if the search knows it, else a one-line UserError naming the flag."""
    if objective not in OBJECTIVES:
        raise UserError(f"unknown objective {objective!r}", where="--objective", fix=f"use one of {', '.join(OBJECTIVES)}")
    return objective


def search_result(model: ModelSpec, cluster: Any, workload: Workload | None = None, top: int = 1,
                  keep_all: bool = False, objective: str = "expected", **pins: Any) -> tuple[CostContext, SearchResult]:
    """Run the exact search; returns the context and the raw result (rows, stats). No workload: the model's
    default one (`Workload.for_model`). `objective`: rank by the predicted step time ("expected") or by its
    error band's upper end ("pessimistic", solver.exact)."""
    check_objective(objective)
    layout_pins, limits, options = _split_pins(pins)
    choices.refuse_pins(layout_pins.values, options.get("framework") or DEFAULT_FRAMEWORK)
    ctx = make_context(model, cluster, workload if workload is not None else Workload.for_model(model), **options)
    return ctx, exact_search(ctx, layout_pins, limits, top=top, keep_all=keep_all, objective=objective)


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
        what = ", ".join(f"{k}={v}" for k, v in pins.items() if v is not None and k != "framework") or "no pins"
        head = (f"no valid layout for {ctx.model.name} on {ctx.cluster.num_gpus} GPUs with global batch "
                f"{ctx.workload.batch} ({what}) that {framework(ctx.framework).label()} can build")
        reason = result.rejected.reason(choices.pinned_columns(pins))
        if reason is not None:
            return f"{head}: {reason}"
        return (f"{head}; fix: relax the pins, change --global-batch to a multiple of the DP degrees, or plan for "
                "another --framework")
    assert result.best_infeasible is not None
    row, peak = result.best_infeasible
    layout = row_to_layout(row, None)
    return (
        f"{ctx.model.name} fits nowhere on {ctx.cluster.num_gpus} x {ctx.gpu.name}: the least-memory layout "
        f"({layout.describe()}) needs {peak / GiB:.1f} GiB per GPU, {(peak - cap) / GiB:.1f} GiB over the "
        f"{cap / GiB:.1f} GiB capacity; fix: {memory_fixes(layout, pins)}"
    )


def search(model: ModelSpec, cluster: Any, workload: Workload | None = None, top: int = 1, objective: str = "expected",
           **pins: Any) -> list[Plan]:
    """The `top` best plans, best first; pins use Layout field names (`tp=8, pp=4, recompute="selective"`).

    `schedule`, `recompute` and `zero` also take a tuple of allowed values, to search only what a framework
    implements (`schedule=("1f1b", "interleaved"), recompute=("none", "full")`). `framework="torchtitan"`
    (any of `planner.frameworks.NAMES`; default meshplan's own executor) plans for that framework: only
    layouts it can build, costed with its runtime; the plans record it. No workload: the model's default one
    (`Workload.for_model`). `objective="pessimistic"` ranks by the step time at the upper end of each plan's
    error band instead of the predicted step time."""
    ctx, result = search_result(model, cluster, workload, top=top, objective=objective, **pins)
    return plans_from_result(ctx, result, pins, objective=objective)


def ranking_time_s(plan: Plan, objective: str = "expected") -> float:
    """What a plan is ranked by under `objective`: its step time, or its pessimistic step time."""
    return plan.prediction.pessimistic_step_time_s if objective == "pessimistic" else plan.prediction.step_time_s


def plans_from_result(ctx: CostContext, result: SearchResult, pins: dict[str, Any] | None = None,
                      objective: str = "expected", placed: bool = True) -> list[Plan]:
    """Turn a search's best rows into Plans (rank-by-rank costing, per-stage memory, placement; `placed=False`:
    without the placement, for display only, see `build_plan`)."""
    pins = pins or {}
    cluster = ctx.cluster
    n = len(result.step_time_s)
    if n == 0:
        raise InfeasibleError(infeasible_message(ctx, result, pins))
    plans = []
    typed = needs_typed_costing(ctx)
    for i in range(n):
        row = row_at(result.table, i)
        rank_layers = _mean_rank_layers(ctx, row)
        notes: tuple[str, ...] = ()
        used = row["dp"] * row["tp"] * row["pp"] * row["cp"]
        if i == 0 and int(cluster.num_gpus) > used:
            notes = (f"{int(cluster.num_gpus) - used} GPUs left idle: no layout using all of them is faster",)
        refined = refine(ctx, row, rank_layers) if typed else None  # CP-SAT partition by layer type and GPU
        if refined is not None:
            rank_layers, notes = refined.rank_layers, notes + refined.notes
        plans.append(build_plan(ctx, row, rank_layers, proven=result.stats.proven_optimal, notes=notes, refined=refined,
                                placed=placed))
    if typed:  # the refined costing may reorder the search's ranking (made with the mean-layer split)
        plans.sort(key=lambda plan: ranking_time_s(plan, objective))
    if objective == "pessimistic" and plans:
        plans[0] = plans[0].model_copy(update={"notes": (*plans[0].notes, "ranked by the upper end of the error band "
                                                         "(--objective pessimistic)")})
    return plans


def _mean_rank_layers(ctx: CostContext, row: dict[str, int]) -> list[int]:
    """The optimal split of the compact evaluation (mean layer, slowest GPU), as layers per pipeline rank."""
    res = evaluate_table(ctx, table_of(row), AxisBandwidth(ctx.topology))
    assert res.split is not None
    return res.split.counts(0, row["pp"])


def best_rank_layers(ctx: CostContext, row: dict[str, int]) -> list[int]:
    """Layers per pipeline rank of the best partition: the CP-SAT split by layer type and per-rank GPU when
    the model has several layer types or the cluster several GPU kinds, else the exact mean-layer split."""
    mean = _mean_rank_layers(ctx, row)
    return refine(ctx, row, mean).rank_layers if needs_typed_costing(ctx) and row["pp"] > 1 else mean


def evaluate(model: ModelSpec, cluster: Any, workload: Workload | None, layout: Layout, *, allow_oom: bool = False,
             **options: Any) -> Plan:
    """The prediction for exactly this layout; raises UserError if it is invalid, if the framework (option
    `framework`, default meshplan's executor) cannot build it, or (unless allow_oom) if it does not fit. No
    workload: the model's default one."""
    workload = workload if workload is not None else Workload.for_model(model)
    ctx = make_context(model, cluster, workload, **options)
    rules.check(layout, model, ctx.workload, int(cluster.num_gpus), framework=ctx.framework)
    row = row_at(layout_to_row(layout), 0)
    refined = None
    if layout.layer_partition is not None or layout.pp == 1:
        rank_layers = rank_layers_of(layout.partition(model.num_layers), layout.pp)
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
