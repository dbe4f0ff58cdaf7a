"""Device mesh on the topology: every GPU in its host and NVLink domain, coloured by its mesh coordinate.

One panel per mesh axis of size > 1. Each panel colours every GPU by its coordinate along that axis
(`Layout.rank_coords`) and draws the axis's communication groups (`Topology.mesh_groups`) as lines through
their members, labelled with the link category (NVLink / PCIe / network / loopback) and the bottleneck link
of the collective the cost model runs on that axis (`Topology.axis_collective(kind).bottleneck`, the same
query the cost model makes; its link technology comes from the topology's edge table).

Up to `DETAIL_MAX_GPUS` GPUs every GPU is a cell. Above that the panel aggregates (planner.figures.mesh_large):
hosts become cells coloured by the coordinate of their first GPU, and an inset shows the distinct GPU
patterns inside a host relative to that coordinate; the title says so.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from planner.figures._common import LINK_COLOURS, new_figure, plan_title
from planner.figures.mesh_large import draw_aggregated
from planner.figures.mesh_panels import (
    LINK_STYLE,
    AxisPanel,
    MeshFigureData,
    axis_cmap,
    axis_panels,
    topology_for,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from planner.plan import Plan

DETAIL_MAX_GPUS = 256


def _host_grid(topo: Any) -> tuple[dict[int, tuple[float, float]], list[tuple[list[int], str]], int]:
    """Origin (x, y) of each host block; NVLink domains spanning several hosts; columns per host block."""
    lay = topo.layout
    gpn, hosts = lay.gpus_per_node, lay.num_hosts
    cols = min(gpn, 8)
    rows = math.ceil(gpn / cols)
    dom = lay.dom[:: gpn] if gpn else []
    multi = [d for d in set(int(x) for x in dom) if d >= 0 and int((dom == d).sum()) > 1]
    per_dom = int((dom == multi[0]).sum()) if multi else 1
    if per_dom > 1:
        per_row = next((k for k in (6, 4, 3, 5, 2) if per_dom % k == 0 and k <= per_dom), per_dom)
    else:
        per_row = max(1, min(hosts, 4 if gpn >= 8 else 8))
    origin: dict[int, tuple[float, float]] = {}
    bw, bh = cols + 0.6, rows + 0.9
    for h in range(hosts):
        origin[h] = ((h % per_row) * bw, (h // per_row) * bh)
    domains = [([h for h in range(hosts) if int(dom[h]) == d], f"NVLink domain {d}") for d in sorted(multi)]
    return origin, domains, cols


def _arc(a: tuple[float, float], b: tuple[float, float], bend: float, n: int = 16) -> list[tuple[float, float]]:
    """Points of a quadratic Bezier from a to b bulging by `bend` x their distance (upwards on screen)."""
    (x0, y0), (x1, y1) = a, b
    dx, dy = x1 - x0, y1 - y0
    d = math.hypot(dx, dy) or 1.0
    nx, ny = (dy / d, -dx / d) if dx >= 0 else (-dy / d, dx / d)  # normal pointing to smaller y (up, y inverted)
    cx, cy = (x0 + x1) / 2 + nx * bend * d, (y0 + y1) / 2 + ny * bend * d
    out = []
    for i in range(n + 1):
        t = i / n
        out.append(((1 - t) ** 2 * x0 + 2 * (1 - t) * t * cx + t * t * x1, (1 - t) ** 2 * y0 + 2 * (1 - t) * t * cy + t * t * y1))
    return out


def draw_mesh(plan: Plan, topology: Any = None) -> tuple[Figure, MeshFigureData]:
    """The device-mesh figure of `plan`; returns the figure and its data."""
    topo = topology if topology is not None else topology_for(plan)
    panels = axis_panels(plan, topo)
    n_gpus = int(topo.num_gpus)
    if n_gpus > DETAIL_MAX_GPUS:
        return draw_aggregated(plan, topo, panels)
    return _draw_detailed(plan, topo, panels)


def _draw_detailed(plan: Plan, topo: Any, panels: list[tuple[AxisPanel, list[list[int]]]]) -> tuple[Figure, MeshFigureData]:
    from matplotlib.collections import LineCollection, PolyCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyBboxPatch, Patch

    lay = plan.layout
    W, n_gpus = lay.world_size, int(topo.num_gpus)
    gpn, hosts = topo.gpus_per_node, topo.layout.num_hosts
    origin, domains, cols = _host_grid(topo)
    place = {pl.rank: (pl.host, pl.gpu) for pl in plan.placement}
    rank_at = {hg: r for r, hg in place.items()}

    def centre(host: int, gpu: int) -> tuple[float, float]:
        x0, y0 = origin[host]
        return x0 + gpu % cols + 0.5, y0 + 0.6 + gpu // cols + 0.5

    shown = panels or [(AxisPanel("none", 1, 1, "", "none", "none", 0, 0), [[r] for r in range(W)])]
    ncol, nrow = 1, len(shown)
    width_u = max(x for x, _ in origin.values()) + cols + 0.6
    height_u = max(y for _, y in origin.values()) + math.ceil(gpn / cols) + 0.9
    panel_w = min(11.0, max(6.0, 0.3 * width_u))
    panel_h = max(1.3, panel_w * (height_u + 1.2) / width_u + 0.5)
    fig = new_figure(panel_w + 2.4, panel_h * nrow + 0.9)
    out_panels = []
    for k, (panel, groups) in enumerate(shown):
        ax = fig.add_subplot(nrow, ncol, k + 1)
        cmap = axis_cmap(panel.size)
        polys, faces, idle_polys = [], [], []
        for h in range(hosts):
            for g in range(gpn):
                cx, cy = centre(h, g)
                sq = [(cx - 0.45, cy - 0.45), (cx + 0.45, cy - 0.45), (cx + 0.45, cy + 0.45), (cx - 0.45, cy + 0.45)]
                rank = rank_at.get((h, g))
                if rank is not None:
                    polys.append(sq)
                    faces.append(cmap(lay.rank_coords(rank)[panel.axis] if panel.axis != "none" else 0))
                else:
                    idle_polys.append(sq)
        ax.add_collection(PolyCollection(polys, facecolors=faces, edgecolors="black", linewidths=0.3))
        if idle_polys:
            ax.add_collection(PolyCollection(idle_polys, facecolors="#EEEEEE", edgecolors="#AAAAAA", linewidths=0.3, hatch="..."))
        for h, (x0, y0) in origin.items():
            ax.add_patch(FancyBboxPatch((x0 + 0.02, y0 + 0.52), cols - 0.04, math.ceil(gpn / cols) + 0.16,
                                        boxstyle="round,pad=0.04", fill=False, edgecolor="#444444", linewidth=0.8))
            if hosts <= 64:
                ax.text(x0 + 0.05, y0 + 0.45, f"host {h}", fontsize=5.5, va="bottom", color="#444444")
        for members, label in domains:
            xs = [origin[h][0] for h in members]
            ys = [origin[h][1] for h in members]
            ax.add_patch(FancyBboxPatch((min(xs) - 0.15, min(ys) + 0.1), max(xs) - min(xs) + cols + 0.3,
                                        max(ys) - min(ys) + math.ceil(gpn / cols) + 0.75, boxstyle="round,pad=0.05",
                                        fill=False, edgecolor=LINK_COLOURS["NVLink"], linewidth=1.6, linestyle="-"))
            ax.text(max(xs) + cols + 0.15, max(ys) + math.ceil(gpn / cols) + 1.0, label, fontsize=6, ha="right",
                    va="top", color=LINK_COLOURS["NVLink"])
        cat = panel.link.split(" ")[0]
        segs = []
        for j, grp in enumerate(groups):
            # consecutive members joined by arcs; each group bends a little more, so parallel groups stay apart
            bend = 0.12 + 0.25 * (j / (len(groups) - 1) if len(groups) > 1 else 0.0)
            pts = [centre(*place[r]) for r in grp]
            segs.extend(_arc(a, b, bend) for a, b in zip(pts[:-1], pts[1:]))
        if panel.axis != "none" and segs:
            ax.add_collection(LineCollection(segs, colors=LINK_COLOURS.get(cat, "#333333"), linewidths=1.0,
                                             linestyles=LINK_STYLE.get(cat, "-"), alpha=0.8))
        top = min([-0.2] + [y for seg in segs for _, y in seg])
        ax.set_xlim(-0.4, width_u)
        ax.set_ylim(height_u + (0.8 if domains else 0.4), top - 0.2)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        if panel.axis == "none":
            ax.set_title("single rank: no mesh axis larger than 1", fontsize=8)
        else:
            ax.set_title(f"{panel.axis} (size {panel.size}): {panel.num_groups} groups, {panel.collective} over "
                         f"{panel.link} (bottleneck: {panel.bottleneck})", fontsize=7.5)
            handles = [Patch(color=cmap(c), label=f"{panel.axis}={c}") for c in range(panel.size)] if panel.size <= 8 else []
            if panel.size > 8:  # a colour bar instead of a long legend
                from matplotlib.cm import ScalarMappable
                from matplotlib.colors import Normalize

                sm = ScalarMappable(norm=Normalize(-0.5, panel.size - 0.5), cmap=cmap)
                ticks = list(range(panel.size)) if panel.size <= 20 else None
                cb = fig.colorbar(sm, ax=ax, fraction=0.025, pad=0.01, ticks=ticks, location="left")
                cb.set_label(panel.axis, fontsize=7)
                cb.ax.tick_params(labelsize=6)
            handles.append(Line2D([], [], color=LINK_COLOURS.get(cat, "#333333"), linestyle=LINK_STYLE.get(cat, "-"),
                                  label=f"group link: {panel.link}"))
            if idle_polys:
                handles.append(Patch(facecolor="#EEEEEE", edgecolor="#AAAAAA", hatch="...", label="idle GPU"))
            ax.legend(handles=handles, fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        out_panels.append(AxisPanel(**{**panel.__dict__, "gpu_cells": len(polys)}))
    fig.suptitle(f"Device mesh {' x '.join(f'{a}={s}' for a, s in zip(lay.mesh_axes, lay.mesh_shape))} "
                 f"(rank order, outermost first) on {hosts} hosts x {gpn} GPUs, every GPU drawn\n{plan_title(plan)}",
                 fontsize=8.5)
    data = MeshFigureData(world_size=W, num_gpus=n_gpus, idle_gpus=n_gpus - W, num_hosts=hosts, aggregated=False,
                          aggregation="", panels=tuple(out_panels) if panels else ())
    return fig, data
