"""The device-mesh figure for large clusters (more than `mesh.DETAIL_MAX_GPUS` GPUs): hosts as cells.

Left of each axis panel: every host is one cell (an image, so 8,192 hosts cost one raster, not 65,536
patches), coloured by the axis coordinate of its first used GPU; rows are NVLink domains when a domain spans
several hosts, else leaf-switch groups, else a near-square wrap. The hosts of the group containing rank 0 are
joined by a line (the groups of an axis are translates of each other in rank order). Right: the distinct
patterns of the coordinate inside a host, relative to the host's first GPU ("+k"), with how many hosts
share each, which is exact: coordinate = host cell colour + pattern entry (mod axis size).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.figures._common import LINK_COLOURS, new_figure, plan_title
from planner.figures.mesh_panels import LINK_STYLE, AxisPanel, MeshFigureData, axis_cmap

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from planner.plan import Plan

MAX_PATTERNS = 6


def _row_length(topo: Any) -> tuple[int, str]:
    lay, cluster = topo.layout, topo.cluster
    gpn, hosts = lay.gpus_per_node, lay.num_hosts
    dom = lay.dom[::gpn]
    if (dom >= 0).any():
        per_dom = int(np.bincount(dom[dom >= 0]).max())
        if per_dom > 1:
            return per_dom, f"rows = NVLink domains of {per_dom} hosts"
    net = getattr(cluster, "network", None)
    if net is not None and len(net.levels) > 1 and 1 < net.levels[0].size < hosts:
        return int(net.levels[0].size), f"rows = {net.levels[0].name} groups of {net.levels[0].size} hosts"
    n = max(8, math.ceil(math.sqrt(2 * hosts)))
    return n, f"{n} hosts per row in host order"


def coordinate_matrix(plan: Plan, hosts: int, gpn: int, axis: str) -> np.ndarray:
    """hosts x gpus_per_node array of the axis coordinate of the rank on each GPU; -1 where idle."""
    lay = plan.layout
    shape, axes = lay.mesh_shape, lay.mesh_axes
    i = axes.index(axis)
    stride = math.prod(shape[i + 1:])
    ranks = np.array([pl.rank for pl in plan.placement], dtype=np.int64)
    M = np.full((hosts, gpn), -1, dtype=np.int64)
    M[[pl.host for pl in plan.placement], [pl.gpu for pl in plan.placement]] = (ranks // stride) % shape[i]
    return M


def host_patterns(M: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(base coordinate per host, distinct relative patterns, hosts per pattern); -1 marks idle GPUs/hosts."""
    used = M >= 0
    first = np.where(used.any(axis=1), used.argmax(axis=1), 0)
    base = np.where(used.any(axis=1), M[np.arange(len(M)), first], -1)
    rel = np.where(used, (M - base[:, None]) % size, -1)
    active = used.any(axis=1)
    pats, counts = np.unique(rel[active], axis=0, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    return base, pats[order], counts[order]


def draw_aggregated(plan: Plan, topo: Any, panels: list[tuple[AxisPanel, list[list[int]]]]) -> tuple[Figure, MeshFigureData]:
    lay = plan.layout
    gpn, hosts = topo.gpus_per_node, topo.layout.num_hosts
    per_row, rows_text = _row_length(topo)
    nrows = math.ceil(hosts / per_row)
    host_of = {pl.rank: pl.host for pl in plan.placement}
    shown = panels or [(AxisPanel("none", 1, 1, "", "none", "none", 0, 0), [[0]])]
    grid_h = min(3.2, max(1.3, 9.0 * nrows / per_row))
    fig = new_figure(13.0, (grid_h + 0.6) * len(shown) + 1.1)
    gs = fig.add_gridspec(len(shown), 2, width_ratios=[4.0, 1.6])
    out = []
    for k, (panel, groups) in enumerate(shown):
        size = max(panel.size, 1)
        M = coordinate_matrix(plan, hosts, gpn, panel.axis) if panel.axis != "none" else np.zeros((hosts, gpn), np.int64)
        base, pats, counts = host_patterns(M, size)
        cmap = axis_cmap(size).with_extremes(bad="#DDDDDD")
        img = np.full(nrows * per_row, np.nan)
        img[:hosts] = np.where(base >= 0, base, np.nan)
        ax = fig.add_subplot(gs[k, 0])
        ax.imshow(img.reshape(nrows, per_row), cmap=cmap, vmin=-0.5, vmax=size - 0.5, interpolation="nearest",
                  aspect="auto")
        cat = panel.link.split(" ")[0]
        grp_hosts = sorted({host_of[r] for r in groups[0]}) if panel.axis != "none" else []
        if len(grp_hosts) > 1:
            ax.plot([h % per_row for h in grp_hosts], [h // per_row for h in grp_hosts], marker="o", markersize=2.5,
                    color=LINK_COLOURS.get(cat, "#333333"), linestyle=LINK_STYLE.get(cat, "-"), linewidth=1.2,
                    label=f"hosts of rank 0's group ({panel.link})")
            ax.legend(fontsize=6, loc="upper right")
        ax.set_xticks([])
        ax.set_yticks([])
        where = "spans hosts" if len(grp_hosts) > 1 else "inside one host"
        ax.set_title(f"{panel.axis} (size {panel.size}): {panel.num_groups} groups, {panel.collective} over "
                     f"{panel.link} (bottleneck: {panel.bottleneck}); a group {where}", fontsize=7.5)
        ticks = list(range(size)) if size <= 20 else None
        cb = fig.colorbar(ax.images[0], ax=ax, fraction=0.03, pad=0.01, ticks=ticks)
        cb.set_label(panel.axis, fontsize=7)
        cb.ax.tick_params(labelsize=6)
        sub = fig.add_subplot(gs[k, 1])
        shown_p = pats[:MAX_PATTERNS]
        pat_img = np.where(shown_p >= 0, shown_p, np.nan).astype(float)
        sub.imshow(pat_img, cmap=cmap, vmin=-0.5, vmax=size - 0.5, interpolation="nearest", aspect="auto")
        if gpn <= 16:
            for (i, j), val in np.ndenumerate(shown_p):
                if val >= 0:
                    sub.text(j, i, f"+{val}", ha="center", va="center", fontsize=6, color="white")
        sub.set_yticks(range(len(shown_p)), [f"{c} hosts" for c in counts[:MAX_PATTERNS]], fontsize=6)
        sub.set_xticks(range(gpn), [str(g) for g in range(gpn)] if gpn <= 16 else [""] * gpn, fontsize=5)
        more = f" (+{len(pats) - MAX_PATTERNS} more)" if len(pats) > MAX_PATTERNS else ""
        sub.set_title(f"in-host patterns: coordinate minus the host cell's{more}", fontsize=7)
        sub.set_xlabel("GPU on host", fontsize=6)
        out.append(AxisPanel(**{**panel.__dict__, "host_cells": hosts}))
    how = (f"aggregated: {hosts} hosts drawn as cells instead of {topo.num_gpus} GPUs, each coloured by the "
           f"coordinate of its first GPU ({rows_text}); beside each panel the distinct patterns inside a host")
    fig.suptitle(f"Device mesh {' x '.join(f'{a}={s}' for a, s in zip(lay.mesh_axes, lay.mesh_shape))} (rank order) "
                 f"on {hosts} hosts x {gpn} GPUs\n{how}\n{plan_title(plan)}", fontsize=8.5)
    n_gpus = int(topo.num_gpus)
    data = MeshFigureData(world_size=lay.world_size, num_gpus=n_gpus, idle_gpus=n_gpus - lay.world_size,
                          num_hosts=hosts, aggregated=True, aggregation=how, panels=tuple(out) if panels else ())
    return fig, data
