"""`meshplan evaluate`: the cost model's prediction for exactly one layout (no search).

meshplan evaluate --model llama3-8b --cluster dgx-h100 --nodes 2 --global-batch 256 --tp 8 --pp 2 --micro-batch 2
meshplan evaluate --tp 8 --pp 4 --schedule interleaved --zero 1 --recompute full --sequence-parallel --json p.json

Knobs not given take the `Layout` defaults (micro_batch 1, schedule 1f1b, zero 0, recompute none, no
sequence parallelism, default mesh order), except those with a single valid value given the others:
dp fills the cluster (GPUs / (tp*pp*cp)), num_microbatches = global batch / (dp * micro_batch), dp_shard = dp
when zero >= 1, virtual_stages = 2 with the interleaved schedule. An invalid layout, or one that does not fit
in memory, is a one-line error naming the stage, the GiB over and the fix (exit 2).
"""

from __future__ import annotations

import typer

from planner.cli.app import app, err, out
from planner.cli.options import (
    INPUTS,
    LIMIT_NAMES,
    PINS,
    collect_pins,
    emit_json,
    layout_from_pins,
    resolve_inputs,
    use_options,
    user_errors,
)


@app.command("evaluate")
@use_options(INPUTS, PINS)
def evaluate_command(
    allow_oom: bool = typer.Option(False, "--allow-oom", help="Report a layout that does not fit instead of failing."),
    json_out: str = typer.Option(None, "--json", metavar="FILE", help="Write the plan as JSON ('-' = stdout)."),
    force: bool = typer.Option(False, "--force", help="Overwrite the --json file if it exists."),
    inputs: dict = None,  # type: ignore[assignment]  (filled by use_options)
    pins: dict = None,  # type: ignore[assignment]
) -> None:
    """Predict step time, throughput, MFU and memory of one fully specified layout."""
    from planner.api import evaluate
    from planner.io import check_targets
    from planner.render import breakdown_table, memory_table, summary_table

    with user_errors():
        check_targets(json_out, force=force)
        inp = resolve_inputs(inputs)
        values = collect_pins(pins)
        layout = layout_from_pins(values, inp)
        plan = evaluate(inp.model, inp.cluster, inp.workload, layout, allow_oom=allow_oom, **inp.options)
    ignored = [f"--{k.replace('_', '-')}" for k in LIMIT_NAMES if k in values]
    if ignored:  # after the work: a refused command prints its one error line and nothing else
        err.print(f"warning: {', '.join(ignored)} only bound the search; evaluate ignores them", markup=False)
    if emit_json(plan.model_dump_json(indent=1), json_out, force=force):
        return
    out.print(summary_table(plan, title=f"evaluate: {inp.model.name} on {inp.cluster.num_gpus} GPUs"))
    out.print(breakdown_table(plan.prediction))
    out.print(memory_table(plan.prediction))
    if not all(s.fits for s in plan.prediction.memory_per_stage):
        err.print("warning: this layout does not fit in GPU memory (see the 'fits' column)", markup=False)
