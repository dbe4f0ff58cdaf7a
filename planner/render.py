"""Rich tables for plans: summary, step-time breakdown, memory per stage, search statistics, top-K.

Pure rendering (no planning): each function takes planner objects and returns a `rich.table.Table`, so the
CLI commands stay thin and the same tables serve `plan`, `evaluate` and `compare`. Units shown: seconds,
GiB (2**30 bytes), TFLOP/s (1e12 FLOP/s).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table

if TYPE_CHECKING:
    from planner.plan import Plan, Prediction

GiB = 2**30

BREAKDOWN_TERMS: tuple[tuple[str, str], ...] = (
    ("compute_s", "compute (fwd + bwd + recompute)"),
    ("tp_comm_s", "TP communication (exposed)"),
    ("cp_comm_s", "CP communication (exposed)"),
    ("ep_comm_s", "EP all-to-all (exposed)"),
    ("pp_comm_s", "PP send/recv (exposed)"),
    ("dp_comm_s", "DP/FSDP communication (exposed)"),
    ("bubble_s", "pipeline bubble"),
    ("optimizer_s", "optimizer step"),
)
"""Breakdown fields in display order, with their labels."""


def band_text(band: Any) -> str:
    """'-3.2 % .. +12.5 %' (real step time against the prediction), or '-' for plans without a band."""
    if band is None:
        return "-"
    return f"{100 * band.low:+.1f} % .. {100 * band.high:+.1f} %"


def honesty_rows(table: Table, pred: Prediction) -> None:
    """The prediction's error band and what it extrapolates, as rows of a two-column table."""
    band = pred.error_band
    if band is not None:
        table.add_row("error band", f"real step time {band_text(band)} of the prediction "
                      f"({seconds(pred.step_time_s * (1 + band.low))} .. {seconds(pred.step_time_s * (1 + band.high))} s; "
                      f"{band.basis})")
    if not pred.extrapolations:
        table.add_row("extrapolates", "nothing: every knob lies inside the validated runs")
    for item in pred.extrapolations:
        table.add_row("extrapolates", item)


def gib(n_bytes: float) -> str:
    return f"{n_bytes / GiB:.1f}"


def seconds(value: float) -> str:
    """Seconds with 4 significant digits (steps range from milliseconds to minutes)."""
    return f"{value:.4g}"


def mesh_text(plan: Plan) -> str:
    """All axes in rank order, outermost first: 'pp=2 x dp_replicate=1 x dp_shard=8 x cp=1 x tp=4'."""
    layout = plan.layout
    return " x ".join(f"{a}={s}" for a, s in zip(layout.mesh_axes, layout.mesh_shape))


_AXIS_SHORT = {"pp": "pp", "dp_replicate": "dpr", "dp_shard": "dps", "cp": "cp", "tp": "tp"}


def mesh_short(plan: Plan) -> str:
    """Axes larger than 1 in rank order, outermost first: 'pp2>dps8>tp4' (dpr/dps: DP replicate/shard)."""
    layout = plan.layout
    parts = [f"{_AXIS_SHORT[a]}{s}" for a, s in zip(layout.mesh_axes, layout.mesh_shape) if s > 1]
    return ">".join(parts) or "-"


def gpu_name(plan: Plan) -> str:
    gpus = plan.inputs.cluster.get("gpus", {})
    return "+".join(sorted(gpus)) or "GPU"


