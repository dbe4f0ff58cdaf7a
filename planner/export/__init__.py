"""Exports of a `Plan` to the configs and launch lines other tools read.

    from planner.export import export
    result = export(plan, "megatron")          # ExportResult(text=..., warnings=(...))

Targets (one module each): `torchtitan` (TOML job config), `megatron` (Megatron-LM arguments), `deepspeed`
(JSON config), `torchrun` (launch line for one host or many), `slurm` (sbatch script). Each states what it
cannot express in `warnings` rather than silently changing the layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from planner.errors import UserError

if TYPE_CHECKING:
    from planner.plan import Plan

TARGETS = ("torchtitan", "megatron", "deepspeed", "torchrun", "slurm")


@dataclass(frozen=True)
class ExportResult:
    """The exported text and what the target cannot express (printed to stderr by the CLI)."""

    target: str
    text: str
    warnings: tuple[str, ...] = field(default=())


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


def header(plan: Plan, comment: str = "#") -> str:
    """Comment lines naming the plan (model, layout, world size, prediction)."""
    p = plan.prediction
    lines = [
        f"meshplan plan: {plan.inputs.model.name}, {plan.layout.describe()}",
        f"world size {plan.world_size}; predicted {p.step_time_s:.4g} s/step, {p.tokens_per_s:,.0f} tokens/s, "
        f"MFU {100 * p.mfu:.1f} %",
    ]
    return "".join(f"{comment} {line}\n" for line in lines)


def export(plan: Plan, target: str, **options: Any) -> ExportResult:
    """Export `plan` to `target` (see TARGETS); options: plan_path, rdzv_host, rdzv_port, job_name."""
    if target not in TARGETS:
        raise UserError(f"unknown export target {target!r}", fix=f"use one of {', '.join(TARGETS)}")
    import importlib

    module = importlib.import_module(f"planner.export.{target}")
    return module.export(plan, **options)


__all__ = ["TARGETS", "ExportResult", "LaunchShape", "export", "header", "launch_shape"]
