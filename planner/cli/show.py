"""`meshplan show PLAN.json --figures DIR`: draw a plan (mesh, pipeline schedule, memory, comparison).

meshplan show plan.json --figures figs/                 # figs/{mesh,schedule,memory,pareto}.{png,svg}
meshplan show plan.json --figures figs/ --no-compare    # skip the search behind the comparison figure
meshplan show plan.json --figures figs/ --json -        # the written paths and drawn numbers as JSON

The comparison figure needs every feasible layout of the plan's model, cluster and workload; `show` searches
that space again (unpinned: a plan file does not record the pins it was made with), so the plan may show as
dominated when it was planned under pins. Existing files are kept unless --force. Paths go to stdout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from planner.cli.app import app, err, out
from planner.cli.options import emit_json, user_errors


def write_figures(plan: Any, out_dir: Path | str, *, force: bool, compare: bool = True, **search_options: Any) -> dict[str, Any]:
    """Write all figures of `plan` into `out_dir`; returns {"figures": [...paths], ...drawn numbers}.

    `search_options` (pins and cost-model options, as `planner.api.search_result` takes them) define the space
    of the comparison figure. Shared by `meshplan show` and `meshplan plan --figures`.
    """
    from planner.figures import FIGURES, check_targets, write_all
    from planner.figures.pareto import feasible_table

    check_targets(out_dir, FIGURES if compare else FIGURES[:3], force=force)  # before the search, not after
    table = None
    if compare:
        err.print("searching every feasible layout for the comparison figure ...", markup=False)
        table = feasible_table(plan, **search_options)
    paths = write_all(plan, out_dir, search=table, force=force)
    return {"figures": [str(p) for p in paths], "bubble_fraction": plan.prediction.bubble_fraction,
            "peak_memory_bytes": plan.prediction.peak_memory_bytes,
            "feasible_layouts": None if table is None else int(len(table["peak"]))}


@app.command("show")
def show_command(
    plan_file: Path = typer.Argument(..., metavar="PLAN.json", help="A plan written by `meshplan plan --json`."),
    figures: Path = typer.Option(..., "--figures", metavar="DIR", help="Folder for the figures (PNG and SVG); created if missing, its parent must exist."),
    compare: bool = typer.Option(True, "--compare/--no-compare", help="Also draw step time vs memory of every feasible layout."),
    json_out: str = typer.Option(None, "--json", metavar="FILE", help="Write the paths and drawn numbers as JSON ('-' = stdout)."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing figure (and --json) files."),
) -> None:
    """Draw a plan: device mesh on the topology, pipeline schedule, memory per stage, step time vs memory."""
    from planner.figures import FIGURES
    from planner.figures import check_targets as check_figures
    from planner.plan import Plan

    with user_errors():
        check_figures(figures, FIGURES if compare else FIGURES[:3], force=force, others=(json_out,))
        plan = Plan.load(plan_file)
        report = write_figures(plan, figures, force=force, compare=compare)
    if emit_json(json.dumps(report, indent=1), json_out, force=force):
        return
    for p in report["figures"]:
        out.print(p, markup=False)
