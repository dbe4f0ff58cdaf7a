"""`RunSummary`: what `meshplan run` reports, measured next to predicted (its `--json` document), how it is
computed from the run's metrics (`summarise`) and shown (`render`).

`summarise` takes medians over the steps of metrics.jsonl (rank 0 writes one line per step,
executor.metrics), the first step left out as warm-up when there are more. A --smoke run trained a toy-size
model, so its summary has no deviation and its table no predicted column.

Kept apart from `planner.cli.run` so that registering the command does not import pydantic (the leading
underscore keeps `planner.cli.main` from importing it as a command module).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import UserError


class RunSummary(BaseModel):
    """Measured vs predicted over a run (medians over steps, the first step left out as warm-up when
    there are more)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plan: str = Field(description="Plan file that was run.")
    layout: str = Field(description="Layout, as `Layout.describe()`.")
    steps: int = Field(description="Steps summarised (count).")
    smoke: bool = Field(description="Toy-size model: predictions are for the full-size model.")
    median_step_time_s: float = Field(description="Measured median step time (s).")
    predicted_step_time_s: float = Field(description="Cost model's step time (s).")
    median_tokens_per_s: float = Field(description="Measured median throughput (tokens/s).")
    predicted_tokens_per_s: float = Field(description="Cost model's throughput (tokens/s).")
    median_mfu: float | None = Field(description="Measured median MFU (fraction); null if the peak is unknown.")
    predicted_mfu: float = Field(description="Cost model's MFU (fraction).")
    deviation: float | None = Field(description="median_step_time_s / predicted_step_time_s - 1 (fraction); null "
                                   "under --smoke (the predictions are for the full-size model).")
    peak_memory_bytes: int | None = Field(description="Largest measured peak over steps and ranks (bytes); null on CPU.")
    predicted_peak_memory_bytes: float = Field(description="Cost model's peak memory, max over pipeline stages (bytes).")
    final_loss: float = Field(description="Loss of the last step.")
    metrics: str = Field(description="JSON-lines metrics file of the run.")


def summarise(plan: Any, plan_path: Path, metrics: Path, smoke: bool) -> RunSummary:
    from hardware_profiles.reader import MAX_PLAN_BYTES, parse_json, read_text

    text = read_text(metrics, max_bytes=MAX_PLAN_BYTES, what="metrics file")
    rows = [parse_json(line, where=f"{metrics} line {i}") for i, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not rows:
        raise UserError("no steps were recorded", where=str(metrics))
    body = rows[1:] if len(rows) > 1 else rows  # the first step pays one-off setup (warm-up)
    step_s = statistics.median(r["step_time_s"] for r in body)
    mfus = [r["mfu"] for r in body if r["mfu"] is not None]
    peaks = [r["peak_memory_bytes"] for r in rows if r.get("peak_memory_bytes") is not None]
    pred = plan.prediction
    return RunSummary(
        plan=str(plan_path), layout=plan.layout.describe(), steps=len(body), smoke=smoke,
        median_step_time_s=step_s, predicted_step_time_s=pred.step_time_s,
        median_tokens_per_s=statistics.median(r["tokens_per_s"] for r in body),
        predicted_tokens_per_s=pred.tokens_per_s,
        median_mfu=statistics.median(mfus) if mfus else None, predicted_mfu=pred.mfu,
        deviation=step_s / pred.step_time_s - 1.0 if pred.step_time_s > 0 and not smoke else None,
        peak_memory_bytes=max(peaks) if peaks else None, predicted_peak_memory_bytes=pred.peak_memory_bytes,
        final_loss=rows[-1]["loss"], metrics=str(metrics),
    )


def render(s: RunSummary) -> None:
    """The measured-vs-predicted table; a --smoke run shows the measured column only (the predictions are
    for the full-size model, so a comparison would mean nothing)."""
    from rich.table import Table

    from planner.cli.app import err, out

    def pct(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.1%}"

    gib = 2**30
    measured_mem = "n/a (CPU)" if s.peak_memory_bytes is None else f"{s.peak_memory_bytes / gib:.2f} GiB"
    rows = [("median step time", f"{s.median_step_time_s * 1e3:.2f} ms", f"{s.predicted_step_time_s * 1e3:.2f} ms"),
            ("tokens/s", f"{s.median_tokens_per_s:,.0f}", f"{s.predicted_tokens_per_s:,.0f}"),
            ("MFU", pct(s.median_mfu), pct(s.predicted_mfu)),
            ("peak memory", measured_mem, f"{s.predicted_peak_memory_bytes / gib:.2f} GiB"),
            ("deviation (step time)", "n/a" if s.deviation is None else f"{s.deviation:+.1%}", ""),
            ("final loss", f"{s.final_loss:.4f}", "")]
    if s.smoke:
        table = Table(title=f"{s.layout}: measured ({s.steps} steps, smoke: toy-size model)")
        columns, rows = ("", "measured"), [r[:2] for r in rows if r[0] != "deviation (step time)"]
    else:
        table = Table(title=f"{s.layout}: measured vs predicted ({s.steps} steps)")
        columns = ("", "measured", "predicted")
    for col in columns:
        table.add_column(col, justify="right" if col else "left")
    for row in rows:
        table.add_row(*row)
    out.print(table)
    if s.smoke:
        err.print("note: --smoke ran a toy-size model with a smaller batch; the plan's predictions are for the "
                  "full-size model and are not compared", markup=False)
