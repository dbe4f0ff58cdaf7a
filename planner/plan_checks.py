"""Checks of a plan file against itself, run by `Plan.load` after pydantic's per-field rules.

A plan is a file users copy, edit and carry between clusters. Pydantic checks each part's shape; these
checks catch parts that disagree with each other, which is what a plan made for another cluster (or another
world size), or edited by hand after planning, looks like:

- `inputs.cluster` is a valid resolved cluster (`hardware_profiles.Cluster`; the schema stores it as plain
  JSON so a plan stays readable when the profile files change);
- the layout's ranks (dp*tp*pp*cp) fit on that cluster, and `prediction.idle_gpus` is the rest of it;
- `placement` lists ranks 0..W-1 in order, each on a distinct (host, GPU) of the cluster;
- one `prediction.memory_per_stage` entry per pipeline rank;
- the layout is valid for the embedded model and workload (`check_against_model`: heads % tp, global
  batch = dp x micro_batch x num_microbatches, ...; also what `planner.api.evaluate` checks).

Light on purpose: `Plan.load` runs in every executor rank, so this module imports no solver or cost model.

Each failure is a one-line `UserError` naming the file and field, what disagrees, and the fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import ValidationError

from planner.errors import UserError

if TYPE_CHECKING:
    from planner.layout import Layout
    from planner.model import ModelSpec
    from planner.plan import Plan
    from planner.workload import Workload

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
        check_against_model(lay, plan.inputs.model, plan.inputs.workload, gpus)
    except UserError as exc:
        raise UserError(str(exc), where=f"{where}: layout vs inputs.model/inputs.workload",
                        fix="re-plan (`meshplan evaluate` or `meshplan plan`) for this model and workload") from None


def check_against_model(layout: Layout, model: ModelSpec, workload: Workload, num_gpus: int) -> None:
    """Model- and cluster-dependent validity; raises UserError naming the knob and the fix."""
    problems = []
    if layout.world_size > num_gpus:
        problems.append(f"dp*tp*pp*cp={layout.world_size} exceeds the cluster's {num_gpus} GPUs")
    if model.num_heads % layout.tp:
        problems.append(f"num_heads={model.num_heads} is not divisible by tp={layout.tp}")
    if model.num_kv_heads % layout.tp and layout.tp % model.num_kv_heads:
        problems.append(f"num_kv_heads={model.num_kv_heads} neither divides nor is divisible by tp={layout.tp}")
    if model.ffn_hidden_size % layout.tp:
        problems.append(f"ffn_hidden_size={model.ffn_hidden_size} is not divisible by tp={layout.tp}")
    if layout.cp > 1 and workload.seq_len % (2 * layout.cp):
        problems.append(f"seq_len={workload.seq_len} is not divisible by 2*cp={2 * layout.cp}")
    if layout.num_chunks > model.num_layers:
        problems.append(f"pp*virtual_stages={layout.num_chunks} exceeds num_layers={model.num_layers}")
    experts = model.moe.num_experts if model.moe else 1
    if experts % layout.ep:
        problems.append(f"num_experts={experts} is not divisible by ep={layout.ep}")
    if layout.global_batch != workload.batch:
        problems.append(
            f"dp*micro_batch*num_microbatches={layout.dp}*{layout.micro_batch}*{layout.num_microbatches}="
            f"{layout.global_batch} != global batch {workload.batch}"
        )
    if layout.layer_partition is not None and sum(layout.layer_partition) != model.num_layers:
        problems.append(f"layer_partition sums to {sum(layout.layer_partition)}, model has {model.num_layers} layers")
    if problems:
        raise UserError("invalid layout: " + "; ".join(problems))
