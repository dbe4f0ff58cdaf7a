"""SLURM batch script for a plan: one task per node, each running torchrun with the head node as rendezvous.

    sbatch train.sbatch        # from `meshplan export plan.json --to slurm --out train.sbatch`
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from planner.export import ExportResult, header, launch_shape

if TYPE_CHECKING:
    from planner.plan import Plan


def export(plan: Plan, *, plan_path: str = "plan.json", rdzv_port: int = 29500, job_name: str | None = None,
           **_: Any) -> ExportResult:
    shape = launch_shape(plan)
    cpu = all(g.get("vendor") == "cpu" for g in plan.inputs.cluster.get("gpus", {}).values())
    name = job_name or f"meshplan-{plan.inputs.model.name}"
    lines = ["#!/bin/bash", f"#SBATCH --job-name={name}", f"#SBATCH --nodes={shape.nnodes}",
             "#SBATCH --ntasks-per-node=1"]
    warnings = []
    if cpu:
        warnings.append("CPU cluster: no --gpus-per-node line (each torchrun starts gloo processes)")
    else:
        lines.append(f"#SBATCH --gpus-per-node={shape.nproc_per_node}")
    lines.append("#SBATCH --exclusive")
    text = "\n".join(lines) + "\n" + header(plan) + (
        "set -euo pipefail\n"
        "# The first node of the allocation hosts the c10d rendezvous.\n"
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
        f"srun torchrun --nnodes {shape.nnodes} --nproc-per-node {shape.nproc_per_node} --rdzv-backend c10d "
        f'--rdzv-endpoint "$head_node:{rdzv_port}" --rdzv-id "$SLURM_JOB_ID" -m executor {shlex.quote(plan_path)}\n'
    )
    return ExportResult("slurm", text, tuple(warnings))
