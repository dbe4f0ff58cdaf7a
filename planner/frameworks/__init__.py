"""Training frameworks as declared profiles: what each can build, what its runtime costs, how it is exported.

    from planner.frameworks import framework, NAMES
    titan = framework("torchtitan")
    titan.breaches(plan.layout, plan.inputs.model, plan.inputs.workload)   # [] when TorchTitan can build it

One profile per framework (`meshplan` = meshplan's own executor, the default; `torchtitan`; `megatron`;
`deepspeed`), each in its own module with the release it targets and the source lines its rules come from.
What a framework can build is part of the one rule set: its feature sets (schedules, recompute policies with
their exact semantics there, ZeRO stages, mesh orders) and its rules are `Rule(frameworks={name})` entries of
`planner.layout.framework_rules`, selected by `planner.layout.rules.rules_for(name)`, so the search
(`planner.search(..., framework=X)` never returns a layout X cannot build), `explain`, `evaluate`, the
exports' re-check (`meshplan export --to X` refuses a plan X cannot build, naming the rule) and the executor
apply the same predicates. A profile adds:
- caveats: differences between how X runs a layout and how it was costed, added to the plan's notes;
- runtime costs: the `Workload.runtime` and `Workload.overlap_dp_comm` that match how X reduces gradients;
- the exporter (`planner.export` target) and the pip line of the release the export targets.
"""

from __future__ import annotations

from planner.errors import UserError
from planner.frameworks import deepspeed, megatron, meshplan, torchtitan, unrestricted
from planner.frameworks.profile import RUNTIME_FIELDS, FrameworkProfile, runtime_settings
from planner.layout.names import DEFAULT_FRAMEWORK, FRAMEWORK_NAMES, TP_OVERLAP_RUNTIMES
from planner.layout.workload import Workload

PROFILES: dict[str, FrameworkProfile] = {p.name: p for p in (meshplan.PROFILE, torchtitan.PROFILE, megatron.PROFILE,
                                                              deepspeed.PROFILE, unrestricted.PROFILE)}
"""A profile per framework name, plus "any" (`planner.frameworks.unrestricted`: no rules, for what-if studies)."""
NAMES: tuple[str, ...] = FRAMEWORK_NAMES
"""The frameworks a user plans for (`--framework`; `planner.layout.names`)."""
DEFAULT = DEFAULT_FRAMEWORK
assert set(PROFILES) == {*NAMES, unrestricted.PROFILE.name}, "a profile for every framework name"


def framework(name: str | FrameworkProfile | None) -> FrameworkProfile:
    """The profile named `name` (None: the default, meshplan's executor)."""
    if isinstance(name, FrameworkProfile):
        return name
    try:
        return PROFILES[name or DEFAULT]
    except KeyError:
        raise UserError(f"unknown framework {name!r}", where="--framework", fix=f"use one of {', '.join(NAMES)}") from None


def workload_for(profile: FrameworkProfile, workload: Workload) -> Workload:
    """The workload with the framework's runtime costs (`profile.runtime_settings`), except where the user set
    them explicitly (a what-if: `Workload(runtime=...)`, `--runtime`, `--no-dp-overlap`, `--tp-comm-overlap` win
    over the framework's own). A framework's TP-communication overlap applies only on a runtime that has it
    (an explicit eager runtime under Megatron drops it rather than failing)."""
    if not profile.runtime:  # "any": no runtime of its own
        return workload
    update = {k: v for k, v in runtime_settings(profile).items() if k not in workload.model_fields_set}
    if update.get("tp_comm_overlap") and update.get("runtime", workload.runtime) not in TP_OVERLAP_RUNTIMES:
        del update["tp_comm_overlap"]
    return Workload.model_validate({**workload.model_dump(exclude_unset=True), **update}) if update else workload


def without_runtime(workload: Workload) -> Workload:
    """The workload with its runtime costs unset, so the next framework's apply (re-planning a plan made for
    another framework, whose recorded runtime was that framework's)."""
    return Workload(**workload.model_dump(exclude=set(RUNTIME_FIELDS)))


__all__ = ["DEFAULT", "NAMES", "PROFILES", "FrameworkProfile", "framework", "without_runtime", "workload_for"]
