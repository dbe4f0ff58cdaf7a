"""`meshplan plan`: the best layout for a model on a cluster, with its breakdown, memory and the top K.

meshplan plan                                   # llama3-70b on 8 x DGX H100, 4 Mi tokens of 8192
meshplan plan --model llama3-8b --cluster dgx-h100 --nodes 2 --global-batch 256 --tp 4 --top 10
meshplan plan --model tiny --cluster local-cpu --gpus 8 --seq-len 64 --global-batch 16 --json plan.json

Pins (--tp, --pp, --zero, ...) fix knobs; everything else is searched exactly (branch and bound over the
cost model). `--json FILE` writes the best plan (the input of `export`, `explain` and the executor).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import typer

from planner.cli.app import app, out
from planner.cli.options import (
    INPUTS,
    PINS,
    collect_pins,
    emit_json,
    resolve_inputs,
    use_options,
    user_errors,
)

if TYPE_CHECKING:
    from planner.plan import Plan


def plans_from_result(ctx: Any, result: Any, pins: dict[str, Any], *, placed: bool = True) -> list[Plan]:
    """`Plan`s for the rows of an exact-search result, best first (`planner.api.plans_from_result`; `placed=False`
    for plans that are only shown, never written)."""
    from planner import api

    return api.plans_from_result(ctx, result, pins, objective=pins.get("objective", "expected"), placed=placed)


@app.command("plan")
@use_options(INPUTS, PINS)
def plan_command(
    top: int = typer.Option(5, "--top", min=1, help="How many plans to list, best first."),
    json_out: str = typer.Option(None, "--json", metavar="FILE", help="Write the best plan as JSON ('-' = stdout)."),
    force: bool = typer.Option(False, "--force", help="Overwrite the --json file (and --figures files) if they exist."),
    figures: str = typer.Option(None, "--figures", metavar="DIR", help="Also draw the best plan into DIR (created if missing; its parent must exist; see `meshplan show`)."),
    inputs: dict = None,  # type: ignore[assignment]  (filled by use_options)
    pins: dict = None,  # type: ignore[assignment]
) -> None:
    """Find the fastest parallel layout that fits (exact under the cost model) and show why it is fast."""
    from planner.api import search_result
    from planner.figures import check_targets as check_figures
    from planner.io import check_targets
    from planner.render import (
        breakdown_table,
        memory_table,
        print_wide,
        stats_table,
        summary_table,
        top_table,
    )

    with user_errors():
        if figures is not None:  # every output checked before the search, not after it
            check_figures(figures, force=force, others=(json_out,))
        else:
            check_targets(json_out, force=force)
        inp = resolve_inputs(inputs)
        kw = collect_pins(pins)
        start = time.perf_counter()
        ctx, result = search_result(inp.model, inp.cluster, inp.workload, top=top, **kw, **inp.options)
        # The placement (one object per rank) goes only into what is written: the tables never show it.
        plans = plans_from_result(ctx, result, kw, placed=json_out is not None or figures is not None)
        wall_s = time.perf_counter() - start
    best = plans[0]
    if figures is not None:  # figures of the best plan; the comparison spans the same pinned space
        from planner.cli.app import err
        from planner.cli.show import write_figures

        with user_errors():
            for path in write_figures(best, figures, force=force, **kw, **inp.options)["figures"]:
                err.print(f"wrote {path}", markup=False)
    if emit_json(best.model_dump_json(indent=1), json_out, force=force):
        return
    out.print(summary_table(best))
    out.print(breakdown_table(best.prediction))
    out.print(memory_table(best.prediction))
    out.print(stats_table(result.stats, wall_s))
    print_wide(out, top_table(plans))
