"""Per-step metrics, measured next to the plan's prediction: JSON lines, and a progress line on rank 0.

One JSON object per step in `metrics.jsonl` (rank 0 writes it; keys below, SI units):
  step, loss, step_time_s, predicted_step_time_s, deviation (step_time_s / predicted - 1: +0.25 means 25%
  slower than predicted), tokens_per_s, predicted_tokens_per_s, mfu, predicted_mfu, peak_memory_bytes
  (CUDA: largest `max_memory_allocated` over all ranks, to compare with the prediction's max over pipeline
  stages; null on CPU), predicted_peak_memory_bytes, smoke, restart (torchrun's restart count of the process
  that ran the step: after a restart the steps since the last checkpoint appear again, with the higher count).

MFU = tokens/s x model FLOP per token / (sum of every rank's device peak FLOP/s, `planner.plan.peak_flops_of_ranks`) (PaLM, Chowdhery et al. 2022,
appendix B), with the model FLOPs of the `ModelSpec` actually run (the smoke one under --smoke, same
accounting as the planner: `training_flops_per_token(...).model_flops`, recomputation not counted). Null
when the device's peak is unknown or the run is not on the planned device (a smoke run of a GPU plan).
Under --smoke the predictions are for the full-size model: the deviation then measures nothing, so it is
null (and the progress line shows no prediction), and the record says `smoke: true`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


class MetricsLog:
    def __init__(
        self,
        path: Path | None,
        *,
        predicted_step_time_s: float,
        predicted_tokens_per_s: float,
        predicted_mfu: float,
        predicted_peak_memory_bytes: float | None = None,
        tokens_per_step: int,
        flops_per_token: float | None,
        peak_flops_total: float | None,
        total_steps: int,
        smoke: bool,
        printer: Callable[[str], None] | None = None,
        append: bool = False,
        restart: int = 0,
    ) -> None:
        self.path = path
        self.predicted_step_time_s = predicted_step_time_s
        self.predicted_tokens_per_s = predicted_tokens_per_s
        self.predicted_mfu = predicted_mfu
        self.predicted_peak_memory_bytes = predicted_peak_memory_bytes
        self.tokens_per_step = tokens_per_step
        self.flops_per_token = flops_per_token
        self.peak_flops_total = peak_flops_total
        self.total_steps = total_steps
        self.smoke = smoke
        self.restart = restart
        self.printer = printer or (lambda line: print(line, file=sys.stdout, flush=True))
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        # A resumed run appends to its metrics; a fresh one starts the file over.
        mode = "a" if append else "w"
        self._fh = open(path, mode, encoding="utf-8") if path is not None else None  # noqa: SIM115

    def record(self, step: int, loss: float, step_time_s: float, peak_memory_bytes: int | None = None) -> dict[str, Any]:
        tokens_per_s = self.tokens_per_step / step_time_s
        mfu = None
        if self.flops_per_token is not None and self.peak_flops_total:
            mfu = tokens_per_s * self.flops_per_token / self.peak_flops_total
        pred = self.predicted_step_time_s
        row = {
            "step": step,
            "loss": loss,
            "step_time_s": step_time_s,
            "predicted_step_time_s": pred,
            "deviation": (step_time_s / pred - 1.0) if pred > 0 and not self.smoke else None,
            "tokens_per_s": tokens_per_s,
            "predicted_tokens_per_s": self.predicted_tokens_per_s,
            "mfu": mfu,
            "predicted_mfu": self.predicted_mfu,
            "peak_memory_bytes": peak_memory_bytes,
            "predicted_peak_memory_bytes": self.predicted_peak_memory_bytes,
            "smoke": self.smoke,
            "restart": self.restart,
        }
        if self._fh is not None:
            self._fh.write(json.dumps(row) + "\n")
            self._fh.flush()
        self._print(row)
        return row

    def _print(self, row: dict[str, Any]) -> None:
        dev = row["deviation"]
        dev_text = f"{dev:+.0%}" if dev is not None else "n/a"
        mfu_text = f"{row['mfu']:.1%}" if row["mfu"] is not None else "n/a"
        predicted = "" if self.smoke else f" (predicted {row['predicted_step_time_s'] * 1e3:.1f} ms, {dev_text})"
        line = (
            f"step {row['step']}/{self.total_steps}  loss {row['loss']:.4f}  {row['step_time_s'] * 1e3:.1f} ms"
            f"{predicted}  {row['tokens_per_s']:.0f} tok/s  mfu {mfu_text}"
        )
        self.printer(line)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
