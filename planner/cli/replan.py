"""`meshplan replan PLAN.json --gpus N`: the best plan for the same model and workload on N GPUs.

meshplan replan plan.json --gpus 4 --json plan4.json     # lost half the machines: plan for the rest
meshplan replan plan.json --nodes 16                     # or grew: 16 hosts of the same shape
meshplan replan plan.json --framework megatron           # same cluster, for Megatron-LM instead

The plan's own inputs are used (model, workload, and its embedded hardware resized: `planner.replan`). A
table shows every knob and prediction, old next to new, changed rows marked; `--json FILE` writes the new
plan. To carry on training from the old run's checkpoints on the new mesh (DCP reshards them):
`meshplan run NEW.json --resume CKPT_DIR`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from planner.cli.app import app, err, out
from planner.cli.options import FRAMEWORK_HELP, FrameworkChoice, emit_json, user_errors
from planner.errors import UserError


@app.command("replan")
def replan_command(
    plan_file: Path = typer.Argument(..., metavar="PLAN.json", help="A plan written by `meshplan plan --json`."),
    gpus: int = typer.Option(None, "--gpus", min=1, help="GPUs in all, on as few hosts as possible."),
    nodes: int = typer.Option(None, "--nodes", min=1, help="Hosts (instead of --gpus)."),
    framework: FrameworkChoice = typer.Option(None, "--framework", help=FRAMEWORK_HELP.replace(
        "(default: meshplan)", "(default: the plan's)")),
    json_out: str = typer.Option(None, "--json", metavar="FILE", help="Write the new plan as JSON ('-' = stdout)."),
    force: bool = typer.Option(False, "--force", help="Overwrite the --json file if it exists."),
) -> None:
    """Re-plan for a smaller or larger world from the plan's own inputs; show what changed."""
    from rich import box
    from rich.table import Table

    from planner.io import check_targets
    from planner.plan import Plan
    from planner.render import print_wide
    from planner.replan import changes, replan

    with user_errors():
        check_targets(json_out, force=force)
        if gpus is not None and nodes is not None:
            raise UserError("give the new size as --gpus N or --nodes N, not both", fix="drop one of them")
        if gpus is None and nodes is None and framework is None:
            raise UserError("give the new size as --gpus N or --nodes N, or a --framework to re-plan for",
                            fix="e.g. --gpus 4")
        old = Plan.load(plan_file)
        new = replan(old, gpus=gpus, nodes=nodes, framework=framework.value if framework else None)
    if emit_json(new.model_dump_json(indent=1), json_out, force=force):
        return
    table = Table(title=f"replan: {old.inputs.model.name}, {old.layout.describe()} -> {new.layout.describe()}",
                  title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("", "old", "new", "changed"):
        table.add_column(name, justify="right" if name in ("old", "new") else "left", no_wrap=True)
    for what, before, after in changes(old, new):
        table.add_row(what, before, after, "*" if before != after else "")
    print_wide(out, table)
    if json_out is not None:
        err.print(f"resume on the new mesh: meshplan run {json_out} --resume CKPT_DIR", markup=False)
