"""Shared plumbing for the figures: a matplotlib `Figure` on the Agg canvas, and atomic PNG + SVG output.

matplotlib is imported inside the functions, never at module level, so `import planner` stays fast. The
figures use `matplotlib.figure.Figure` directly (no pyplot): no global figure registry, no GUI backend.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.io import check_targets, write_bytes_atomic

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FORMATS = ("png", "svg")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
GiB = 2**30

# One colour per link category, used by the mesh figure and in legends (colour-blind safe Okabe-Ito hues).
LINK_COLOURS = {"NVLink": "#009E73", "PCIe": "#E69F00", "network": "#D55E00", "loopback": "#0072B2", "none": "#999999"}


def new_figure(width_in: float, height_in: float) -> Figure:
    """A Figure attached to the Agg canvas (raster and vector output without pyplot)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def render(fig: Figure, fmt: str) -> bytes:
    """The figure as PNG or SVG bytes; SVG ids and metadata are fixed so equal figures give equal files."""
    import matplotlib

    buf = io.BytesIO()
    if fmt == "svg":
        with matplotlib.rc_context({"svg.hashsalt": "meshplan", "svg.fonttype": "none"}):
            fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": "meshplan"})
    elif fmt == "png":
        fig.savefig(buf, format="png", dpi=130, metadata={"Software": "meshplan"})
    else:
        raise ValueError(f"unknown figure format {fmt!r}; expected one of {FORMATS}")
    return buf.getvalue()


def save(fig: Figure, out_dir: str | Path, stem: str, *, force: bool = False) -> list[Path]:
    """Write `stem.png` and `stem.svg` atomically into `out_dir` (created if missing, not its parents); refuses
    (before writing either) if one exists and not `force` (`planner.io.check_targets`)."""
    from planner.io import make_output_folder

    out = make_output_folder(out_dir, option="--figures")
    paths = [out / f"{stem}.{fmt}" for fmt in FORMATS]
    check_targets(*paths, force=force)
    for p, fmt in zip(paths, FORMATS):
        write_bytes_atomic(p, render(fig, fmt), force=force)
    return paths


def fmt_s(t: float) -> str:
    return f"{t * 1e3:.1f} ms" if t < 10 else f"{t:.2f} s"


def plan_title(plan: Any) -> str:
    """One line naming what was planned: model, cluster and the layout."""
    inp = plan.inputs
    nodes = sum(int(g.get("hosts", 0)) for g in inp.cluster.get("host_groups", []))
    return f"{inp.model.name} on {inp.cluster.get('name', '?')} ({nodes} hosts, {plan.world_size} ranks): {plan.layout.describe()}"
