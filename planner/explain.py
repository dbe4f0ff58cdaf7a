"""Why a plan wins: for each knob, the best layout with that knob changed, and what it loses where.

For knob K with plan value x, every other knob stays at the plan's value except the few that must move with
K to keep the layout valid (`COVARY`: changing TP changes how many GPUs are left for DP, hence the
micro-batch count, the FSDP group and SP; changing the micro-batch changes the micro-batch count; ...). For
each other valid value of K, the exact search (`planner.solver.exact.exact_search`) finds the best layout with
K pinned to it; the fastest of those that fit is the runner-up. Its step-time breakdown minus the plan's
names the term that grows most ("TP=16 spans 2 NVLink domains: +38 % step time, most in TP communication").
When no alternative fits, the least-memory one says by how much ("stage 0 needs 93.1 GiB of 80.0 GiB").
The direct neighbour (only K changed, with the forced adjustments) is also costed: when it would be faster
but does not fit, memory is why the plan's value wins, and the report says so. Mesh axis orders are costed
directly (every distinct order of the axes larger than 1).

    from planner.explain import explain
    report = explain(Plan.load("plan.json"))     # pydantic: report.model_dump_json()
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from planner import api
from planner.cost.comm import AxisBandwidth
from planner.cost.evaluate import evaluate_table
from planner.cost.layout_cost import rank_layers_of
from planner.explain_text import pct as pct_text
from planner.explain_text import value_text, verdict, worst_stage
from planner.frameworks import framework as profile_of
from planner.frameworks import without_runtime
from planner.layout import Layout, choices, rules
from planner.layout.names import ANY_FRAMEWORK, RECOMPUTE_NAMES
from planner.layout.rules import Facts
from planner.layout.schedules import BY_CODE, SCHEDULE_NAMES
from planner.layout.table import COLUMNS, MESH_ORDERS, layout_to_row, row_at
from planner.plan import ErrorBand, Plan
from planner.render import BREAKDOWN_TERMS
from planner.solver.exact import exact_search
from planner.solver.space import (
    PIN_FIELDS,
    Pins,
    SearchLimits,
    divisors,
    micro_batch_pairs,
    shape_candidates,
    space_of,
)

GiB = 2**30
KNOBS = ("tp", "pp", "dp", "cp", "ep", "micro_batch", "schedule", "virtual_stages", "zero", "dp_shard",
         "recompute", "sequence_parallel", "mesh_axes")
COVARY: dict[str, tuple[str, ...]] = {
    "tp": ("dp", "num_microbatches", "dp_shard", "virtual_stages", "sequence_parallel"),
    "pp": ("dp", "num_microbatches", "dp_shard", "virtual_stages"),
    "cp": ("dp", "num_microbatches", "dp_shard"),
    "dp": ("pp", "num_microbatches", "dp_shard", "virtual_stages"),
    "ep": (),
    "micro_batch": ("num_microbatches", "virtual_stages"),
    "schedule": ("virtual_stages",),
    "virtual_stages": (),
    "zero": ("dp_shard",),
    "dp_shard": (),
    "recompute": (),
    "sequence_parallel": (),
}
"""Knobs that move with each knob (searched), all others pinned to the plan's values."""
class Alternative(BaseModel):
    """The best feasible layout with the knob changed, and how it compares with the plan."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: str = Field(description="The knob's value in this layout.")
    layout: Layout
    step_time_s: float = Field(description="Predicted step time (s).")
    delta_pct: float = Field(description="Step time change against the plan (%); positive = slower.")
    term_deltas_s: dict[str, float] = Field(description="Breakdown term (Breakdown field) -> change (s).")
    main_term: str = Field(description="The breakdown term that grows most (Breakdown field name).")
    peak_memory_bytes: float = Field(description="Peak memory per GPU (bytes).")


class KnobExplanation(BaseModel):
    """One knob: the plan's value, the runner-up (or why there is none) and a one-line verdict."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    knob: str = Field(description="Layout field name.")
    plan_value: str
    tried: tuple[str, ...] = Field(description="Other values of the knob that were considered.")
    runner_up: Alternative | None = None
    no_fit: str | None = Field(None, description="Why no alternative fits (least-memory alternative), if none does.")
    blocked_by_memory: str | None = Field(None, description="A faster neighbour that does not fit, if any.")
    verdict: str = Field(description="One sentence: why the plan's value wins (or that it does not).")


