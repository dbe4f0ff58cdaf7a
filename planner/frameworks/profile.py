"""What a framework profile is: feature sets, rules, runtime costs and exporter of one training framework.

A rule is one constraint the framework's release imposes on a layout, written once as a vectorised
predicate over the search table (`planner.cost.evaluate.COLUMNS`), so the same function filters millions of
candidate rows inside the search and checks one plan at export time (`layout_row`). Its text names what the
framework does and the fix; `{dp}`-style fields are filled from the offending row.

A caveat has the same shape but does not refuse: it is a difference between how the framework runs the
layout and how the cost model costed it (for example a larger optimizer sharding group), added to the
plan's notes so the user sees it next to the prediction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.layout.names import RECOMPUTE_NAMES as RECOMPUTE
from planner.layout.schedules import SCHEDULE_NAMES as SCHEDULES
from planner.layout.table import MESH_ORDERS

if TYPE_CHECKING:
    from planner.layout import Layout
    from planner.model import ModelSpec
    from planner.workload import Workload

Table = dict[str, np.ndarray]
Predicate = Callable[[Table, "ModelSpec", "Workload"], np.ndarray]


@dataclass(frozen=True)
class Rule:
    """A constraint of one framework release: rows where `violated` is True cannot be built (or, for a caveat,
    are built differently from how they were costed)."""

    name: str
    """Stable identifier, `<framework>.<what>`: quoted in refusals and tests."""
    text: str
    """What the framework does, with `{field}` placeholders (see `row_fields`)."""
    fix: str
    violated: Predicate


@dataclass(frozen=True)
class Breach:
    """One rule a layout breaks, with its message filled in."""

    rule: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.message} [{self.rule}: {self.fix}]"


@dataclass(frozen=True)
class FrameworkProfile:
    """One training framework as the planner models it (see the package docstring)."""

    name: str
    title: str
    release: str
    """The release its rules and exporter target, e.g. '0.3.0'."""
    pip: str
    """How to install that release (printed when a check cannot import it)."""
    schedules: dict[str, str]
    """Plan schedule -> how the framework runs it (its own name). Absent schedules cannot be run."""
    recompute: dict[str, str]
    """Plan recompute policy -> the framework's setting and what exactly it recomputes."""
    zero: dict[int, str]
    """ZeRO stage -> how the framework shards (absent stages do not exist in it)."""
    unsupported: dict[str, str]
    """'knob=value' -> why the framework cannot run it (for refusals of a pinned value)."""
    cp: str
    """The context-parallel implementation ('' when the framework has none)."""
    ep: str
    """How expert-parallel groups are formed ('' when the framework has none)."""
    mesh_orders: tuple[tuple[str, ...], ...] | None
    """Mesh axis orders the framework can build (outermost first); None: any order."""
    runtime: str
    """`Workload.runtime` the framework's costs correspond to (gradient reduction under PP)."""
    overlap_dp_comm: bool
    """Whether DP/FSDP collectives overlap with compute (`Workload.overlap_dp_comm`)."""
    fused_elementwise: str
    """How non-GEMM work runs (eager kernels or compiled/fused); stated, costed through the calibrated
    per-layer overhead of the GPU profile, the same for every framework today."""
    export_target: str
    """`planner.export` target that writes this framework's config."""
    rules: tuple[Rule, ...] = ()
    caveats: tuple[Rule, ...] = ()
    model_rules: tuple[Callable[[ModelSpec, Workload], str | None], ...] = field(default=())
    """Checks of the model and workload alone; each returns a refusal message or None."""

    # Feature sets as search pins ------------------------------------------------------------------
    def allowed(self) -> dict[str, tuple[Any, ...]]:
        """The framework's allowed values of the set-valued pins (`planner.solver.space.SET_PIN_FIELDS`)."""
        return {"schedule": tuple(self.schedules), "recompute": tuple(self.recompute), "zero": tuple(self.zero)}

    def search_entry(self) -> dict[str, dict[str, Any]]:
        """The profile in the shape of `benchmarks/published_runs.py`'s FRAMEWORKS entries (pins of the feature
        sets, and the workload's runtime costs), so a run made with a current release can name its profile there."""
        features: dict[str, Any] = dict(self.allowed())
        if not self.cp:
            features["cp"] = 1
        if not self.ep:
            features["ep"] = 1
        return {"features": features, "workload": {"overlap_dp_comm": self.overlap_dp_comm, "runtime": self.runtime}}

    def label(self) -> str:
        return f"{self.title} {self.release}".strip()

    # Vectorised checks --------------------------------------------------------------------------
    def feature_violations(self, t: Table) -> np.ndarray:
        """Rows that use a schedule, recompute policy, ZeRO stage or mesh order the framework lacks."""
        bad = ~np.isin(t["zero"], list(self.zero))
        bad |= ~np.isin(t["rc"], [RECOMPUTE.index(r) for r in self.recompute])
        # With one pipeline rank the schedule code is only a label (1f1b); it constrains nothing.
        bad |= (t["pp"] > 1) & ~np.isin(t["sched"], [SCHEDULES.index(s) for s in self.schedules])
        if self.mesh_orders is not None:
            bad |= ~order_allowed(t, self.mesh_orders)
        return bad

    def keep(self, model: ModelSpec, workload: Workload) -> Callable[[Table], np.ndarray]:
        """The search's row filter: True for rows this framework can build."""

        def keep_rows(t: Table) -> np.ndarray:
            bad = self.feature_violations(t)
            for rule in self.rules:
                bad |= rule.violated(t, model, workload)
            return ~bad

        return keep_rows

    # One layout ---------------------------------------------------------------------------------
    def breaches(self, layout: Layout, model: ModelSpec, workload: Workload) -> list[Breach]:
        """Every rule `layout` breaks under this framework (empty: the framework can build it)."""
        out = [Breach(f"{self.name}.model", msg, "plan for another framework (--framework) or model")
               for msg in self.model_problems(model, workload)]
        row = layout_row(layout)
        fields = row_fields(layout, model)
        for knob, value, have in (("schedule", layout.schedule, self.schedules if layout.pp > 1 else None),
                                  ("recompute", layout.recompute, self.recompute), ("zero", layout.zero, self.zero)):
            if have is not None and value not in have:
                why = self.unsupported.get(f"{knob}={value}", f"{self.label()} has no {knob} {value!r}")
                out.append(Breach(f"{self.name}.{knob}", why, f"use {knob} " + " or ".join(map(str, have))))
        if self.mesh_orders is not None and not order_allowed(row, self.mesh_orders)[0]:
            orders = " or ".join(",".join(o) for o in self.mesh_orders)
            out.append(Breach(f"{self.name}.mesh-order",
                              f"{self.label()} builds its ranks in the order {orders}, not "
                              f"{','.join(layout.mesh_axes)}", "plan with --framework to search its orders only"))
        for rule in self.rules:
            if rule.violated(row, model, workload)[0]:
                out.append(Breach(rule.name, rule.text.format(**fields), rule.fix.format(**fields)))
        return out

    def notes(self, layout: Layout, model: ModelSpec, workload: Workload) -> list[str]:
        """Caveats that apply to `layout`: how the framework runs it differently from how it was costed."""
        row, fields = layout_row(layout), row_fields(layout, model)
        return [f"{self.title}: " + c.text.format(**fields) for c in self.caveats if c.violated(row, model, workload)[0]]

    def model_problems(self, model: ModelSpec, workload: Workload) -> list[str]:
        return [m for m in (check(model, workload) for check in self.model_rules) if m]


