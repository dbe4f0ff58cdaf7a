"""`meshplan export PLAN.json --to TARGET`: the plan as another tool's config or launch script.

meshplan export plan.json --to torchtitan --out llama.toml
meshplan export plan.json --to megatron                  # arguments for pretrain_gpt.py, one per line
meshplan export plan.json --to deepspeed --out ds.json
meshplan export plan.json --to torchrun --rdzv-host node001
meshplan export plan.json --to slurm --out train.sbatch

The text goes to stdout or --out FILE; what the target cannot express is printed as warnings on stderr.
`--json FILE` writes {"target", "text", "warnings"} as one JSON document.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

import typer

from planner.cli.app import app, err, out
from planner.cli.options import emit_json, user_errors


class Target(str, Enum):
    torchtitan = "torchtitan"
    megatron = "megatron"
    deepspeed = "deepspeed"
    torchrun = "torchrun"
    slurm = "slurm"


@app.command("export")
def export_command(
    plan_file: Path = typer.Argument(..., metavar="PLAN.json", help="A plan written by `meshplan plan --json`."),
    to: Target = typer.Option(..., "--to", help="What to write."),
    out_file: Path = typer.Option(None, "--out", metavar="FILE", help="Write here instead of stdout."),
    rdzv_host: str = typer.Option(None, "--rdzv-host", metavar="HOST",
                                  help="torchrun rendezvous host (first host). (default: $MASTER_ADDR at run time)"),
    rdzv_port: int = typer.Option(29500, "--rdzv-port", min=1, max=65535, help="Rendezvous port."),
    plan_path: str = typer.Option(None, "--plan-path", metavar="PATH",
                                  help="Plan path the launch lines use. (default: PLAN.json as given)"),
    json_out: str = typer.Option(None, "--json", metavar="FILE", help="Write target, text and warnings as JSON."),
    force: bool = typer.Option(False, "--force", help="Overwrite --out / --json files if they exist."),
) -> None:
    """Export a plan to TorchTitan, Megatron-LM, DeepSpeed, torchrun or SLURM."""
    from planner.export import export
    from planner.io import check_targets, write_text_atomic
    from planner.plan import Plan

    with user_errors():
        check_targets(out_file, json_out, force=force)  # both or neither, before any work
        plan = Plan.load(plan_file)
        result = export(plan, to.value, plan_path=plan_path or str(plan_file), rdzv_host=rdzv_host,
                        rdzv_port=rdzv_port)
    for warning in result.warnings:
        err.print(f"warning: {warning}", markup=False)
    doc = json.dumps({"target": result.target, "text": result.text, "warnings": list(result.warnings)}, indent=1)
    if emit_json(doc, json_out, force=force):
        return
    if out_file is None:
        out.file.write(result.text)
        return
    with user_errors():
        write_text_atomic(out_file, result.text, force=force)
    err.print(f"wrote {out_file}", markup=False)
