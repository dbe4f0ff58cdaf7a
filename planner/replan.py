"""Re-plan a plan for another GPU count from its own embedded inputs, and say what changed.

    from planner.replan import replan, changes
    new = replan(old, gpus=4)                  # same model, workload and hardware shape, 4 GPUs
    for knob, before, after in changes(old, new): ...

The model, the workload (global batch, sequence length, dtype, FlashAttention) and the hardware are the
plan's own: the embedded cluster is resized (`hardware_profiles.cluster(embedded, gpus=N)`), not looked up
again by name, so the new plan is costed on the hardware the old one was. The search is the planner's exact
search, unpinned: a plan file does not record the pins it was made with. The global batch is kept, so a run
resumed from the old plan's checkpoint on the new mesh (DCP reshards it) continues the same optimisation.
"""

from __future__ import annotations

from typing import Any

from planner.plan import Plan

GiB = 2**30

KNOBS = ("dp", "tp", "pp", "cp", "ep", "micro_batch", "num_microbatches", "schedule", "virtual_stages", "zero",
         "dp_shard", "recompute", "sequence_parallel", "mesh_axes", "layer_partition")
"""Layout fields compared, in reading order."""


def replan(plan: Plan, *, gpus: int | None = None, nodes: int | None = None, framework: str | None = None,
           **pins: Any) -> Plan:
    """The best plan for `plan`'s model and workload on its cluster resized to `gpus` GPUs or `nodes` hosts
    (both None: the same cluster), for `framework` (default: the plan's own).

    `pins` are `planner.api.search` pins (Layout field names). Raises UserError/ProfileError for a size the
    cluster shape cannot take, InfeasibleError when nothing fits (the message says what would).
    """
    import hardware_profiles as hp
    from planner.api import search

    embedded = hp.Cluster.model_validate(plan.inputs.cluster)
    cluster = embedded if gpus is None and nodes is None else hp.cluster(embedded, nodes=nodes, gpus=gpus)
    workload = plan.inputs.workload
    if framework is not None and framework != plan.framework:
        from planner.frameworks import without_runtime

        workload = without_runtime(workload)  # the old framework's runtime costs: the new one sets its own
    return search(plan.inputs.model, cluster, workload, top=1, framework=framework or plan.framework, **pins)[0]


def _text(value: Any) -> str:
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value)
    if value is None:
        return "even"
    return str(value)


def changes(old: Plan, new: Plan) -> list[tuple[str, str, str]]:
    """(what, old, new) for the GPUs, every layout knob and the predictions; equal rows included."""
    rows = [("framework", old.framework, new.framework), ("GPUs (used / in all)", f"{old.world_size} / {old.world_size + old.prediction.idle_gpus}",
             f"{new.world_size} / {new.world_size + new.prediction.idle_gpus}")]
    rows += [(k, _text(getattr(old.layout, k)), _text(getattr(new.layout, k))) for k in KNOBS]
    po, pn = old.prediction, new.prediction
    rows += [
        ("step time (s)", f"{po.step_time_s:.4g}", f"{pn.step_time_s:.4g}"),
        ("tokens/s", f"{po.tokens_per_s:,.0f}", f"{pn.tokens_per_s:,.0f}"),
        ("MFU", f"{po.mfu:.1%}", f"{pn.mfu:.1%}"),
        ("peak memory (GiB)", f"{po.peak_memory_bytes / GiB:.2f}", f"{pn.peak_memory_bytes / GiB:.2f}"),
    ]
    return rows
