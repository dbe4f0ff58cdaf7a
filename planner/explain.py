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

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from planner import api
from planner.cost.comm import AxisBandwidth
from planner.cost.evaluate import COLUMNS, MESH_ORDERS, SCHEDULES, evaluate_table
from planner.errors import UserError
from planner.layout import Layout
from planner.plan import Plan
from planner.render import BREAKDOWN_TERMS
from planner.solver.exact import exact_search
from planner.solver.space import PIN_FIELDS, Pins, SearchLimits, divisors

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
AXES_OF = {"tp": ("tp",), "cp": ("cp",), "pp": ("pp",), "dp": ("dp_replicate", "dp_shard"),
           "zero": ("dp_replicate", "dp_shard"), "dp_shard": ("dp_shard",)}
LABEL = dict(BREAKDOWN_TERMS)
_SHORT = {"compute_s": "compute", "tp_comm_s": "TP communication", "cp_comm_s": "CP communication",
          "ep_comm_s": "EP all-to-all", "pp_comm_s": "PP send/recv", "dp_comm_s": "DP/FSDP communication",
          "bubble_s": "the pipeline bubble", "optimizer_s": "the optimizer step"}


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
    knobs: tuple[KnobExplanation, ...]


def _text(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _row(plan: Plan) -> dict[str, int]:
    return {k: int(v[0]) for k, v in api.layout_to_row(plan.layout).items()}


def context_for_plan(plan: Plan, framework: str | None = None) -> tuple[Any, Plan]:
    """Cost context reproducing the plan's stored prediction, and the plan re-costed in it.

    Plans do not record the FlashAttention option, so both settings are tried; if neither reproduces the
    stored step time (the cost model changed since), the current model with FlashAttention is used.
    """
    import hardware_profiles

    cluster = hardware_profiles.Cluster.model_validate(plan.inputs.cluster)
    model, workload = plan.inputs.model, plan.inputs.workload
    api.check_against_model(plan.layout, model, workload, int(cluster.num_gpus))  # a hand-edited plan may not be valid
    rank_layers = api._rank_layers_from_partition(plan.layout, model.num_layers)
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


def _candidates(knob: str, lay: Layout, ctx: Any, limits: SearchLimits) -> list[Any]:
    """Other values of `knob` that can be valid with the plan's other knobs (cheap necessary conditions)."""
    m, w = ctx.model, ctx.workload
    n = int(ctx.cluster.num_gpus)
    cur = getattr(lay, knob)
    if knob == "tp":
        vals = [t for t in divisors(m.num_heads) if m.ffn_hidden_size % t == 0
                and (m.num_kv_heads % t == 0 or t % m.num_kv_heads == 0) and t * lay.pp * lay.cp <= n]
    elif knob == "pp":
        vals = list(range(1, min(m.num_layers, n // (lay.tp * lay.cp)) + 1))
    elif knob == "cp":
        vals = [c for c in range(1, limits.max_cp + 1) if (c == 1 or w.seq_len % (2 * c) == 0) and lay.tp * lay.pp * c <= n]
    elif knob == "dp":
        vals = [d for d in divisors(w.batch) if d * lay.tp * lay.cp <= n]
    elif knob == "ep":
        vals = divisors(m.moe.num_experts) if m.moe else []
    elif knob == "micro_batch":
        vals = [b for b in divisors(w.batch // lay.dp) if b <= limits.max_micro_batch]
    elif knob == "schedule":
        vals = list(SCHEDULES) if lay.pp > 1 else []
    elif knob == "virtual_stages":
        vals = [v for v in range(2, limits.max_virtual_stages + 1) if lay.pp * v <= m.num_layers] if lay.schedule == "interleaved" else []
    elif knob == "zero":
        vals = [0, 1, 2, 3] if lay.dp > 1 else []
    elif knob == "dp_shard":
        vals = divisors(lay.dp) if lay.zero > 0 and lay.dp > 1 else []
    elif knob == "recompute":
        vals = ["none", "selective", "full"]
    elif knob == "sequence_parallel":
        vals = [False, True] if lay.tp > 1 else []
    else:
        raise ValueError(f"unknown knob {knob!r}")
    return [v for v in vals if v != cur]


def _neighbour(lay: Layout, knob: str, value: Any, ctx: Any) -> Layout | None:
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
        api.check_against_model(new, ctx.model, ctx.workload, int(ctx.cluster.num_gpus))
    except ValueError:
        return None
    return new


def _cost_rows(ctx: Any, layouts: list[Layout]) -> Any:
    table = {k: np.concatenate([api.layout_to_row(x)[k] for x in layouts]) for k in COLUMNS}
    return table, evaluate_table(ctx, table, AxisBandwidth(ctx.topology))


def _full_plan(ctx: Any, row: dict[str, int]) -> Plan:
    return api.build_plan(ctx, row, api.best_rank_layers(ctx, row), proven=False)


def _worst_stage(plan: Plan) -> str:
    worst = max(plan.prediction.memory_per_stage, key=lambda s: s.total_bytes - s.capacity_bytes)
    return (f"stage {worst.stage} needs {worst.total_bytes / GiB:.1f} GiB of "
            f"{worst.capacity_bytes / GiB:.1f} GiB")


def _domains(plan: Plan, axes: tuple[str, ...]) -> int:
    """Scale-up (NVLink) domains spanned by rank 0's group along `axes` (hosts without a rack-scale domain)."""
    lay = plan.layout
    sizes = dict(zip(lay.mesh_axes, lay.mesh_shape))
    dom = plan.inputs.cluster.get("nvlink_domain") or {}
    hosts_per_domain = int(dom.get("hosts", 1))
    ranks = [0]
    for axis in axes:  # rank 0's group: vary the group's axes, others at 0
        stride = int(np.prod([sizes[a] for a in lay.mesh_axes[lay.mesh_axes.index(axis) + 1:]], dtype=np.int64))
        ranks = [r + j * stride for r in ranks for j in range(sizes[axis])]
    return len({plan.placement[r].host // hosts_per_domain for r in ranks})


def _scaleup_word(plan: Plan) -> str:
    groups = plan.inputs.cluster.get("host_groups") or [{}]
    link = str(groups[0].get("node", {}).get("scaleup_link") or "")
    return "NVLink domains" if link.startswith("nvlink") else "hosts"


def _alternative(knob: str, base: Plan, alt: Plan) -> Alternative:
    b, a = base.prediction.breakdown, alt.prediction.breakdown
    deltas = {f: getattr(a, f) - getattr(b, f) for f, _ in BREAKDOWN_TERMS}
    return Alternative(
        value=_text(getattr(alt.layout, knob)), layout=alt.layout, step_time_s=alt.prediction.step_time_s,
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
SHOWN_WITH = ("tp", "pp", "dp", "cp", "micro_batch", "schedule", "virtual_stages", "zero", "sequence_parallel")
"""Knobs listed next to a runner-up when they differ from the plan (what else had to change)."""


def _pct(value: float) -> str:
    return f"{value:.2f}" if abs(value) < 0.1 else f"{value:.1f}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n != 1 else f"1 {word.removesuffix('s')}"


def _verdict(knob: str, base: Plan, alt: Plan | None, ru: Alternative | None, no_fit: str | None,
             blocked: str | None, lone: bool = False) -> str:
    name = knob.upper() if knob in ("tp", "pp", "dp", "cp", "ep") else knob
    if ru is None or alt is None:
        text = f"{'the other' if lone else 'every other'} {name} {no_fit}" if no_fit else f"no valid layout with another {name}"
        return text + (f"; {blocked}" if blocked else "")
    head = f"{name}={ru.value}"
    others = [f"{k}={_text(getattr(alt.layout, k))}" for k in SHOWN_WITH
              if k != knob and getattr(alt.layout, k) != getattr(base.layout, k)
              and not (k == "sequence_parallel" and alt.layout.tp == 1)]
    if others:
        head += f" (with {', '.join(others)})"
    axes = AXES_OF.get(knob)
    if axes and int(np.prod([alt.layout.axis_sizes()[a] for a in axes])) > 1:
        d0, d1 = _domains(base, axes), _domains(alt, axes)
        if d1 != d0:
            head += f" {'spans' if d1 > d0 else 'stays in'} {_plural(d1, _scaleup_word(alt))} (was {d0})"
    if ru.delta_pct < -1e-7:
        return (f"{head} is {_pct(-ru.delta_pct)} % faster: the plan is not the optimum along this knob (pinned, or "
                "outside the searched space)")
    if ru.delta_pct <= 1e-7:
        return f"{head} ties (same step time)"
    term = ru.main_term
    text = (f"{head}: +{_pct(ru.delta_pct)} % step time, most in {_SHORT[term]} "
            f"(+{ru.term_deltas_s[term]:.3g} s)")
    return text + (f"; {blocked}" if blocked else "")


def explain_knob(knob: str, base: Plan, ctx: Any, limits: SearchLimits) -> KnobExplanation:
    """Runner-up and verdict for one knob (see module docstring)."""
    lay = base.layout
    if knob == "mesh_axes":
        return _explain_mesh(base, ctx)
    values = _candidates(knob, lay, ctx, limits)
    if not values and knob in NOT_APPLICABLE:
        field, bad, why = NOT_APPLICABLE[knob]
        if bad is None or getattr(lay, field) == bad:
            return KnobExplanation(knob=knob, plan_value=_text(getattr(lay, knob)), tried=(), verdict=why)
    best: tuple[float, dict[str, int]] | None = None
    least: tuple[float, dict[str, int]] | None = None
    fixed = {f: getattr(lay, f) for f in PIN_FIELDS if f != knob and f not in COVARY[knob]}
    for value in values:
        res = exact_search(ctx, Pins({**fixed, knob: value}), limits, top=1)
        if len(res.step_time_s) and (best is None or res.step_time_s[0] < best[0]):
            best = (float(res.step_time_s[0]), {k: int(v[0]) for k, v in res.table.items()})
        if res.best_infeasible and (least is None or res.best_infeasible[1] < least[0]):
            least = (res.best_infeasible[1], res.best_infeasible[0])
    alt = _full_plan(ctx, best[1]) if best else None
    ru = _alternative(knob, base, alt) if alt else None
    no_fit = None
    if alt is None and least is not None:
        oom = _full_plan(ctx, least[1])
        no_fit = f"does not fit (least memory: {knob}={_text(getattr(oom.layout, knob))}, {_worst_stage(oom)})"
    blocked = _blocked(knob, values, base, ctx)
    return KnobExplanation(knob=knob, plan_value=_text(getattr(lay, knob)), tried=tuple(_text(v) for v in values),
                           runner_up=ru, no_fit=no_fit, blocked_by_memory=blocked,
                           verdict=_verdict(knob, base, alt, ru, no_fit, blocked, lone=len(values) == 1))


def _blocked(knob: str, values: list[Any], base: Plan, ctx: Any) -> str | None:
    """The fastest direct neighbour that beats the plan but does not fit, as a sentence (or None)."""
    cands = [x for x in (_neighbour(base.layout, knob, v, ctx) for v in values) if x is not None]
    if not cands:
        return None
    table, res = _cost_rows(ctx, cands)
    faster = np.nonzero(~res.fits & (res.step_time_s < base.prediction.step_time_s))[0]
    if not len(faster):
        return None
    i = int(faster[np.argmin(res.step_time_s[faster])])
    oom = _full_plan(ctx, {k: int(v[i]) for k, v in table.items()})
    pct = 100 * (1 - oom.prediction.step_time_s / base.prediction.step_time_s)
    return f"{knob}={_text(getattr(cands[i], knob))} would be {_pct(pct)} % faster but does not fit: {_worst_stage(oom)}"


def _explain_mesh(base: Plan, ctx: Any) -> KnobExplanation:
    """Every distinct order of the axes larger than 1, costed directly (memory does not depend on order)."""
    lay = base.layout
    sizes = lay.axis_sizes()
    key = tuple(a for a in lay.mesh_axes if sizes[a] > 1)
    from planner.frameworks import framework

    profile = framework(ctx.framework)
    seen, cands = {key}, []
    for order in MESH_ORDERS:
        k = tuple(a for a in order if sizes[a] > 1)
        if k not in seen:
            seen.add(k)
            cand = lay.model_copy(update={"mesh_axes": order})
            if not profile.breaches(cand, ctx.model, ctx.workload):  # only orders the framework can build
                cands.append(cand)
    plan_value = _text(lay.mesh_axes)
    if not cands:
        return KnobExplanation(knob="mesh_axes", plan_value=plan_value, tried=(),
                               verdict="only one axis is larger than 1: the order does not matter")
    table, res = _cost_rows(ctx, cands)
    i = int(np.argmin(np.where(res.fits, res.step_time_s, np.inf)))
    alt = _full_plan(ctx, {k: int(v[i]) for k, v in table.items()})
    ru = _alternative("mesh_axes", base, alt)
    verdict = _verdict("mesh order", base, alt, ru, None, None)
    return KnobExplanation(knob="mesh_axes", plan_value=plan_value, tried=tuple(_text(c.mesh_axes) for c in cands),
                           runner_up=ru, verdict=verdict)


def explain(plan: Plan, knobs: tuple[str, ...] = KNOBS, framework: str | None = None) -> Explanation:
    """Why `plan` wins, knob by knob (see module docstring), among the layouts its framework (or `framework`,
    after checking the plan against that framework's rules) can build."""
    if framework is not None and framework != plan.framework:
        from planner.frameworks import framework as profile_of
        from planner.frameworks import without_runtime

        profile = profile_of(framework)
        breaches = profile.breaches(plan.layout, plan.inputs.model, plan.inputs.workload)
        if breaches:
            raise UserError(f"{profile.label()} cannot run this plan: " + "; ".join(map(str, breaches)),
                            fix=f"re-plan it: meshplan replan PLAN.json --framework {framework}")
        plan = plan.model_copy(update={"framework": framework,
                                       "inputs": plan.inputs.model_copy(update={"workload": without_runtime(plan.inputs.workload)})})
    ctx, base = context_for_plan(plan)
    lay = base.layout
    n = int(ctx.cluster.num_gpus)
    limits = SearchLimits(max_tp=n, max_cp=max(16, lay.cp), max_micro_batch=max(64, lay.micro_batch),
                          max_virtual_stages=max(8, lay.virtual_stages))
    items = tuple(explain_knob(k, base, ctx, limits) for k in knobs if k != "ep" or ctx.model.moe is not None)
    return Explanation(layout=plan.layout, step_time_s=base.prediction.step_time_s,
                       stored_step_time_s=plan.prediction.step_time_s, flash_attention=bool(ctx.flash_attention),
                       knobs=items)