class Explanation(BaseModel):
    """Why a plan wins, knob by knob (the output of `meshplan explain --json`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    layout: Layout
    step_time_s: float = Field(description="The plan's step time under the current cost model (s).")
    stored_step_time_s: float = Field(description="The step time stored in the plan file (s).")
    flash_attention: bool = Field(description="Cost-model option the plan's prediction was reproduced with.")
    error_band: ErrorBand | None = Field(None, description="The plan's error band under the current validation data.")
    extrapolations: tuple[str, ...] = Field((), description="The plan's knobs outside every validated run.")
    knobs: tuple[KnobExplanation, ...]


def _row(plan: Plan) -> dict[str, int]:
    return row_at(layout_to_row(plan.layout), 0)


def context_for_plan(plan: Plan, framework: str | None = None) -> tuple[Any, Plan]:
    """Cost context reproducing the plan's stored prediction, and the plan re-costed in it; the context plans
    for `framework` (default: the plan's own).

    Plans do not record the FlashAttention option, so both settings are tried; if neither reproduces the
    stored step time (the cost model changed since), the current model with FlashAttention is used.
    """
    import hardware_profiles

    cluster = hardware_profiles.Cluster.model_validate(plan.inputs.cluster)
    model, workload = plan.inputs.model, plan.inputs.workload
    rules.check(plan.layout, model, workload, int(cluster.num_gpus), framework=ANY_FRAMEWORK)  # a hand-edited plan
    rank_layers = rank_layers_of(plan.layout.partition(model.num_layers), plan.layout.pp)
    first = None
    # The workload records the FlashAttention setting the plan was costed with; plans written before it did
    # are reproduced with either setting.
    for flash in (workload.flash_attention, not workload.flash_attention):
        ctx = api.make_context(model, cluster, workload, flash_attention=flash, framework=framework or plan.framework)
        again = api.build_plan(ctx, _row(plan), rank_layers, proven=plan.proven_optimal,
                               chunks=plan.layout.layer_partition)
        first = first or (ctx, again)
        if abs(again.prediction.step_time_s - plan.prediction.step_time_s) <= 1e-9 * plan.prediction.step_time_s:
            return ctx, again
    return first


SHAPE_KNOBS = ("tp", "cp", "pp", "dp", "ep")  # in `space.shape_candidates` order


def _fixed(knob: str, lay: Layout) -> dict[str, Any]:
    """The plan's knobs that stay pinned while `knob` changes (all but `knob` and those in `COVARY[knob]`)."""
    return {f: getattr(lay, f) for f in PIN_FIELDS if f != knob and f not in COVARY.get(knob, ())}


def _candidates(knob: str, lay: Layout, ctx: Any, limits: SearchLimits) -> list[Any]:
    """Other values of `knob` that can be valid with the plan's other knobs: the values the search's own
    generators (`planner.layout.choices`, `solver.space`) produce with those knobs pinned, dominated options
    included."""
    fixed = _fixed(knob, lay)
    space = space_of(ctx, Pins(fixed), replace(limits, prune_dominated=False))
    facts, framework = space.facts, space.framework
    if knob in SHAPE_KNOBS:
        vals = sorted(set(shape_candidates(space)[SHAPE_KNOBS.index(knob)].tolist()))
    elif knob == "micro_batch":
        vals = sorted(set(micro_batch_pairs(space, shape_candidates(space))[1].tolist()))
    elif knob in ("schedule", "virtual_stages"):
        opts = choices.schedule_options(np.array([lay.pp]), np.array([lay.num_microbatches]), facts, fixed, framework,
                                        limits.max_virtual_stages, False)[0] if lay.pp > 1 else []
        if knob == "schedule":
            names = {BY_CODE[code].name for code, _ in opts}
            vals = [n for n in SCHEDULE_NAMES if n in names]
        else:
            vals = sorted({v for _, v in opts if v > 1})
    elif knob == "zero":
        opts = choices.zero_options(np.array([lay.dp]), np.array([min(lay.pp, 2)]), facts, fixed, framework, False)[0]
        vals = sorted({z for z, _ in opts}) if lay.dp > 1 else []
    elif knob == "dp_shard":
        vals = choices.values("dp_shard", divisors(lay.dp), facts, fixed, framework) if lay.zero > 0 and lay.dp > 1 else []
    elif knob == "recompute":
        vals = [RECOMPUTE_NAMES[c] for c in choices.values("rc", range(len(RECOMPUTE_NAMES)), facts, fixed, framework)]
    elif knob == "sequence_parallel":
        vals = [bool(x) for x in choices.values("sp", (0, 1), facts, fixed, framework)] if lay.tp > 1 else []
    else:
        raise ValueError(f"unknown knob {knob!r}")
    return [v for v in vals if v != getattr(lay, knob)]


def _neighbour(lay: Layout, knob: str, value: Any, ctx: Any, framework: str | None) -> Layout | None:
    """The plan with only `knob` changed plus the adjustments it forces (None when that is invalid)."""
    upd: dict[str, Any] = {knob: value, "layer_partition": None}
    if knob in ("tp", "pp", "cp"):
        cell = {"tp": lay.tp, "pp": lay.pp, "cp": lay.cp, knob: value}
        size = cell["tp"] * cell["pp"] * cell["cp"]
        if lay.world_size % size:
            return None
        upd["dp"] = lay.world_size // size
    dp = upd.get("dp", lay.dp)
    mb = upd.get("micro_batch", lay.micro_batch)
    if ctx.workload.batch % (dp * mb):
        return None
    upd["num_microbatches"] = ctx.workload.batch // (dp * mb)
    if knob == "zero":
        upd["dp_shard"] = dp if value > 0 else 1
    elif knob != "dp_shard" and lay.zero > 0:
        upd["dp_shard"] = dp if lay.dp_shard == lay.dp else lay.dp_shard
    if knob == "schedule":
        upd["virtual_stages"] = 2 if value == "interleaved" else 1
    if knob == "tp":
        upd["sequence_parallel"] = value > 1 and (lay.sequence_parallel or lay.tp == 1)
    if knob == "pp" and value == 1:
        upd.update(schedule="1f1b", virtual_stages=1)
    try:
        new = Layout(**{**lay.model_dump(), **upd})
        rules.check(new, ctx.model, ctx.workload, int(ctx.cluster.num_gpus), framework=framework)
    except ValueError:
        return None
    return new


def _cost_rows(ctx: Any, layouts: list[Layout]) -> Any:
    table = {k: np.concatenate([layout_to_row(x)[k] for x in layouts]) for k in COLUMNS}
    return table, evaluate_table(ctx, table, AxisBandwidth(ctx.topology))


def _full_plan(ctx: Any, row: dict[str, int]) -> Plan:
    return api.build_plan(ctx, row, api.best_rank_layers(ctx, row), proven=False)


def _alternative(knob: str, base: Plan, alt: Plan) -> Alternative:
    b, a = base.prediction.breakdown, alt.prediction.breakdown
    deltas = {f: getattr(a, f) - getattr(b, f) for f, _ in BREAKDOWN_TERMS}
    return Alternative(
        value=value_text(getattr(alt.layout, knob)), layout=alt.layout, step_time_s=alt.prediction.step_time_s,
        delta_pct=100 * (alt.prediction.step_time_s / base.prediction.step_time_s - 1), term_deltas_s=deltas,
        main_term=max(deltas, key=lambda f: deltas[f]), peak_memory_bytes=alt.prediction.peak_memory_bytes,
    )


NOT_APPLICABLE = {
    "schedule": ("pp", 1, "no pipeline (pp = 1)"),
    "virtual_stages": ("schedule", None, "only with the interleaved schedule (see schedule)"),
    "zero": ("dp", 1, "no data parallelism to shard over (dp = 1)"),
    "dp_shard": ("zero", None, "needs ZeRO >= 1 and dp > 1"),
    "sequence_parallel": ("tp", 1, "needs tp > 1"),
}
def explain_knob(knob: str, base: Plan, ctx: Any, limits: SearchLimits) -> KnobExplanation:
    """Runner-up and verdict for one knob (see module docstring)."""
    lay = base.layout
    if knob == "mesh_axes":
        return _explain_mesh(base, ctx)
    values = _candidates(knob, lay, ctx, limits)
    if not values and knob in NOT_APPLICABLE:
        field, bad, why = NOT_APPLICABLE[knob]
        if bad is None or getattr(lay, field) == bad:
            return KnobExplanation(knob=knob, plan_value=value_text(getattr(lay, knob)), tried=(), verdict=why)
    best: tuple[float, dict[str, int]] | None = None
    least: tuple[float, dict[str, int]] | None = None
    fixed = _fixed(knob, lay)
    for value in values:
        res = exact_search(ctx, Pins({**fixed, knob: value}), limits, top=1)
        if len(res.step_time_s) and (best is None or res.step_time_s[0] < best[0]):
            best = (float(res.step_time_s[0]), row_at(res.table, 0))
        if res.best_infeasible and (least is None or res.best_infeasible[1] < least[0]):
            least = (res.best_infeasible[1], res.best_infeasible[0])
    alt = _full_plan(ctx, best[1]) if best else None
    ru = _alternative(knob, base, alt) if alt else None
    no_fit = None
    if alt is None and least is not None:
        oom = _full_plan(ctx, least[1])
        no_fit = f"does not fit (least memory: {knob}={value_text(getattr(oom.layout, knob))}, {worst_stage(oom)})"
    blocked = _blocked(knob, values, base, ctx, ctx.framework)
    return KnobExplanation(knob=knob, plan_value=value_text(getattr(lay, knob)), tried=tuple(value_text(v) for v in values),
                           runner_up=ru, no_fit=no_fit, blocked_by_memory=blocked,
                           verdict=verdict(knob, base, alt, ru, no_fit, blocked, lone=len(values) == 1))


def _blocked(knob: str, values: list[Any], base: Plan, ctx: Any, framework: str | None) -> str | None:
    """The fastest direct neighbour that beats the plan but does not fit, as a sentence (or None)."""
    cands = [x for x in (_neighbour(base.layout, knob, v, ctx, framework) for v in values) if x is not None]
    if not cands:
        return None
    table, res = _cost_rows(ctx, cands)
    faster = np.nonzero(~res.fits & (res.step_time_s < base.prediction.step_time_s))[0]
    if not len(faster):
        return None
    i = int(faster[np.argmin(res.step_time_s[faster])])
    oom = _full_plan(ctx, row_at(table, i))
    pct = 100 * (1 - oom.prediction.step_time_s / base.prediction.step_time_s)
    return f"{knob}={value_text(getattr(cands[i], knob))} would be {pct_text(pct)} % faster but does not fit: {worst_stage(oom)}"


def _explain_mesh(base: Plan, ctx: Any) -> KnobExplanation:
    """Every distinct order of the axes larger than 1, costed directly (memory does not depend on order)."""
    lay = base.layout
    sizes = lay.axis_sizes()
    key = tuple(a for a in lay.mesh_axes if sizes[a] > 1)
    facts = Facts.of(ctx.model, ctx.workload, int(ctx.cluster.num_gpus))
    seen, cands = {key}, []
    for order in MESH_ORDERS:
        k = tuple(a for a in order if sizes[a] > 1)
        if k not in seen:
            seen.add(k)
            cand = lay.model_copy(update={"mesh_axes": order})
            if not rules.violations(cand, facts, ctx.framework):  # only orders the framework can build
                cands.append(cand)
    plan_value = value_text(lay.mesh_axes)
    if not cands:
        return KnobExplanation(knob="mesh_axes", plan_value=plan_value, tried=(),
                               verdict="only one axis is larger than 1: the order does not matter")
    table, res = _cost_rows(ctx, cands)
    i = int(np.argmin(np.where(res.fits, res.step_time_s, np.inf)))
    alt = _full_plan(ctx, row_at(table, i))
    ru = _alternative("mesh_axes", base, alt)
    return KnobExplanation(knob="mesh_axes", plan_value=plan_value, tried=tuple(value_text(c.mesh_axes) for c in cands),
                           runner_up=ru, verdict=verdict("mesh order", base, alt, ru, None, None))


def explain(plan: Plan, knobs: tuple[str, ...] = KNOBS, framework: str | None = None) -> Explanation:
    """Why `plan` wins, knob by knob (see module docstring), among the layouts its framework (or `framework`,
    after checking the plan against that framework's rules) can build; a plan its own framework cannot build
    (a hand-edited one) is explained among the layouts of the generic rules (framework "any")."""
    import hardware_profiles

    gpus = int(hardware_profiles.Cluster.model_validate(plan.inputs.cluster).num_gpus)
    facts = Facts.of(plan.inputs.model, plan.inputs.workload, gpus)
    if framework is not None and framework != plan.framework:
        refused = profile_of(framework).refusal(plan.layout, plan.inputs.model, plan.inputs.workload,
                                                otherwise=f"re-plan it: meshplan replan PLAN.json --framework {framework}")
        if refused is not None:
            raise refused
        plan = plan.model_copy(update={"framework": framework,
                                       "inputs": plan.inputs.model_copy(update={"workload": without_runtime(plan.inputs.workload)})})
    runs = not rules.violations(plan.layout, facts, plan.framework)
    ctx, base = context_for_plan(plan, plan.framework if runs else ANY_FRAMEWORK)
    lay = base.layout
    n = int(ctx.cluster.num_gpus)
    limits = SearchLimits(max_tp=n, max_cp=max(16, lay.cp), max_micro_batch=max(64, lay.micro_batch),
                          max_virtual_stages=max(8, lay.virtual_stages))
    items = tuple(explain_knob(k, base, ctx, limits) for k in knobs if k != "ep" or ctx.model.moe is not None)
    return Explanation(layout=plan.layout, step_time_s=base.prediction.step_time_s,
                       stored_step_time_s=plan.prediction.step_time_s, flash_attention=bool(ctx.flash_attention),
                       error_band=base.prediction.error_band, extrapolations=base.prediction.extrapolations,
                       knobs=items)
