"""`meshplan compare`: several layouts side by side (plan files, --layout strings, the top K of a search).

meshplan compare a.json b.json
meshplan compare --model llama3-8b --cluster dgx-h100 --nodes 2 --layout tp=8,pp=2 --layout tp=4,zero=3 --top 3
meshplan compare --top 10 --csv top10.csv

Plan files are shown with their stored predictions. `--layout` strings (keys: Layout fields or mb, m, v, sp,
rc, mesh=pp/dp_replicate/dp_shard/cp/tp) are planned against the input options, or, when none is given,
against the first plan file's inputs: the knobs the string (and the pin options) state are held, every other
knob is searched, and the row is the best plan so constrained; the `searched` column names the knobs that
were searched. When no setting of them fits in memory, the row is the stated layout with `meshplan
evaluate`'s defaults, fits = NO. With no plan file and no --layout, the top 5 of a search are compared. `--csv FILE` writes the table; `--json FILE` the same rows.
The table shows MFU as a percentage (like every human-readable output); CSV and JSON keep the fraction of
plan files (`prediction.mfu`, 0..1).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from planner.cli.app import app, err, out
from planner.cli.options import (
    INPUTS,
    LIMIT_NAMES,
    PINS,
    collect_pins,
    emit_json,
    given,
    inputs_of_plan,
    layout_from_pins,
    parse_layout_string,
    resolve_inputs,
    use_options,
    user_errors,
)

if TYPE_CHECKING:
    from planner.plan import Plan

BREAKDOWN_COLUMNS = ("compute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s", "dp_comm_s", "bubble_s",
                     "optimizer_s")
GiB = 2**30
SHORT_NAMES = {"compute_s": "compute s", "tp_comm_s": "tp s", "cp_comm_s": "cp s", "ep_comm_s": "ep s",
               "pp_comm_s": "pp s", "dp_comm_s": "dp s", "bubble_s": "bubble s", "optimizer_s": "optim s",
               "step_time_s": "step s", "tokens_per_s": "tokens/s", "mfu": "MFU %", "peak_memory_gib": "peak GiB",
               "error_band_low": "band lo", "error_band_high": "band hi", "extrapolations": "extrapolates"}
"""Column headers of the rendered table (the CSV and JSON keep the full names, and MFU as a fraction)."""


def plan_row(source: str, plan: Plan, searched: str = "-") -> dict[str, Any]:
    """One comparison row: which knobs were searched, breakdown seconds, step time, tokens/s, MFU, peak memory
    (GiB), fits."""
    pred = plan.prediction
    row: dict[str, Any] = {"source": source, "layout": plan.layout.describe(), "searched": searched,
                           "gpus": plan.world_size + pred.idle_gpus}
    row.update({name: getattr(pred.breakdown, name) for name in BREAKDOWN_COLUMNS})
    row.update({
        "step_time_s": pred.step_time_s,
        "tokens_per_s": pred.tokens_per_s,
        "mfu": pred.mfu,
        "peak_memory_gib": pred.peak_memory_bytes / GiB,
        "fits": all(s.fits for s in pred.memory_per_stage),
        "error_band_low": pred.error_band.low if pred.error_band else float("nan"),
        "error_band_high": pred.error_band.high if pred.error_band else float("nan"),
        "extrapolations": "; ".join(pred.extrapolations),
    })
    return row


def knob_names(knobs: list[str]) -> str:
    """'mb,m,schedule,v,zero,dp_shard,rc,sp,mesh': the --layout spelling of knobs, in Layout field order."""
    from planner.cli.options import SHORT_KNOBS

    return ",".join(SHORT_KNOBS.get(k, k) for k in knobs) or "-"


def best_for_layout(stated: dict[str, Any], inp: Any) -> tuple[Plan, str]:
    """The best plan with the stated knobs (the --layout string and the pin options) held and every other knob
    searched, and the searched knobs' names (`planner.solver.space.PIN_FIELDS` order). When no setting of the other knobs fits in memory, the stated
    layout with `meshplan evaluate`'s defaults, marked fits = NO (a layout that breaks a rule is an error).
    For a table row: the searched plan is built without its placement (`planner.api.build_plan`)."""
    from planner import api
    from planner.errors import InfeasibleError
    from planner.solver.space import PIN_FIELDS

    fixed = {k: v for k, v in stated.items() if k not in LIMIT_NAMES}
    try:
        ctx, result = api.search_result(inp.model, inp.cluster, inp.workload, top=1, **stated, **inp.options)
        (plan,) = api.plans_from_result(ctx, result, stated, placed=False)  # a table row: no placement
    except InfeasibleError:
        layout = layout_from_pins(fixed, inp)  # raises for a layout no setting makes valid
        plan = api.evaluate(inp.model, inp.cluster, inp.workload, layout, allow_oom=True, **inp.options)
        return plan, "none fits: defaults"
    return plan, knob_names([k for k in PIN_FIELDS if k not in fixed])


def comparison_frame(rows: list[dict[str, Any]]):
    """The rows as a DataFrame, in the order given (a `pandas.DataFrame`)."""
    import pandas as pd

    return pd.DataFrame(rows, columns=list(rows[0]))


@app.command("compare")
@use_options(INPUTS, PINS)
def compare_command(
    plan_files: list[Path] = typer.Argument(None, metavar="[PLAN.json]...", help="Plan files to compare.",
                                            show_default=False),
    layouts: list[str] = typer.Option(None, "--layout", metavar="K=V,...",
                                      help="A layout to evaluate, e.g. dp=8,tp=8,pp=2,mb=1 (repeatable).",
                                      show_default=False),
    top: int = typer.Option(None, "--top", min=1, show_default=False,
                            help="Add the K best plans of a search. (default: 5 when nothing else is given)"),
    csv_out: str = typer.Option(None, "--csv", metavar="FILE", help="Write the table as CSV ('-' = stdout; mfu as a fraction 0..1, as in plan files)."),
    json_out: str = typer.Option(None, "--json", metavar="FILE", help="Write the rows as a JSON list ('-' = stdout)."),
    force: bool = typer.Option(False, "--force", help="Overwrite --csv/--json files if they exist."),
    inputs: dict = None,  # type: ignore[assignment]  (filled by use_options)
    pins: dict = None,  # type: ignore[assignment]
) -> None:
    """Compare layouts side by side: breakdown, step time, tokens/s, MFU, peak memory, fits."""
    from planner import api
    from planner.io import check_targets
    from planner.plan import Plan
    from planner.render import dataframe_table, print_wide

    plan_files, layouts = plan_files or [], layouts or []
    if not plan_files and not layouts and top is None:
        top = 5
    rows: list[dict[str, Any]] = []
    with user_errors():
        check_targets(csv_out, json_out, force=force)  # both or neither, before any work
        plans = [Plan.load(p) for p in plan_files]
        rows += [plan_row(str(p), plan) for p, plan in zip(plan_files, plans)]
        values = collect_pins(pins)
        if layouts or top:
            inp = inputs_of_plan(plans[0]) if plans and not given(inputs) else resolve_inputs(inputs)
        for i, text in enumerate(layouts, 1):
            plan, searched = best_for_layout({**values, **parse_layout_string(text)}, inp)
            rows.append(plan_row(f"--layout {i}", plan, searched))
        if top:
            from planner.cli.plan import plans_from_result

            ctx, result = api.search_result(inp.model, inp.cluster, inp.workload, top=top, **values, **inp.options)
            from planner.solver.space import PIN_FIELDS

            searched = knob_names([k for k in PIN_FIELDS if k not in values])
            found = plans_from_result(ctx, result, values, placed=False)  # table rows: no placement
            rows += [plan_row(f"search #{i}", p, searched) for i, p in enumerate(found, 1)]
    frame = comparison_frame(rows)
    if csv_out is not None:
        _write_csv(frame, csv_out, force)
        if csv_out == "-":
            return
    if emit_json(json.dumps(frame.to_dict(orient="records"), indent=1), json_out, force=force):
        return
    shown = frame.drop(columns=[c for c in BREAKDOWN_COLUMNS if c != "compute_s" and not frame[c].any()])
    shown = shown.assign(mfu=shown["mfu"] * 100)  # a percentage, as everywhere in human output
    print_wide(out, dataframe_table(shown.rename(columns=SHORT_NAMES), title="comparison (exposed seconds per step)",
                                    formats={"tokens/s": ",.0f", "MFU %": ".1f", "peak GiB": ".1f", "band lo": "+.1%",
                                             "band hi": "+.1%"}))
    if not frame["fits"].all():
        err.print("warning: some layouts do not fit in GPU memory (fits = NO)", markup=False)


def _write_csv(frame: Any, target: str, force: bool) -> None:
    from planner.io import write_text_atomic

    with user_errors():
        write_text_atomic(target, frame.to_csv(index=False), force=force)
    if target != "-":
        err.print(f"wrote {target}", markup=False)
