"""torchrun launch line for a plan: `--standalone` on one host, c10d rendezvous across many.

    torchrun --nnodes N --nproc-per-node G --rdzv-backend c10d --rdzv-endpoint HOST:PORT -m executor PLAN.json

The same line runs on every host; HOST is the first host (default: the MASTER_ADDR environment variable
there). The rendezvous store listens on HOST:PORT; c10d assigns node ranks in join order, which is fine for
identical hosts (the plan's placement is by host index).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from planner.export import ExportResult, header, launch_shape

if TYPE_CHECKING:
    from planner.plan import Plan


def command(plan: Plan, plan_path: str, rdzv_endpoint: str | None, rdzv_id: str = "meshplan") -> str:
    """The torchrun command (rdzv_endpoint is inserted verbatim, so it may hold a shell variable)."""
    shape = launch_shape(plan)
    if shape.nnodes == 1:
        return (f"torchrun --standalone --nnodes 1 --nproc-per-node {shape.nproc_per_node} "
                f"-m executor {shlex.quote(plan_path)}")
    return (f"torchrun --nnodes {shape.nnodes} --nproc-per-node {shape.nproc_per_node} --rdzv-backend c10d "
            f"--rdzv-endpoint {rdzv_endpoint} --rdzv-id {rdzv_id} -m executor {shlex.quote(plan_path)}")


def export(plan: Plan, *, plan_path: str = "plan.json", rdzv_host: str | None = None, rdzv_port: int = 29500,
           **_: Any) -> ExportResult:
    shape = launch_shape(plan)
    endpoint = (shlex.quote(f"{rdzv_host}:{rdzv_port}") if rdzv_host
                else f'"${{MASTER_ADDR:?set MASTER_ADDR to the first host}}:{rdzv_port}"')
    text = "#!/usr/bin/env bash\n" + header(plan)
    if shape.nnodes > 1:
        text += f"# Run this same line on each of the {shape.nnodes} hosts.\n"
    text += "set -euo pipefail\n" + command(plan, plan_path, endpoint) + "\n"
    return ExportResult("torchrun", text)
