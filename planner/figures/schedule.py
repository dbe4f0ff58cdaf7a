"""Pipeline schedule: a Gantt chart of forward (F), backward (B) and weight-gradient (W) ops per pipeline rank.

Op durations are the cost model's own per-rank, per-micro-batch times (`planner.cost.schedule_times`): F is
f_r, B is t_r - f_r (backward + recomputation + their communication), split for ZB-H1 into B = W = (t_r -
f_r) / 2 as the cost model's ZB-H1 formula assumes (T_B = T_W); each of v chunks takes 1/v of them. The
ops are placed by simulating the schedule (`planner.figures.timeline`); idle time inside the pipeline phase
is drawn as bubble. After the pipeline the chart adds the step's remaining terms as the cost model does:
exposed p2p, exposed DP/FSDP communication and the optimizer step, so the chart ends at the step time.

The title prints the cost model's bubble fraction (`plan.prediction.bubble_fraction`). The simulation agrees
with the model's closed forms for equal stages (GPipe/1F1B (p-1)(F+B), interleaved (p-1)(F+B)/v, ZB-H1
(p-1)F when F >= B); where they differ (unequal stages; ZB-H1 with B > F, e.g. under recomputation, where
the simulated bubble is (p-1)B) the subtitle prints both and the data carries both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planner.figures._common import fmt_s, new_figure, plan_title
from planner.figures.timeline import Op, makespan_s, simulate
from planner.layout.schedules import ONE_RANK, SCHEDULES

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from planner.plan import Plan

KIND_COLOURS = {"F": "#0072B2", "B": "#E69F00", "W": "#009E73"}
KIND_NAMES = {"F": "forward", "B": "backward", "W": "weight gradient (W)"}
TAIL = (("pp_comm_s", "exposed p2p", "#CC79A7"), ("dp_comm_s", "exposed DP/FSDP", "#56B4E9"),
        ("optimizer_s", "optimizer step", "#999999"))
_LABEL_OPS = 40  # write micro-batch numbers into the boxes when a rank has at most this many ops
_RASTER_OPS = 4000  # rasterize the boxes in SVG output above this many ops (file size)


@dataclass(frozen=True)
class ScheduleFigureData:
    """What the Gantt chart draws. Times in seconds."""

    schedule: str
    pp: int
    num_microbatches: int
    virtual_stages: int
    forward_s: tuple[float, ...]  # per rank, one micro-batch, all chunks
    backward_s: tuple[float, ...]  # B only for a schedule that splits the backward (zb-h1)
    weight_grad_s: tuple[float, ...]  # W there, zeros otherwise
    ops: tuple[Op, ...]
    bubble_fraction: float  # the cost model's, printed in the title (== plan.prediction.bubble_fraction)
    bubble_s: float  # the cost model's bubble seconds (plan breakdown)
    model_pipeline_s: float  # the cost model's pipeline-phase makespan
    simulated_pipeline_s: float  # makespan of the simulated timeline
    simulated_bubble_fraction: float  # (simulated makespan - m * max t) / step time
    step_time_s: float
    tail_s: dict[str, float]  # exposed p2p, DP and optimizer seconds appended after the pipeline
    times_note: str | None  # None when the rebuilt per-stage times reproduce the plan's breakdown


def schedule_data(plan: Plan, ctx: Any = None) -> ScheduleFigureData:
    """Simulate the plan's schedule with the cost model's per-stage times."""
    from planner.cost.schedule_times import plan_stage_times

    st = plan_stage_times(plan, ctx)
    lay = plan.layout
    m, v, p = lay.num_microbatches, lay.virtual_stages, lay.pp
    sched = lay.schedule if p > 1 else ONE_RANK  # one rank: every schedule is m x (F, B)
    split = SCHEDULES[sched].splits_backward
    f = list(st.forward_s)
    if split:  # B and W as the cost model splits them (compute.LayerTime.wgrad_s)
        w = list(st.weight_grad_s)
        b = [x - y for x, y in zip(st.backward_s, w)]
    else:
        b, w = list(st.backward_s), [0.0] * p
    ops = simulate(sched, m, f, b, v=v, weight_grad_s=w if split else None)
    sim = makespan_s(ops)
    br = plan.prediction.breakdown
    step = plan.prediction.step_time_s
    return ScheduleFigureData(
        schedule=lay.schedule if p > 1 else "none (pp=1)",
        pp=p, num_microbatches=m, virtual_stages=v,
        forward_s=tuple(f), backward_s=tuple(b), weight_grad_s=tuple(w), ops=tuple(ops),
        bubble_fraction=plan.prediction.bubble_fraction,
        bubble_s=br.bubble_s,
        model_pipeline_s=st.pipeline_s,
        simulated_pipeline_s=sim,
        simulated_bubble_fraction=(sim - st.busy_s) / step,
        step_time_s=step,
        tail_s={k: float(getattr(br, k)) for k, _, _ in TAIL},
        times_note=st.check_against(plan),
    )


def _shade(colour: str, chunk_local: int, v: int) -> tuple[float, float, float]:
    """Later chunks of an interleaved rank in lighter tints of the op's colour."""
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(colour)
    k = 0.55 * chunk_local / max(v - 1, 1) if v > 1 else 0.0
    return (r + (1 - r) * k, g + (1 - g) * k, b + (1 - b) * k)


