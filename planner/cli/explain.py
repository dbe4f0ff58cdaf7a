"""`meshplan explain PLAN.json`: why this plan wins, knob by knob.

meshplan explain plan.json
meshplan explain plan.json --json why.json

For every knob (tp, pp, dp, cp, ep, micro-batch, schedule, virtual stages, ZeRO, FSDP group, recompute,
sequence parallelism, mesh order) it shows the best layout with that knob changed, how much slower it is
and the step-time term that grows most, or why no alternative fits. The logic is `planner.explain`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from planner.cli.app import app, err, out
from planner.cli.options import FRAMEWORK_HELP, FrameworkChoice, emit_json, user_errors


@app.command("explain")
def explain_command(
    plan_file: Path = typer.Argument(..., metavar="PLAN.json", help="A plan written by `meshplan plan --json`."),
    framework: FrameworkChoice = typer.Option(None, "--framework", help=FRAMEWORK_HELP.replace(
        "(default: meshplan)", "(default: the plan's)")),
    json_out: str = typer.Option(None, "--json", metavar="FILE", help="Write the explanation as JSON ('-' = stdout)."),
    force: bool = typer.Option(False, "--force", help="Overwrite the --json file if it exists."),
) -> None:
    """Explain why a plan wins: the runner-up for each knob and what it loses where."""
    from rich import box
    from rich.table import Table

    from planner.explain import explain
    from planner.io import check_targets
    from planner.plan import Plan
    from planner.render import band_text, print_wide, seconds

    with user_errors():
        check_targets(json_out, force=force)
        plan = Plan.load(plan_file)
        report = explain(plan, framework=framework.value if framework else None)
    if abs(report.step_time_s - report.stored_step_time_s) > 1e-9 * report.stored_step_time_s:
        err.print(f"warning: the cost model now predicts {report.step_time_s:.4g} s for this layout, the plan file "
                  f"says {report.stored_step_time_s:.4g} s (planned with another meshplan version?); the comparison "
                  "below uses the current model", markup=False)
    if emit_json(report.model_dump_json(indent=1), json_out, force=force):
        return
    table = Table(title=f"why {plan.layout.describe()} ({seconds(report.step_time_s)} s/step)", title_justify="left",
                  box=box.SIMPLE_HEAD)
    for name in ("knob", "plan", "runner-up", "step time", "grows most"):
        table.add_column(name, justify="right" if name == "step time" else "left", no_wrap=True)
    for k in report.knobs:
        ru = k.runner_up
        short = _mesh if k.knob == "mesh_axes" else str
        table.add_row(
            k.knob, short(k.plan_value), short(ru.value) if ru else "-",
            f"{ru.delta_pct:+.1f} %" if ru else "-",
            ru.main_term.removesuffix("_s") if ru and ru.delta_pct > 0 else "-",
        )
    print_wide(out, table)
    for k in report.knobs:
        out.print(f"{k.knob}: {k.verdict}", markup=False)
    band = report.error_band
    if band is not None:
        out.print(f"error band: real step time {band_text(band)} of the prediction ({band.basis})", markup=False)
    for item in report.extrapolations or ("nothing: every knob lies inside the validated runs",):
        out.print(f"extrapolates: {item}", markup=False)


def _mesh(axes: str) -> str:
    """'pp,dp_replicate,dp_shard,cp,tp' -> 'pp>dpr>dps>cp>tp' (outermost first)."""
    return ">".join({"dp_replicate": "dpr", "dp_shard": "dps"}.get(a, a) for a in axes.split(","))