def summary_table(plan: Plan, title: str | None = None) -> Table:
    """What the plan is and what it achieves."""
    lay, pred, w = plan.layout, plan.prediction, plan.inputs.workload
    n_gpus = plan.world_size + pred.idle_gpus
    table = Table(title=title or f"plan: {plan.inputs.model.name} on {n_gpus} x {gpu_name(plan)}",
                  show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    table.add_row("layout", lay.describe())
    table.add_row("mesh (rank order)", mesh_text(plan))
    table.add_row("world size", f"{plan.world_size}" + (f" ({pred.idle_gpus} GPUs idle)" if pred.idle_gpus else ""))
    table.add_row("batch", f"{w.batch} sequences x {w.seq_len} tokens = {w.tokens_per_step:,} tokens/step")
    if lay.pp > 1:
        table.add_row("layers per chunk", ", ".join(str(n) for n in lay.partition(plan.inputs.model.num_layers)))
    table.add_row("step time", f"{seconds(pred.step_time_s)} s")
    table.add_row("tokens/s", f"{pred.tokens_per_s:,.0f}")
    table.add_row("MFU", f"{pred.mfu * 100:.1f} %")
    table.add_row("TFLOP/s per GPU", f"{pred.model_tflops_per_gpu:.1f} model, {pred.hardware_tflops_per_gpu:.1f} hardware")
    cap = max(s.capacity_bytes for s in pred.memory_per_stage)
    table.add_row("peak memory", f"{gib(pred.peak_memory_bytes)} GiB of {gib(cap)} GiB")
    table.add_row("proven optimal", "yes" if plan.proven_optimal else "no")
    honesty_rows(table, pred)
    for note in plan.notes:
        table.add_row("note", note)
    return table


def breakdown_table(pred: Prediction) -> Table:
    """Critical-path seconds per cause and their share of the step (they add up to the step time)."""
    table = Table(title="step time breakdown", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("term")
    table.add_column("seconds", justify="right")
    table.add_column("% of step", justify="right")
    step = pred.step_time_s
    b = pred.breakdown
    for field, label in BREAKDOWN_TERMS:
        value = getattr(b, field)
        table.add_row(label, seconds(value), f"{100 * value / step:.1f}")
    table.add_row("total", seconds(b.total_s), f"{100 * b.total_s / step:.1f}", style="bold")
    return table


def memory_table(pred: Prediction) -> Table:
    """Peak memory of every pipeline rank by component, against the GPU's capacity (GiB)."""
    stages = pred.memory_per_stage
    caps = {s.capacity_bytes for s in stages}
    one_cap = len(caps) == 1
    title = "memory per pipeline stage, GiB per GPU" + (f" (capacity {gib(caps.pop())} GiB)" if one_cap else "")
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    names = ["stage", "weight", "grad", "optim", "activ", "logit", "buffer", "reserve", "total"]
    names += ([] if one_cap else ["capacity"]) + ["fits"]
    for name in names:
        table.add_column(name, justify="left" if name == "stage" else "right", no_wrap=True, min_width=len(name))
    for s in stages:
        cells = [str(s.stage), gib(s.weights_bytes), gib(s.gradients_bytes), gib(s.optimizer_bytes),
                 gib(s.activations_bytes), gib(s.logits_bytes), gib(s.buffers_bytes), gib(s.reserve_bytes),
                 gib(s.total_bytes)]
        cells += ([] if one_cap else [gib(s.capacity_bytes)]) + ["yes" if s.fits else "NO"]
        table.add_row(*cells)
    return table


def stats_table(stats: Any, wall_s: float) -> Table:
    """How the exact search went (planner.solver.exact.SearchStats)."""
    table = Table(title="search", show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value", justify="right")
    table.add_row("shapes (dp x tp x pp x cp x ep)", f"{stats.shapes_total:,}")
    table.add_row("  pruned by memory bound", f"{stats.shapes_memory_pruned:,}")
    table.add_row("  pruned by time bound", f"{stats.shapes_bound_pruned:,}")
    table.add_row("  without any valid micro-batch size", f"{stats.shapes_without_layout:,}")
    table.add_row("  evaluated", f"{stats.shapes_evaluated:,}")
    table.add_row("  micro-batch sizes pruned by time bound", f"{stats.micro_batches_bound_pruned:,}")
    table.add_row("ZeRO options skipped by their bound (layouts never built)",
                  f"{getattr(stats, 'options_skipped_by_bound', 0):,}")
    table.add_row("layouts skipped by their own bound", f"{getattr(stats, 'rows_skipped_by_bound', 0):,}")
    table.add_row("layouts evaluated", f"{stats.rows_evaluated:,}")
    table.add_row("  that fit but were pruned by time bound", f"{stats.rows_bound_pruned:,}")
    table.add_row("layouts that fit", f"{stats.rows_feasible:,}")
    table.add_row("proven optimal", "yes" if stats.proven_optimal else "no")
    table.add_row("wall time", f"{wall_s:.3f} s")
    return table


def top_table(plans: list[Plan]) -> Table:
    """The K best plans, best first, with their slowdown against the best."""
    table = Table(title=f"top {len(plans)}", title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("#", "layout", "mesh", "step s", "vs best", "error band", "extrap.", "tokens/s", "MFU %", "peak GiB"):
        table.add_column(name, justify="left" if name in ("layout", "mesh") else "right", no_wrap=True)
    best = plans[0].prediction.step_time_s if plans else 1.0
    for i, p in enumerate(plans, 1):
        pred = p.prediction
        table.add_row(
            str(i), p.layout.describe(), mesh_short(p), seconds(pred.step_time_s),
            f"+{100 * (pred.step_time_s / best - 1):.1f} %", band_text(pred.error_band), str(len(pred.extrapolations)),
            f"{pred.tokens_per_s:,.0f}", f"{pred.mfu * 100:.1f}",
            gib(pred.peak_memory_bytes),
        )
    return table


def dataframe_table(frame: Any, title: str | None = None, formats: dict[str, str] | None = None) -> Table:
    """A pandas DataFrame as a rich table (numbers right-aligned, floats with `formats[column]`)."""
    formats = formats or {}
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for col in frame.columns:
        numeric = frame[col].dtype.kind in "iuf"
        table.add_column(str(col), justify="right" if numeric else "left", overflow="fold", no_wrap=numeric)
    for row in frame.itertuples(index=False):
        cells = []
        for col, value in zip(frame.columns, row):
            value = value.item() if hasattr(value, "item") else value  # numpy scalar -> Python
            if isinstance(value, bool):
                cells.append("yes" if value else "NO")
            elif isinstance(value, float):
                cells.append(format(value, formats.get(col, ".4g")))
            else:
                cells.append(str(value))
        table.add_row(*cells)
    return table


def print_wide(console: Any, table: Table) -> None:
    """Print at the table's natural width even when the terminal is narrower (lines then wrap in the terminal
    instead of rich squeezing columns to nothing): wide comparisons stay readable and greppable."""
    from rich.measure import Measurement

    need = Measurement.get(console, console.options.update_width(400), table).maximum
    if need <= console.width:
        console.print(table)
        return
    # Console.print clamps `width` to the console's own width, so render with a wider twin on the same file.
    wide = type(console)(file=console.file, width=need, highlight=False, emoji=False, soft_wrap=True, markup=False,
                   color_system=console.color_system, force_terminal=console.is_terminal)
    wide.print(table)
