"""Memory per pipeline stage: stacked bars of the plan's `StageMemory` components against GPU capacity.

Every bar segment is a field of `plan.prediction.memory_per_stage[r]` (weights, gradients, optimizer state,
activations, logits, buffers, reserve), so a bar's height is that stage's `total_bytes` exactly; the dashed
line is the stage's `capacity_bytes`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.figures._common import GiB, new_figure, plan_title

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from planner.plan import Plan

COMPONENTS = ("weights", "gradients", "optimizer", "activations", "logits", "buffers", "reserve")
_COLOURS = ("#0072B2", "#56B4E9", "#009E73", "#E69F00", "#D55E00", "#CC79A7", "#999999")


@dataclass(frozen=True)
class MemoryFigureData:
    """What the bars show, in bytes per GPU: one tuple entry per pipeline stage."""

    stages: tuple[int, ...]
    components: dict[str, tuple[float, ...]]
    totals_bytes: tuple[float, ...]  # sum of the drawn segments of each bar
    capacity_bytes: tuple[float, ...]


def memory_data(plan: Plan) -> MemoryFigureData:
    mem = plan.prediction.memory_per_stage
    comps = {c: tuple(float(getattr(s, f"{c}_bytes")) for s in mem) for c in COMPONENTS}
    totals = tuple(sum(comps[c][i] for c in COMPONENTS) for i in range(len(mem)))
    return MemoryFigureData(
        stages=tuple(s.stage for s in mem),
        components=comps,
        totals_bytes=totals,
        capacity_bytes=tuple(float(s.capacity_bytes) for s in mem),
    )


def draw_memory(plan: Plan) -> tuple[Figure, MemoryFigureData]:
    """Stacked memory bars per pipeline stage (GiB) with the capacity line; returns the figure and its data."""
    data = memory_data(plan)
    n = len(data.stages)
    fig = new_figure(max(6.0, min(0.45 * n + 4.0, 18.0)), 4.8)
    ax = fig.add_subplot()
    x = list(range(n))
    bottom = [0.0] * n
    for name, colour in zip(COMPONENTS, _COLOURS):
        vals = [v / GiB for v in data.components[name]]
        if not any(vals):
            continue
        ax.bar(x, vals, bottom=bottom, color=colour, label=name, width=0.7, edgecolor="white", linewidth=0.4)
        bottom = [b + v for b, v in zip(bottom, vals)]
    caps = [c / GiB for c in data.capacity_bytes]
    if len(set(caps)) == 1:
        ax.axhline(caps[0], color="black", linestyle="--", linewidth=1.2, label=f"GPU capacity {caps[0]:.1f} GiB")
    else:  # heterogeneous stages: one capacity tick per bar
        ax.hlines(caps, [i - 0.4 for i in x], [i + 0.4 for i in x], colors="black", linestyles="--", label="GPU capacity")
    for i, total in enumerate(data.totals_bytes):
        ax.annotate(f"{total / GiB:.1f}", (i, total / GiB), ha="center", va="bottom", fontsize=7,
                    xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(x, [str(s) for s in data.stages], fontsize=8 if n <= 32 else 6)
    ax.set_xlabel("pipeline stage (rank along pp)")
    ax.set_ylabel("GiB per GPU")
    ax.set_ylim(0, max(max(caps), max(data.totals_bytes) / GiB) * 1.12)
    worst = max(range(n), key=lambda i: data.totals_bytes[i] / data.capacity_bytes[i])
    headroom = (data.capacity_bytes[worst] - data.totals_bytes[worst]) / GiB
    ax.set_title(
        f"Memory per pipeline stage: peak {data.totals_bytes[worst] / GiB:.1f} GiB on stage {data.stages[worst]} "
        f"({headroom:+.1f} GiB headroom)\n{plan_title(plan)}",
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", alpha=0.3)
    return fig, data