def _idle(ops: list[Op], p: int, end: float) -> list[tuple[int, float, float]]:
    """(rank, start, width) of every gap in each rank's timeline before `end`."""
    gaps = []
    by_rank: list[list[Op]] = [[] for _ in range(p)]
    for o in ops:
        by_rank[o.rank].append(o)
    for r in range(p):
        t = 0.0
        for o in sorted(by_rank[r], key=lambda o: o.start_s):
            if o.start_s > t + 1e-12 * max(end, 1e-30):
                gaps.append((r, t, o.start_s - t))
            t = max(t, o.end_s)
        if end > t + 1e-12 * max(end, 1e-30):
            gaps.append((r, t, end - t))
    return gaps


def draw_schedule(plan: Plan, ctx: Any = None) -> tuple[Figure, ScheduleFigureData]:
    """Gantt chart of the plan's pipeline schedule; returns the figure and its data."""
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    data = schedule_data(plan, ctx)
    p, v = data.pp, data.virtual_stages
    fig = new_figure(13.0, max(2.6, 0.42 * p + 1.9))
    ax = fig.add_subplot()
    unit, scale = ("ms", 1e3) if data.step_time_s < 10 else ("s", 1.0)
    h = 0.8
    label_ops = len(data.ops) <= _LABEL_OPS * p
    polys, colours = [], []
    for o in data.ops:
        x0, x1, y = o.start_s * scale, o.end_s * scale, o.rank
        polys.append([(x0, y - h / 2), (x1, y - h / 2), (x1, y + h / 2), (x0, y + h / 2)])
        colours.append(_shade(KIND_COLOURS[o.kind], o.chunk // p, v))
        if label_ops and x1 > x0:
            ax.text((x0 + x1) / 2, y, str(o.microbatch), ha="center", va="center", fontsize=6, color="white")
    # white separators only while boxes are wide enough to show them; otherwise they wash the colours out
    boxes = PolyCollection(polys, facecolors=colours, edgecolors="white",
                           linewidths=0.3 if len(data.ops) <= 200 * p else 0.0)
    boxes.set_rasterized(len(data.ops) > _RASTER_OPS)
    ax.add_collection(boxes)
    gaps = _idle(list(data.ops), p, data.simulated_pipeline_s)
    if gaps:
        ax.add_collection(PolyCollection(
            [[(s * scale, r - h / 2), ((s + w) * scale, r - h / 2), ((s + w) * scale, r + h / 2), (s * scale, r + h / 2)]
             for r, s, w in gaps],
            facecolors="#F6D5CC", edgecolors="#D55E00", linewidths=0.0, hatch="///"))
    x = data.simulated_pipeline_s
    handles = [Patch(color=KIND_COLOURS[k], label=KIND_NAMES[k]) for k in ("F", "B", "W")
               if any(o.kind == k for o in data.ops)]
    if gaps:
        handles.append(Patch(facecolor="#F6D5CC", edgecolor="#D55E00", hatch="///", label="bubble (idle)"))
    for key, name, colour in TAIL:
        width = data.tail_s[key]
        if width <= 0:
            continue
        ax.barh(range(p), [width * scale] * p, left=x * scale, height=h, color=colour, alpha=0.85)
        handles.append(Patch(color=colour, label=f"{name} {fmt_s(width)}"))
        x += width
    if v > 1:
        handles.append(Patch(color=_shade(KIND_COLOURS["F"], v - 1, v), label=f"lighter: later chunk (v={v})"))
    ax.set_xlim(0, x * scale * 1.002)
    ax.set_ylim(p - 0.5, -0.5)
    ax.set_yticks(range(p), [f"rank {r}" for r in range(p)], fontsize=7 if p <= 32 else 5)
    ax.set_xlabel(f"time in the step ({unit})")
    ax.set_ylabel("pipeline rank")
    v_text = f", v={v}" if v > 1 else ""
    line1 = (f"{data.schedule} schedule, pp={p}, {data.num_microbatches} micro-batches{v_text}: "
             f"bubble {data.bubble_fraction:.1%} of the {fmt_s(data.step_time_s)} step (cost model)")
    line2 = f"pipeline phase {fmt_s(data.model_pipeline_s)} (cost model)"
    if abs(data.simulated_pipeline_s - data.model_pipeline_s) > 1e-6 * data.model_pipeline_s:
        line2 += (f"; this simulated timeline: {fmt_s(data.simulated_pipeline_s)}, "
                  f"bubble {data.simulated_bubble_fraction:.1%}")
    if data.times_note:
        line2 += f"; warning: {data.times_note}"
    ax.set_title(f"{line1}\n{line2}\n{plan_title(plan)}", fontsize=8.5)
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="x", alpha=0.3)
    return fig, data