def order_allowed(t: Table, orders: tuple[tuple[str, ...], ...]) -> np.ndarray:
    """Rows whose mesh order is one of `orders`, or equivalent to one: axes of size 1 do not change the
    rank grid, so an order counts as allowed when the axes larger than 1 come in an allowed relative order."""
    sizes = {"pp": t["pp"], "dp_replicate": t["dp"] // t["dp_shard"], "dp_shard": t["dp_shard"], "cp": t["cp"],
             "tp": t["tp"]}
    ok = np.zeros(len(t["dp"]), dtype=bool)
    for code in np.unique(t["order"]).tolist():
        rows = t["order"] == code
        order = MESH_ORDERS[int(code)]
        for allowed in orders:
            same = np.ones(int(rows.sum()), dtype=bool)
            for i, a in enumerate(order):
                for b in order[i + 1:]:
                    if allowed.index(a) > allowed.index(b):  # a and b swapped: fine only if one has size 1
                        same &= (sizes[a][rows] == 1) | (sizes[b][rows] == 1)
            ok[rows] |= same
    return ok


def layout_row(layout: Layout) -> Table:
    """A one-row table of `layout` (the search's encoding), so rules run on a plan exactly as in the search."""
    from planner.layout.table import layout_to_row

    return layout_to_row(layout)


def row_fields(layout: Layout, model: ModelSpec) -> dict[str, Any]:
    """Values a rule's text may quote."""
    return {"dp": layout.dp, "tp": layout.tp, "pp": layout.pp, "cp": layout.cp, "ep": layout.ep, "zero": layout.zero,
            "dp_shard": layout.dp_shard, "dp_replicate": layout.dp_replicate, "schedule": layout.schedule,
            "recompute": layout.recompute, "experts": model.moe.num_experts if model.moe else 1,
            "order": ",".join(layout.mesh_axes), "mb": layout.micro_batch, "m": layout.num_microbatches}


def dp_outer(t: Table) -> np.ndarray:
    """Rows whose pipeline axis sits inside the data-parallel axes (DP outermost): Megatron's
    tp-cp-ep-pp-dp, the planner's ('dp_replicate', 'dp_shard', 'pp', 'cp', 'tp')."""
    codes = [i for i, o in enumerate(MESH_ORDERS) if o.index("pp") > max(o.index("dp_replicate"), o.index("dp_shard"))]
    return np.isin(t["order"], codes) & (t["pp"] > 1) & (t["dp"] > 1)


def experts(model: ModelSpec) -> int:
    return model.moe.num_experts if model.moe is not None else 1


__all__ = ["Breach", "FrameworkProfile", "Rule", "Table", "dp_outer", "experts", "layout_row", "order_allowed",
           "row_fields"]
