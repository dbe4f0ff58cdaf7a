"""SLURM batch script for a plan: one task per node, each running `meshplan run` with the head node as
rendezvous, checkpoints and restarts (see planner.export.torchrun).

    sbatch train.sbatch        # from `meshplan export plan.json --to slurm --out train.sbatch`
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from planner.export import ExportResult, header, launch_shape
from planner.export.torchrun import command, run_options
from planner.frameworks.meshplan import PROFILE

if TYPE_CHECKING:
    from planner.plan import Plan


def export(plan: Plan, *, plan_path: str = "plan.json", rdzv_port: int = 29500, job_name: str | None = None,
           **options: Any) -> ExportResult:
    shape = launch_shape(plan)
    cpu = all(g.get("vendor") == "cpu" for g in plan.inputs.cluster.get("gpus", {}).values())
    name = job_name or f"meshplan-{plan.inputs.model.name}"
    lines = ["#!/bin/bash", f"#SBATCH --job-name={name}", f"#SBATCH --nodes={shape.nnodes}",
             "#SBATCH --ntasks-per-node=1"]
    chosen, warnings = run_options(options)
    if cpu:
        warnings.append("CPU cluster: no --gpus-per-node line (each host starts gloo processes)")
    else:
        lines.append(f"#SBATCH --gpus-per-node={shape.nproc_per_node}")
    lines.append("#SBATCH --exclusive")
    run = command(plan, plan_path, f'"$head_node:{rdzv_port}"', node_rank='"$SLURM_NODEID"', **chosen)
    text = "\n".join(lines) + "\n" + header(plan, PROFILE) + (
        "set -euo pipefail\n"
        "# The first node of the allocation hosts the c10d rendezvous; each task passes its node index.\n"
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
        f"srun bash -c {_single_quote(run)}\n"
    )
    return ExportResult("slurm", text, tuple(warnings))


def _single_quote(text: str) -> str:
    """`text` in single quotes for `bash -c` (the variables expand inside each task, not in the batch shell)."""
    return "'" + text.replace("'", "'\\''") + "'"
