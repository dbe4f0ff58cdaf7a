"""Comparison: step time against peak memory for every feasible layout of a search, Pareto front marked.

Input is the `all_feasible` table of `planner.api.search_result(..., keep_all=True)` (layout columns plus
`step_time_ms` and `peak` bytes). A layout is on the Pareto front when no other layout is at least as fast
and at least as lean with one of the two strictly better. `feasible_table` runs the search so that the
table holds the whole feasible space, not only what branch and bound visited (see its docstring).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.figures._common import GiB, new_figure, plan_title

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from planner.plan import Plan

_RASTER_POINTS = 5000
_FRONT_LABELS = 6


@dataclass(frozen=True)
class ParetoFigureData:
    step_time_s: np.ndarray = field(repr=False)  # every feasible layout
    peak_bytes: np.ndarray = field(repr=False)
    front: np.ndarray  # indices into the arrays above, Pareto-optimal, by increasing peak memory
    front_layouts: tuple[str, ...]  # Layout.describe() of each front point
    chosen_step_time_s: float
    chosen_peak_bytes: float
    chosen_on_front: bool  # no feasible layout dominates the chosen plan
    others: dict[str, tuple[float, float]]  # extra labelled points: name -> (step time s, peak bytes)


def pareto_front(time_s: np.ndarray, peak: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated points (minimise both), by increasing peak; one of each exact tie."""
    order = np.lexsort((peak, time_s))  # by time, then peak
    p = peak[order]
    before = np.concatenate([[np.inf], np.minimum.accumulate(p)[:-1]])  # leanest of every faster-or-equal point
    keep = order[p < before]
    return keep[np.argsort(peak[keep], kind="stable")]


def _table_of(search: Any) -> dict[str, np.ndarray]:
    """Accept a SearchResult, the (ctx, SearchResult) pair of `search_result`, or the table itself."""
    if isinstance(search, tuple):
        search = search[1]
    table = getattr(search, "all_feasible", search)
    if not isinstance(table, dict) or "step_time_ms" not in table or "peak" not in table:
        raise ValueError("the comparison figure needs search_result(..., keep_all=True): no all_feasible table")
    return table


def feasible_table(plan: Plan, **pins: Any) -> dict[str, np.ndarray]:
    """Every feasible layout for the plan's model, cluster and workload (with `pins`), step time and peak.

    `keep_all` keeps the rows the search evaluates; branch and bound skips shapes that cannot enter the top K,
    and a slow shape can still be the leanest. Asking for as many winners as there are layouts (`top`) turns
    the time bound off, so the table is the whole feasible space.
    """
    from hardware_profiles import Cluster
    from planner.api import search_result

    inp = plan.inputs
    _, res = search_result(inp.model, Cluster.model_validate(inp.cluster), inp.workload, top=10**9,
                           keep_all=True, **pins)
    return _table_of(res)


def draw_pareto(plan: Plan, search: Any, others: dict[str, Plan] | None = None) -> tuple[Figure, ParetoFigureData]:
    """Scatter of all feasible layouts (peak memory vs step time), front and chosen plan marked."""
    from planner.layout import COLUMNS, row_to_layout

    table = _table_of(search)
    t = np.asarray(table["step_time_ms"], dtype=float) / 1e3
    peak = np.asarray(table["peak"], dtype=float)
    if len(t) == 0:
        raise ValueError("the search found no feasible layout to compare")
    front = pareto_front(t, peak)
    labels = tuple(row_to_layout({k: int(table[k][i]) for k in COLUMNS}, None).describe() for i in front)
    ct, cp = plan.prediction.step_time_s, plan.prediction.peak_memory_bytes
    tol = 1e-9
    dominated = bool(np.any((t <= ct * (1 + tol)) & (peak <= cp * (1 + tol)) & ((t < ct * (1 - tol)) | (peak < cp * (1 - tol)))))
    extra = {name: (p.prediction.step_time_s, p.prediction.peak_memory_bytes) for name, p in (others or {}).items()}
    data = ParetoFigureData(step_time_s=t, peak_bytes=peak, front=front, front_layouts=labels, chosen_step_time_s=ct,
                            chosen_peak_bytes=cp, chosen_on_front=not dominated, others=extra)

    fig = new_figure(10.0, 6.0)
    ax = fig.add_subplot()
    pts = ax.scatter(peak / GiB, t, s=4, color="#9E9E9E", alpha=0.45, linewidths=0, label=f"feasible layouts ({len(t):,})")
    pts.set_rasterized(len(t) > _RASTER_POINTS)
    ax.step(peak[front] / GiB, t[front], where="post", color="#D55E00", linewidth=1.2)
    ax.scatter(peak[front] / GiB, t[front], s=22, color="#D55E00", zorder=3, label=f"Pareto front ({len(front)})")
    # label a few front points spread evenly in memory, alternately above and below the front
    picks = sorted({int(np.argmin(np.abs(peak[front] - q))) for q in np.linspace(peak[front][0], peak[front][-1], _FRONT_LABELS)})
    for n, j in enumerate(picks):
        i = front[j]
        ax.annotate(labels[j], (peak[i] / GiB, t[i]), fontsize=5.5, xytext=(4, 8 if n % 2 else -12),
                    textcoords="offset points", color="#8A3B00", arrowprops={"arrowstyle": "-", "color": "#8A3B00", "lw": 0.4})
    ax.scatter([cp / GiB], [ct], marker="*", s=220, color="#0072B2", edgecolors="black", zorder=4,
               label=f"chosen: {plan.layout.describe()}")
    for name, (et, ep) in extra.items():
        ax.scatter([ep / GiB], [et], marker="D", s=40, color="#009E73", edgecolors="black", zorder=4)
        ax.annotate(name, (ep / GiB, et), fontsize=7, xytext=(5, -9), textcoords="offset points", color="#00573F")
    cap = min(s.capacity_bytes for s in plan.prediction.memory_per_stage)
    ax.axvline(cap / GiB, color="black", linestyle="--", linewidth=1.0, label=f"GPU capacity {cap / GiB:.1f} GiB")
    ax.set_xlabel("peak memory per GPU (GiB)")
    ax.set_ylabel("step time (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    where = "on the front" if data.chosen_on_front else "dominated by a front point"
    ax.set_title(f"Step time vs peak memory of {len(t):,} feasible layouts; chosen plan {where}\n{plan_title(plan)}",
                 fontsize=9)
    return fig, data
