"""Checks of a plan file against itself, run by `Plan.load` after pydantic's per-field rules.

A plan is a file users copy, edit and carry between clusters. Pydantic checks each part's shape; these
checks catch parts that disagree with each other, which is what a plan made for another cluster (or another
world size), or edited by hand after planning, looks like:

- `inputs.cluster` is a valid resolved cluster (`hardware_profiles.Cluster`; the schema stores it as plain
  JSON so a plan stays readable when the profile files change);
- the layout's ranks (dp*tp*pp*cp) fit on that cluster, and `prediction.idle_gpus` is the rest of it;
- `placement` lists ranks 0..W-1 in order, each on a distinct (host, GPU) of the cluster;
- one `prediction.memory_per_stage` entry per pipeline rank;
- the layout meets the rule set (`planner.layout.rules`, the generic rules: a plan may be made for any
  framework) for the embedded model, workload and cluster: heads % tp, global batch = dp x micro_batch x
  num_microbatches, ... The executor adds its own framework's rules (`executor.train.check_plan`).

Light on purpose: `Plan.load` runs in every executor rank, so this module imports no solver or cost model.

Each failure is a one-line `UserError` naming the file and field, what disagrees, and the fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import ValidationError

from planner.errors import UserError
from planner.layout import rules
from planner.layout.names import ANY_FRAMEWORK

if TYPE_CHECKING:
    from planner.plan import Plan

REPLAN = "re-plan for this cluster (`meshplan plan`, or `meshplan replan PLAN.json --gpus N`)"


def check_plan_file(plan: Plan, where: str) -> None:
    """Raise a one-line `UserError` if the parts of `plan` (read from `where`) disagree."""
    import hardware_profiles

    try:
        cluster = hardware_profiles.Cluster.model_validate(plan.inputs.cluster)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        field = "inputs.cluster" + (f".{loc}" if loc else "")
        bad = first.get("input")
        shown = "{...}" if isinstance(bad, dict) else repr(bad)[:60]
        msg = str(first.get("msg", "")).removeprefix("Value error, ")
        raise UserError(f"field '{field}' = {shown}: {msg}", where=where,
                        fix="regenerate the plan; inputs.cluster is written by the planner") from None
    gpus, world, lay = cluster.num_gpus, plan.layout.world_size, plan.layout
    if world > gpus:
        raise UserError(
            f"the layout needs {world} ranks (dp{lay.dp} x tp{lay.tp} x pp{lay.pp} x cp{lay.cp}) but the plan's "
            f"cluster {cluster.name!r} has {gpus} GPUs: a plan made for another cluster?", where=f"{where}: layout",
            fix=REPLAN)
    if plan.prediction.idle_gpus != gpus - world:
        raise UserError(
            f"prediction.idle_gpus={plan.prediction.idle_gpus} but the cluster's {gpus} GPUs minus the layout's "
            f"{world} ranks leave {gpus - world}: the layout or inputs.cluster was edited after planning",
            where=f"{where}: prediction.idle_gpus", fix=REPLAN)
    seen: set[tuple[int, int]] = set()
    for i, p in enumerate(plan.placement):
        field = f"{where}: placement.{i}"
        if p.rank != i:
            raise UserError(f"rank={p.rank}, expected {i} (one entry per rank, in rank order)", where=field,
                            fix=REPLAN)
        if p.host >= cluster.num_nodes or p.gpu >= cluster.gpus_per_node:
            raise UserError(f"host={p.host}, gpu={p.gpu} is not in the plan's cluster ({cluster.num_nodes} hosts x "
                            f"{cluster.gpus_per_node} GPUs)", where=field, fix=REPLAN)
        if (p.host, p.gpu) in seen:
            raise UserError(f"host={p.host}, gpu={p.gpu} is already taken by another rank", where=field, fix=REPLAN)
        seen.add((p.host, p.gpu))
    stages = len(plan.prediction.memory_per_stage)
    if stages != lay.pp:
        raise UserError(f"{stages} entries for pp={lay.pp} pipeline ranks", where=f"{where}: prediction.memory_per_stage",
                        fix="regenerate the plan (`meshplan evaluate` with its layout)")
    try:
        rules.check(lay, plan.inputs.model, plan.inputs.workload, gpus, framework=ANY_FRAMEWORK)
    except UserError as exc:
        raise UserError(str(exc), where=f"{where}: layout vs inputs.model/inputs.workload",
                        fix="re-plan (`meshplan evaluate` or `meshplan plan`) for this model and workload") from None
