"""Per-pipeline-rank forward and backward time of one micro-batch, exactly as the cost model assembles them.

`planner.cost.evaluate.evaluate_table` folds these into the pipeline makespan and does not return them; the
schedule figure needs them to draw a Gantt chart with the model's own numbers. Both read the mean-layer
costs from `evaluate.layer_costs`; this module adds the per-rank sums:

    t_r = n_r * u + [r == 0] * e_first + [r == p-1] * e_last           (forward + backward + recompute)
    f_r = n_r * u_fwd + [r == 0] * emb_f + [r == p-1] * head_f         (forward only)

and the cost model's pipeline formulas on top (see evaluate.py's module docstring). `StageTimes.check_against`
compares the result with a plan's breakdown; tests/unit/test_figures.py asserts they agree for every
schedule, so a change to evaluate.py that is not mirrored here fails a test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.cost import comm
from planner.cost.evaluate import RECOMPUTE, SCHEDULES, layer_costs

if TYPE_CHECKING:
    from planner.cost.context import CostContext
    from planner.layout import Layout
    from planner.plan import Plan


@dataclass(frozen=True)
class StageTimes:
    """Seconds per micro-batch on each pipeline rank (all its chunks), and the cost model's pipeline terms."""

    schedule: str
    num_microbatches: int
    virtual_stages: int
    forward_s: tuple[float, ...]  # f_r: forward compute + exposed in-layer TP/CP/EP communication
    backward_s: tuple[float, ...]  # t_r - f_r: backward (+ recomputation) + its communication
    pipeline_s: float  # the cost model's makespan of the pipeline phase (formula, not a simulation)
    bubble_s: float  # pipeline_s - m * max_r t_r

    @property
    def total_s(self) -> tuple[float, ...]:
        return tuple(f + b for f, b in zip(self.forward_s, self.backward_s))

    @property
    def busy_s(self) -> float:
        """m * max_r t_r: the busiest rank's work in the pipeline phase."""
        return self.num_microbatches * max(self.total_s)

    def check_against(self, plan: Plan, rel_tol: float = 1e-6) -> str | None:
        """None when these times reproduce the plan's breakdown; else a one-line description of the gap."""
        b = plan.prediction.breakdown
        busy_plan = b.compute_s + b.tp_comm_s + b.cp_comm_s + b.ep_comm_s
        for name, ours, theirs in (("busiest-rank work", self.busy_s, busy_plan), ("bubble", self.bubble_s, b.bubble_s)):
            if abs(ours - theirs) > rel_tol * max(abs(theirs), plan.prediction.step_time_s * 1e-9, 1e-30):
                return f"{name} {ours * 1e3:.6g} ms rebuilt vs {theirs * 1e3:.6g} ms in the plan"
        return None


def pipeline_formula_s(schedule: str, m: int, v: int, t: list[float], f: list[float]) -> float:
    """The cost model's pipeline makespan (evaluate.py docstring): GPipe/1F1B, interleaved, ZB-H1."""
    if len(t) == 1:
        return m * t[0]
    if schedule == "interleaved":
        return m * max(t) + (sum(t) - max(t)) / v
    if schedule == "zb-h1":
        return m * max(t) + (sum(f) - max(f))
    return sum(t) + (m - 1) * max(t)


def _table(layout: Layout) -> dict[str, np.ndarray]:
    from planner.api import layout_to_row  # local: api imports the search, which is heavier

    return layout_to_row(layout)


def per_layer_times(ctx: CostContext, table: dict[str, np.ndarray], bw: comm.AxisBandwidth) -> dict[str, np.ndarray]:
    """Per micro-batch: mean decoder layer total `u` and forward `u_fwd`; embedding/head forward and total.

    Read from `evaluate.layer_costs`, the same function `evaluate_table` uses.
    """
    lc = layer_costs(ctx, table, bw)
    return {"u": lc.u, "u_fwd": lc.u_fwd, "emb_f": lc.emb_f, "head_f": lc.head_f, "e_first": lc.e_first,
            "e_last": lc.e_last}


def stage_times(ctx: CostContext, layout: Layout, rank_layers: list[int]) -> StageTimes:
    """Forward/backward seconds per micro-batch on every pipeline rank of `layout` with `rank_layers` layers."""
    if len(rank_layers) != layout.pp:
        raise ValueError(f"rank_layers has {len(rank_layers)} entries; the layout has pp={layout.pp}")
    assert layout.schedule in SCHEDULES and layout.recompute in RECOMPUTE
    c = {k: float(np.asarray(v).reshape(-1)[0]) for k, v in per_layer_times(ctx, _table(layout), comm.AxisBandwidth(ctx.topology)).items()}
    p = layout.pp
    t, f = [], []
    for r, n in enumerate(rank_layers):
        t.append(n * c["u"] + (c["e_first"] if r == 0 else 0.0) + (c["e_last"] if r == p - 1 else 0.0))
        f.append(n * c["u_fwd"] + (c["emb_f"] if r == 0 else 0.0) + (c["head_f"] if r == p - 1 else 0.0))
    m, v = layout.num_microbatches, layout.virtual_stages
    pipe = pipeline_formula_s(layout.schedule, m, v, t, f)
    return StageTimes(
        schedule=layout.schedule if p > 1 else "none",
        num_microbatches=m,
        virtual_stages=v,
        forward_s=tuple(f),
        backward_s=tuple(ti - fi for ti, fi in zip(t, f)),
        pipeline_s=pipe,
        bubble_s=pipe - m * max(t),
    )


def rank_layers_of(layout: Layout, num_layers: int) -> list[int]:
    """Decoder layers per pipeline rank (chunk c runs on rank c % pp)."""
    per_rank = [0] * layout.pp
    for c, n in enumerate(layout.partition(num_layers)):
        per_rank[c % layout.pp] += n
    return per_rank


def context_for_plan(plan: Plan, **options: Any) -> CostContext:
    """Rebuild the cost context a plan was computed with, from the inputs it embeds."""
    from hardware_profiles import Cluster
    from planner.api import make_context

    cluster = Cluster.model_validate(plan.inputs.cluster)
    return make_context(plan.inputs.model, cluster, plan.inputs.workload, **options)


def plan_stage_times(plan: Plan, ctx: CostContext | None = None) -> StageTimes:
    """`stage_times` for a plan (its layout and layer partition), rebuilding the context when not given."""
    ctx = ctx if ctx is not None else context_for_plan(plan)
    return stage_times(ctx, plan.layout, rank_layers_of(plan.layout, plan.inputs.model.num_layers))
