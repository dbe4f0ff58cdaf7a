"""`RunSummary`: what `meshplan run` reports, measured next to predicted (its `--json` document).

Kept apart from `planner.cli.run` so that registering the command does not import pydantic (the leading
underscore keeps `planner.cli.main` from importing it as a command module).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


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
