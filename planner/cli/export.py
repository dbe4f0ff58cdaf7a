"""`meshplan export PLAN.json --to TARGET`: the plan as the config or launch script of the framework release
it targets, optionally loaded by the real framework (`--check`).

meshplan export plan.json --to torchtitan --out train_titan.sh            # TorchTitan 0.3 --module/--config
meshplan export plan.json --to torchtitan --torchtitan-version 0.2 --out job.toml
meshplan export plan.json --to megatron --out train_megatron.sh --check   # Megatron-LM core_v0.19 loads it
meshplan export plan.json --to deepspeed --out ds.json --check --python /opt/ds-env/bin/python
meshplan export plan.json --to torchrun --steps 5000 --checkpoint-dir ckpt   # starts meshplan run
meshplan export plan.json --to slurm --out train.sbatch
meshplan export titan_plan.json --to megatron --replan             # made for another framework: re-plan for it

The plan is first checked against the target framework's rules (planner.frameworks): a plan that breaks one
is refused with the rule (exit 2), or re-planned for the target with --replan. The text goes to stdout or
--out FILE; what the target runs differently from the plan's costing is printed as warnings on stderr.
--check loads the export with the installed framework (this Python's, or --python's) and exits 0 only if it
builds; otherwise one line says why (exit 2). `--json FILE` writes {"target", "text", "warnings", "framework",
"check"} as one JSON document.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

import typer

from planner.cli.app import abort, app, err, out
from planner.cli.options import emit_json, user_errors


class Target(str, Enum):
    torchtitan = "torchtitan"
    megatron = "megatron"
    deepspeed = "deepspeed"
    torchrun = "torchrun"
    slurm = "slurm"


class TitanVersion(str, Enum):
    v0_3 = "0.3"
    v0_2 = "0.2"


_RUN = "meshplan run (torchrun, slurm)"
_CHECK = "Check with the real framework"


@app.command("export")
def export_command(
    plan_file: Path = typer.Argument(..., metavar="PLAN.json", help="A plan written by `meshplan plan --json`."),
    to: Target = typer.Option(..., "--to", help="What to write."),
    out_file: Path = typer.Option(None, "--out", metavar="FILE", help="Write here instead of stdout."),
    replan: bool = typer.Option(False, "--replan", help="Re-plan a plan the target framework cannot run, for it."),
    torchtitan_version: TitanVersion = typer.Option(TitanVersion.v0_3, "--torchtitan-version",
                                                    help="0.3: --module/--config command line; 0.2: TOML job file."),
    check: bool = typer.Option(False, "--check", rich_help_panel=_CHECK,
                               help="Load the export with the installed framework; exit 0 only if it builds."),
    python: str = typer.Option(None, "--python", metavar="PYTHON", rich_help_panel=_CHECK,
                               help="Interpreter of the environment that has the framework. (default: this one)"),
    megatron_lm: str = typer.Option(None, "--megatron-lm", metavar="DIR", rich_help_panel=_CHECK,
                                    help="Megatron-LM core_v0.19.0 checkout: also check the arguments with its parser."),
    rdzv_host: str = typer.Option(None, "--rdzv-host", metavar="HOST",
                                  help="torchrun rendezvous host (first host). (default: $MASTER_ADDR at run time)"),
    rdzv_port: int = typer.Option(29500, "--rdzv-port", min=1, max=65535, help="Rendezvous port."),
    plan_path: str = typer.Option(None, "--plan-path", metavar="PATH", rich_help_panel=_RUN,
                                  help="Plan path the launch lines use. (default: PLAN.json as given)"),
    steps: int = typer.Option(None, "--steps", min=1, rich_help_panel=_RUN, help="Training steps. (default: 1000)"),
    checkpoint_dir: str = typer.Option(None, "--checkpoint-dir", metavar="DIR", rich_help_panel=_RUN,
                                       help="Checkpoint folder. (default: checkpoints)"),
    checkpoint_every: int = typer.Option(None, "--checkpoint-every", min=1, rich_help_panel=_RUN,
                                         help="Save every K steps. (default: 100)"),
    max_restarts: int = typer.Option(None, "--max-restarts", min=0, rich_help_panel=_RUN,
                                     help="Restarts after a failure, resuming from the latest checkpoint. (default: 3)"),
    data: str = typer.Option(None, "--data", metavar="FILE", rich_help_panel=_RUN,
                             help="Token file. (default: synthetic tokens)"),
    json_out: str = typer.Option(None, "--json", metavar="FILE", help="Write target, text, warnings and check as JSON."),
    force: bool = typer.Option(False, "--force", help="Overwrite --out / --json files if they exist."),
) -> None:
    """Export a plan to TorchTitan, Megatron-LM, DeepSpeed, torchrun or SLURM (and check it with the real tool)."""
    from planner.export import export
    from planner.io import check_targets, write_text_atomic
    from planner.plan import Plan

    with user_errors():
        check_targets(out_file, json_out, force=force)  # both or neither, before any work
        plan = Plan.load(plan_file)
        result = export(plan, to.value, replan=replan, torchtitan_version=torchtitan_version.value,
                        plan_path=plan_path or str(plan_file), rdzv_host=rdzv_host, rdzv_port=rdzv_port, steps=steps,
                        checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every, max_restarts=max_restarts,
                        data=data)
        outcome = None
        if check:
            if to is Target.torchtitan and torchtitan_version is TitanVersion.v0_2:
                from planner.errors import UserError

                raise UserError("--check loads TorchTitan 0.3 exports", where="--torchtitan-version 0.2",
                                fix="check the 0.3 export, or load the TOML with TorchTitan 0.2.x yourself")
            from planner.export.check import check_export

            outcome = check_export(result, python=python, megatron_lm=megatron_lm)
    for warning in result.warnings:
        err.print(f"warning: {warning}", markup=False)
    doc = json.dumps({"target": result.target, "text": result.text, "warnings": list(result.warnings),
                      "framework": result.plan.framework if result.plan else None,
                      "check": None if outcome is None else {"ok": outcome.ok, "message": outcome.message}}, indent=1)
    if not emit_json(doc, json_out, force=force):
        if out_file is None:
            out.file.write(result.text)
        else:
            with user_errors():
                write_text_atomic(out_file, result.text, force=force)
            err.print(f"wrote {out_file}", markup=False)
    if outcome is not None:
        if not outcome.ok:
            abort(f"check failed: {outcome.message}")
        err.print(f"check passed: {outcome.message}", markup=False)
