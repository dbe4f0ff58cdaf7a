"""Per-pipeline-rank forward and backward time of one micro-batch, as the plan's own costing computed them.

The schedule figure draws a Gantt chart with the cost model's numbers. They come from the same rank-by-rank
costing as the plan's prediction (`cost.layout_cost.cost_layout`, then the one assembler `cost.assemble`):
t_r (forward + backward + recompute of rank r, with its exposed in-layer communication), f_r (its forward
part), w_r (the weight-gradient GEMMs inside its backward: the W pass of zero-bubble schedules), the schedule's
makespan and bubble. `StageTimes.check_against` compares them with a plan's breakdown
(a plan written by another version of the cost model can differ); tests/unit/test_figures.py asserts they
agree for every schedule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planner.cost.context import CostContext, make_context
from planner.cost.layout_cost import cost_layout, rank_layers_of
from planner.layout.table import layout_to_row, row_at

if TYPE_CHECKING:
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
    weight_grad_s: tuple[float, ...]  # w_r: the weight-gradient GEMMs inside backward_s (zero-bubble W)
    pipeline_s: float  # the cost model's makespan of the pipeline phase (formula, not a simulation)
    bubble_s: float  # pipeline_s - m * max_r t_r

    @property
    def total_s(self) -> tuple[float, ...]:
        return tuple(f + b for f, b in zip(self.forward_s, self.backward_s))

    @property
    def zero_bubble_s(self) -> tuple[float, ...]:
        """g_r = T_F + T_B - T_W = t_r - 2 w_r per rank: the bubble unit of zero-bubble schedules."""
        return tuple(t - 2 * w for t, w in zip(self.total_s, self.weight_grad_s))

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


def stage_times(ctx: CostContext, layout: Layout, rank_layers: list[int]) -> StageTimes:
    """Forward/backward seconds per micro-batch on every pipeline rank of `layout` with `rank_layers` layers."""
    if len(rank_layers) != layout.pp:
        raise ValueError(f"rank_layers has {len(rank_layers)} entries; the layout has pp={layout.pp}")
    row = row_at(layout_to_row(layout), 0)
    res = cost_layout(ctx, row, rank_layers, layout.layer_partition if layout.pp > 1 else None)
    assert res.rank_total_s is not None and res.rank_forward_s is not None and res.pipeline_s is not None
    assert res.rank_weight_grad_s is not None
    t, f = res.rank_total_s[0].tolist(), res.rank_forward_s[0].tolist()
    return StageTimes(
        schedule=layout.schedule if layout.pp > 1 else "none",
        num_microbatches=layout.num_microbatches,
        virtual_stages=layout.virtual_stages,
        forward_s=tuple(f),
        backward_s=tuple(ti - fi for ti, fi in zip(t, f)),
        weight_grad_s=tuple(res.rank_weight_grad_s[0].tolist()),
        pipeline_s=float(res.pipeline_s[0]),
        bubble_s=float(res.bubble_s[0]),
    )


def context_for_plan(plan: Plan, **options: Any) -> CostContext:
    """Rebuild the cost context a plan was computed with, from the inputs it embeds."""
    from hardware_profiles import Cluster

    cluster = Cluster.model_validate(plan.inputs.cluster)
    return make_context(plan.inputs.model, cluster, plan.inputs.workload, **options)


def plan_stage_times(plan: Plan, ctx: CostContext | None = None) -> StageTimes:
    """`stage_times` for a plan (its layout and layer partition), rebuilding the context when not given."""
    ctx = ctx if ctx is not None else context_for_plan(plan)
    lay = plan.layout
    return stage_times(ctx, lay, rank_layers_of(lay.partition(plan.inputs.model.num_layers), lay.pp))
