"""torchrun launch script for a plan: `meshplan run` with checkpoints and restarts, on one host or many.

    meshplan run PLAN.json --steps S --checkpoint-dir D --checkpoint-every K --max-restarts R [--data FILE]
        [--nnodes N --node-rank I --rdzv-endpoint HOST:PORT]

`meshplan run` starts torchrun itself (c10d rendezvous; restarts resume from the latest complete
checkpoint), checks the plan against the world it finds and writes metrics next to the prediction. The same
script runs on every host; HOST is the first host (default: MASTER_ADDR there) and each host's index comes
from NODE_RANK.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from planner.export import ExportResult, header, launch_shape
from planner.frameworks.meshplan import PROFILE

if TYPE_CHECKING:
    from planner.plan import Plan

DEFAULT_STEPS = 1000
DEFAULT_CHECKPOINT_EVERY = 100
DEFAULT_MAX_RESTARTS = 3


def command(plan: Plan, plan_path: str, rdzv_endpoint: str | None, *, node_rank: str = '"${NODE_RANK:?set NODE_RANK}"',
            steps: int = DEFAULT_STEPS, checkpoint_dir: str = "checkpoints",
            checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY, max_restarts: int = DEFAULT_MAX_RESTARTS,
            data: str | None = None) -> str:
    """The `meshplan run` line (rdzv_endpoint and node_rank are inserted verbatim: they may hold shell variables)."""
    shape = launch_shape(plan)
    line = (f"meshplan run {shlex.quote(plan_path)} --steps {steps} --checkpoint-dir {shlex.quote(checkpoint_dir)} "
            f"--checkpoint-every {checkpoint_every} --max-restarts {max_restarts}")
    if data:
        line += f" --data {shlex.quote(data)}"
    if shape.nnodes > 1:
        line += (f" --nnodes {shape.nnodes} --nproc {shape.nproc_per_node} --node-rank {node_rank} "
                 f"--rdzv-endpoint {rdzv_endpoint}")
    return line


def run_options(options: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The `meshplan run` options of an export, and the warnings they call for."""
    keys = ("steps", "checkpoint_dir", "checkpoint_every", "max_restarts", "data")
    chosen = {k: options[k] for k in keys if options.get(k) is not None}
    warnings = [] if chosen.get("data") else ["no --data token file: meshplan run trains on synthetic tokens"]
    return chosen, warnings


def export(plan: Plan, *, plan_path: str = "plan.json", rdzv_host: str | None = None, rdzv_port: int = 29500,
           **options: Any) -> ExportResult:
    shape = launch_shape(plan)
    endpoint = (shlex.quote(f"{rdzv_host}:{rdzv_port}") if rdzv_host
                else f'"${{MASTER_ADDR:?set MASTER_ADDR to the first host}}:{rdzv_port}"')
    chosen, warnings = run_options(options)
    text = "#!/usr/bin/env bash\n" + header(plan, PROFILE)
    if shape.nnodes > 1:
        text += f"# Run this same script on each of the {shape.nnodes} hosts, with NODE_RANK = 0..{shape.nnodes - 1}.\n"
    text += "set -euo pipefail\n" + command(plan, plan_path, endpoint, **chosen) + "\n"
    return ExportResult("torchrun", text, tuple(warnings))
