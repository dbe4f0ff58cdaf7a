"""Exports of a `Plan` to the configs and launch scripts the training frameworks' current releases load.

    from planner.export import export
    result = export(plan, "megatron")          # ExportResult(text=..., warnings=(...))

Targets (one module each) and the framework profile whose release they target (`planner.frameworks`):
`torchtitan` (TorchTitan 0.3.x `--module/--config` script; `torchtitan_version="0.2"` writes 0.2.x's TOML),
`megatron` (Megatron-LM core_v0.19 launch script), `deepspeed` (DeepSpeed 0.19.8 config), `torchrun` and
`slurm` (scripts that start `meshplan run`, the `meshplan` framework). Every export starts with a header
naming the release it targets. A plan is first checked against the target framework's rules: a plan made
for another framework that breaks them is refused with the rule, or re-planned for the target
(`replan=True`); what the target runs differently from how the plan was costed goes to `warnings`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from planner.errors import UserError

if TYPE_CHECKING:
    from planner.frameworks import FrameworkProfile
    from planner.plan import Plan

TARGETS = ("torchtitan", "megatron", "deepspeed", "torchrun", "slurm")
FRAMEWORK_OF = {"torchtitan": "torchtitan", "megatron": "megatron", "deepspeed": "deepspeed", "torchrun": "meshplan",
                "slurm": "meshplan"}
"""The framework profile whose rules an export target must satisfy."""


@dataclass(frozen=True)
class ExportResult:
    """The exported text and what the target cannot express (printed to stderr by the CLI)."""

    target: str
    text: str
    warnings: tuple[str, ...] = field(default=())
    plan: Plan | None = None
    """The plan exported: the input, or the re-planned one (`replan=True`)."""


@dataclass(frozen=True)
class LaunchShape:
    """How the plan's ranks sit on hosts: `nnodes` hosts with `nproc_per_node` ranks each."""

    nnodes: int
    nproc_per_node: int
    gpus_per_node: int


def launch_shape(plan: Plan) -> LaunchShape:
    """Hosts used by the plan's placement; torchrun needs the same number of ranks on each."""
    per_host: dict[int, int] = {}
    for p in plan.placement:
        per_host[p.host] = per_host.get(p.host, 0) + 1
    counts = set(per_host.values())
    if len(counts) != 1:
        raise UserError(
            f"the plan places {sorted(per_host.values())} ranks on its hosts; torchrun needs the same count on each",
            fix="plan for whole hosts (--nodes) or a GPU count that fills hosts evenly",
        )
    groups = plan.inputs.cluster.get("host_groups") or [{}]
    gpn = int(groups[0].get("gpus_per_host", counts.copy().pop()))
    return LaunchShape(nnodes=len(per_host), nproc_per_node=counts.pop(), gpus_per_node=gpn)


def header(plan: Plan, profile: FrameworkProfile, comment: str = "#") -> str:
    """Comment lines naming the framework release the export targets and the plan (model, layout, world size,
    prediction)."""
    p = plan.prediction
    lines = [
        f"meshplan export for {profile.label()} ({profile.pip})",
        f"meshplan plan: {plan.inputs.model.name}, {plan.layout.describe()}",
        f"world size {plan.world_size}; predicted {p.step_time_s:.4g} s/step, {p.tokens_per_s:,.0f} tokens/s, "
        f"MFU {100 * p.mfu:.1f} %",
    ]
    return "".join(f"{comment} {line}\n" for line in lines)


def check_for(plan: Plan, target: str, *, replan: bool = False) -> tuple[Plan, list[str]]:
    """`plan` checked against the rules of `target`'s framework: (plan to export, warnings). A plan that breaks
    them is refused (UserError naming each rule), or re-planned for that framework with `replan`."""
    from planner.frameworks import framework

    profile = framework(FRAMEWORK_OF[target])
    made = "" if plan.framework == profile.name else f" (made for {framework(plan.framework).label()})"
    refused = profile.refusal(plan.layout, plan.inputs.model, plan.inputs.workload, what=f"this plan{made}",
                              otherwise=f"re-plan for it: add --replan, or meshplan replan PLAN.json --framework {profile.name}")
    warnings: list[str] = []
    if refused is not None and replan:
        from planner.replan import replan as replan_plan

        old = plan.layout.describe()
        plan = replan_plan(plan, framework=profile.name)
        warnings.append(f"re-planned for {profile.label()}: {old} -> {plan.layout.describe()}, predicted "
                        f"{plan.prediction.step_time_s:.4g} s/step (write it with --json to keep it)")
    elif refused is not None:
        raise refused
    elif plan.framework != profile.name:
        w = plan.inputs.workload
        if w.runtime not in profile.runs_runtimes or w.overlap_dp_comm != profile.overlap_dp_comm:
            overlap = "" if w.overlap_dp_comm == profile.overlap_dp_comm else ", data-parallel overlap differs"
            warnings.append(f"the plan was made for {framework(plan.framework).label()} and costed with its runtime ({w.runtime}); "
                            f"{profile.label()} runs {profile.runtime}{overlap}: re-plan with --replan for its own "
                            "prediction")
    warnings += profile.notes(plan.layout, plan.inputs.model, plan.inputs.workload)
    return plan, warnings


def export(plan: Plan, target: str, *, replan: bool = False, torchtitan_version: str = "0.3", **options: Any) -> ExportResult:
    """Export `plan` to `target` (see TARGETS) after checking it against that framework's rules (`check_for`);
    options: plan_path, rdzv_host, rdzv_port, job_name, steps, checkpoint_dir, checkpoint_every, max_restarts."""
    if target not in TARGETS:
        raise UserError(f"unknown export target {target!r}", fix=f"use one of {', '.join(TARGETS)}")
    if torchtitan_version not in ("0.2", "0.3"):
        raise UserError(f"TorchTitan version {torchtitan_version!r} is not exported", where="--torchtitan-version",
                        fix="use 0.3 (the --module/--config command line) or 0.2 (the TOML job file)")
    import importlib

    plan, warnings = check_for(plan, target, replan=replan)
    name = "torchtitan_toml" if target == "torchtitan" and torchtitan_version == "0.2" else target
    result = importlib.import_module(f"planner.export.{name}").export(plan, **options)
    return ExportResult(target, result.text, (*warnings, *result.warnings), plan)


__all__ = ["FRAMEWORK_OF", "TARGETS", "ExportResult", "LaunchShape", "check_for", "export", "header", "launch_shape"]
