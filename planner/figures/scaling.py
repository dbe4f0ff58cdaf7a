"""Scaling of a sweep: tokens/s and cost per token against the number of GPUs, one line per cluster.

Input is the DataFrame of `planner.sweep` (or `meshplan sweep`); only the points that have a plan are drawn.
Left: training throughput (tokens/s) on log-log axes, with the ideal linear scaling from each line's smallest
point dotted for reference. Right: cost per million tokens when the sweep had a price per GPU-hour, else
GPU-hours per million tokens (the cost at a price of 1); every GPU of the cluster is counted, idle or not.
When the sweep also varies the model, batch or sequence length, each of their combinations gets its own line.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.figures._common import new_figure, save

if TYPE_CHECKING:
    from matplotlib.figure import Figure

STEM = "sweep_scaling"
_SERIES = ("cluster", "model", "global_batch_tokens", "seq_len")


def series(frame: Any) -> list[tuple[str, Any]]:
    """(label, rows by GPU count) of every line: the points with a plan, grouped by what varies besides size."""
    ok = frame[frame["status"] == "ok"]
    varying = [c for c in _SERIES if ok[c].nunique() > 1] or ["cluster"]
    lines = []
    for key, rows in ok.groupby(varying, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        label = ", ".join(_label(c, v) for c, v in zip(varying, key))
        lines.append((label, rows.sort_values("gpus")))
    return lines


def _label(column: str, value: Any) -> str:
    if column == "global_batch_tokens":
        return f"{int(value) / 2**20:g}Mi tokens/step"
    if column == "seq_len":
        return f"seq {int(value)}"
    return str(value)


def _si(value: float) -> str:
    """1.5e6 -> '1.5M' (tick labels)."""
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def draw_scaling(frame: Any) -> tuple[Figure, dict[str, Any]]:
    """The figure and what it shows: per line, GPUs, tokens/s and the cost (or GPU-hours) per 1M tokens."""
    priced = frame["cost_per_million_tokens"].notna().any()
    fig = new_figure(11.0, 4.2)
    left, right = fig.subplots(1, 2)
    data: dict[str, Any] = {"priced": bool(priced), "lines": {}}
    for label, rows in series(frame):
        gpus = rows["gpus"].to_numpy(dtype=float)
        tps = rows["tokens_per_s"].to_numpy(dtype=float)
        per_mtok = (rows["cost_per_million_tokens"] if priced else rows["gpus"] / rows["tokens_per_s"] * 1e6 / 3600)
        per_mtok = per_mtok.to_numpy(dtype=float)
        (line,) = left.plot(gpus, tps, marker="o", label=label)
        left.plot(gpus, tps[0] * gpus / gpus[0], linestyle=":", color=line.get_color(), linewidth=1)
        right.plot(gpus, per_mtok, marker="o", label=label, color=line.get_color())
        data["lines"][label] = {"gpus": gpus.tolist(), "tokens_per_s": tps.tolist(), "per_million_tokens": per_mtok.tolist()}
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ticks = sorted({g for line in data["lines"].values() for g in line["gpus"]})
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        ax.grid(True, which="both", alpha=0.3)
        # Plain-text tick labels: the figures turn mathtext off (names from user files are text, not TeX).
        if ticks:
            ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    left.set_yscale("log")
    left.yaxis.set_major_formatter(FuncFormatter(lambda y, _: _si(y)))
    left.yaxis.set_minor_formatter(NullFormatter())
    right.set_ylim(bottom=0)
    left.set_ylabel("tokens/s (dotted: linear scaling)")
    left.set_title("throughput")
    right.set_ylabel("cost per 1M tokens" if priced else "GPU-hours per 1M tokens")
    right.set_title("cost per token" if priced else "GPU time per token (cost at a price of 1)")
    if data["lines"]:
        left.legend(fontsize="small")
    else:
        left.text(0.5, 0.5, "no point has a plan", ha="center", va="center", transform=left.transAxes)
    return fig, data


def write_scaling(frame: Any, out_dir: str | Path, *, force: bool = False) -> list[Path]:
    """Write `sweep_scaling.png` and `.svg` into `out_dir` (created if missing); the paths written."""
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False}):  # names from user files are text, not TeX
        fig, _ = draw_scaling(frame)
        return save(fig, out_dir, STEM, force=force)
