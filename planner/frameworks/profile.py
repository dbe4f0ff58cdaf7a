"""What a framework profile is: the release, runtime costs, exporter and caveats of one training framework.

What a framework can build is not here: its feature sets and its rules are rules of the one rule set
(`planner.layout.framework_rules`, selected by `planner.layout.rules.rules_for(name)`), so the search, `explain`,
`evaluate`, the exports' re-check and the executor all apply the same predicates. A profile reads them:
`features` (the knob values it runs, with their meaning there), `schedules` (the registry's names for it),
`rules` (its own rules), and `breaches` (the rules a plan breaks: `rules.violations`).

A caveat is written with the same `Rule` type but does not refuse: it holds where the framework runs the
layout as it was costed, and where it does not (for example a larger optimizer sharding group) its text goes
into the plan's notes, next to the prediction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planner.errors import UserError
from planner.layout import rules
from planner.layout.framework_rules import FEATURES, Features, runs_schedules
from planner.layout.names import RECOMPUTE_NAMES
from planner.layout.rule import Facts, Rule
from planner.layout.rules import Violation
from planner.layout.schedules import SCHEDULES, name_in

if TYPE_CHECKING:
    from planner.layout import Layout, Workload
    from planner.model import ModelSpec

ALL_FEATURES = Features(recompute={}, zero={}, missing={})
"""Placeholder `features` of "any", which runs everything (see `FrameworkProfile.allowed`)."""


@dataclass(frozen=True)
class FrameworkProfile:
    """One training framework as the planner models it (see the package docstring)."""

    name: str
    title: str
    release: str
    """The release its rules and exporter target, e.g. '0.3.0'."""
    pip: str
    """How to install that release (printed when a check cannot import it)."""
    cp: str
    """The context-parallel implementation ('' when the framework has none)."""
    ep: str
    """How expert-parallel groups are formed ('' when the framework has none)."""
    runtime: str
    """`Workload.runtime` the framework runs by default (what its plans are costed with unless the workload sets
    another: `planner.cost.runtime` holds what each runtime executes beyond the GEMMs)."""
    overlap_dp_comm: bool
    """Whether DP/FSDP collectives overlap with compute (`Workload.overlap_dp_comm`)."""
    fused_elementwise: str
    """How non-GEMM work runs (eager kernels or compiled/fused), as its runtimes cost it."""
    export_target: str
    """`planner.export` target that writes this framework's config."""
    caveats: tuple[Rule, ...] = ()
    """Where the framework runs a layout differently from how it was costed (`Rule.holds` False there)."""
    runtimes: tuple[str, ...] = ()
    """Every `Workload.runtime` the framework can run as (its exporter sets the switch, e.g. TorchTitan's
    --compile.enable); empty: only `runtime`."""
    tp_comm_overlap: bool = False
    """Whether its plans pipeline TP collectives with their GEMMs by default (`Workload.tp_comm_overlap`; the
    exporter writes the framework's switch)."""
    overlap_pp_comm: bool = True
    """Whether interleaved stage-boundary sends overlap compute where the runtime can (`Workload.overlap_pp_comm`)."""
    attention_kernel: str = "auto"
    """The fused attention kernel its model code runs (`Workload.attention_kernel`)."""

    @property
    def runs_runtimes(self) -> tuple[str, ...]:
        """The runtimes the framework runs as, its default first."""
        return (self.runtime, *(r for r in self.runtimes if r != self.runtime)) if self.runtime else ()

    # What it runs: read from the rule set ----------------------------------------------------------
    @property
    def features(self) -> Features:
        return FEATURES.get(self.name, ALL_FEATURES)

    @property
    def schedules(self) -> dict[str, str]:
        """Plan schedule -> what the framework calls it (the registry's `name_in`); absent: it has none."""
        return {n: name_in(SCHEDULES[n], self.name) or "" for n in runs_schedules(self.name)}

    @property
    def rules(self) -> tuple[Rule, ...]:
        """The framework's own rules (beyond the generic ones every framework meets)."""
        return tuple(r for r in rules.rules_for(self.name) if r.frameworks is not None)

    def allowed(self) -> dict[str, tuple[Any, ...]]:
        """The framework's values of the set-valued knobs (`planner.layout.choices.SET_PINS`)."""
        everything = self.name not in FEATURES
        return {"schedule": runs_schedules(self.name),
                "recompute": RECOMPUTE_NAMES if everything else tuple(self.features.recompute),
                "zero": (0, 1, 2, 3) if everything else tuple(self.features.zero)}

    def search_entry(self) -> dict[str, dict[str, Any]]:
        """The profile in the shape of `benchmarks/published_runs.py`'s FRAMEWORKS entries (pins of the feature
        sets, and the workload's runtime costs), so a run made with a current release can name its profile there."""
        features: dict[str, Any] = dict(self.allowed())
        if not self.cp:
            features["cp"] = 1
        if not self.ep:
            features["ep"] = 1
        return {"features": features, "workload": runtime_settings(self)}

    def label(self) -> str:
        return f"{self.title} {self.release}".strip()

    # One layout ---------------------------------------------------------------------------------
    def breaches(self, layout: Layout, model: ModelSpec, workload: Workload) -> list[Violation]:
        """Every rule `layout` breaks under this framework (empty: the framework can build it)."""
        return rules.violations(layout, Facts.of(model, workload), self.name)

    def refusal(self, layout: Layout, model: ModelSpec, workload: Workload, *, what: str = "this plan",
                otherwise: str = "plan for another framework (--framework)") -> UserError | None:
        """The refusal of a layout the framework cannot build ("TorchTitan 0.3.0 cannot run this plan: ...
        [torchtitan.zero]; fix: <each rule's fix>; or <otherwise>"), None when it can build it."""
        found = self.breaches(layout, model, workload)
        if not found:
            return None
        return UserError(f"{self.label()} cannot run {what}: {rules.described(found)}",
                         fix=f"{rules.fixes(found, Facts.of(model, workload))}; or {otherwise}")

    def notes(self, layout: Layout, model: ModelSpec, workload: Workload) -> list[str]:
        """Caveats that apply to `layout`: how the framework runs it differently from how it was costed."""
        found = rules.violations(layout, Facts.of(model, workload), self.name, rules=self.caveats)
        return [f"{self.title}: {text}" for _, text in found]


def runtime_settings(profile: FrameworkProfile) -> dict[str, Any]:
    """The `Workload` fields a framework sets (its runtime costs): runtime, DP/TP/PP overlap, attention kernel."""
    return {"runtime": profile.runtime, "overlap_dp_comm": profile.overlap_dp_comm,
            "tp_comm_overlap": profile.tp_comm_overlap, "overlap_pp_comm": profile.overlap_pp_comm,
            "attention_kernel": profile.attention_kernel}


RUNTIME_FIELDS = ("runtime", "overlap_dp_comm", "tp_comm_overlap", "overlap_pp_comm", "attention_kernel")
"""`Workload` fields that are a framework's runtime costs (`runtime_settings`)."""


def caveat(framework: str, name: str, columns: tuple[str, ...], costed_as_run, says) -> Rule:
    """A caveat of `framework`: `costed_as_run(columns, facts)` is False where it runs the layout differently."""
    return Rule(f"{framework}.{name}", columns, (), costed_as_run, says, "", "a difference from the costing, not a "
                "refusal", frozenset({framework}))


__all__ = ["RUNTIME_FIELDS", "FrameworkProfile", "caveat", "runtime_settings"]
