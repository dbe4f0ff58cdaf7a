"""Why nothing fits and what would make a model fit, for the "fits nowhere" message
(`planner.api.infeasible_message`) and the short cell of a sweep row (`short_reason`).

The search reports the least-memory layout it found; the fixes offered are the memory levers that layout
does not pull yet, naming the pin that holds a lever back when the user pinned it:

- activation recomputation (`--recompute full`): activations shrink to one layer input per layer;
- ZeRO-3 / FSDP (`--zero 3`): weights, gradients and optimizer state sharded over the DP group (only when
  there is a DP group, dp > 1);
- a smaller micro-batch (`--micro-batch 1`): activations scale with it;
- more GPUs (`--nodes/--gpus`) and a larger-memory GPU always remain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from planner.layout import Layout

GiB = 2**30


@dataclass(frozen=True)
class NothingFits:
    """Which of the ways a search can come back empty this is, with the numbers that say so.

    states   every shape was dropped on memory and the model states alone, fully sharded over all GPUs,
             exceed one GPU (`need_bytes` per GPU): only more GPUs or a larger GPU help;
    pins     every shape allowed by the pins was dropped on memory;
    batch    no layout at all (no micro-batch size divides the batch, or pins exclude everything);
    memory   layouts exist but none fits; `need_bytes` is the least peak memory found.
    """

    kind: Literal["states", "pins", "batch", "memory"]
    capacity_bytes: float
    need_bytes: float = 0.0

    def short(self, batch: int) -> str:
        """A few words for a table cell."""
        cap = f"{self.capacity_bytes / GiB:.0f} GiB"
        if self.kind == "states":
            return f"too few GPUs: model states {self.need_bytes / GiB:.0f} GiB/GPU > {cap}"
        if self.kind == "pins":
            return f"pinned shapes exceed {cap}/GPU"
        if self.kind == "batch":
            return f"no layout divides batch {batch}"
        return f"out of memory: {self.need_bytes / GiB:.0f} > {cap}/GPU"


def nothing_fits(ctx: Any, result: Any) -> NothingFits:
    """Classify an empty search result (`planner.solver.exact.SearchResult`) in context `ctx`."""
    cap = float(ctx.memory_capacity_bytes)
    stats = result.stats
    all_pruned = stats.shapes_memory_pruned and stats.shapes_memory_pruned == stats.shapes_total
    if result.best_infeasible is not None:
        return NothingFits("memory", cap, float(result.best_infeasible[1]))
    if all_pruned:
        states = ctx.model.num_params() * (ctx.weight_bytes + ctx.grad_bytes + ctx.optimizer_bytes)
        per_gpu = states / int(ctx.cluster.num_gpus)
        return NothingFits("states", cap, per_gpu) if per_gpu > cap else NothingFits("pins", cap)
    return NothingFits("batch", cap)


def short_reason(ctx: Any, result: Any) -> str:
    """Why an empty search found nothing, in a few words (a sweep's table cell)."""
    return nothing_fits(ctx, result).short(ctx.workload.batch)


def memory_fixes(layout: Layout, pins: dict[str, Any]) -> str:
    """'--recompute full (instead of the pinned none), --zero 3, ..., more GPUs (--nodes/--gpus) or a
    larger-memory GPU' for the least-memory layout `layout` under `pins` (Layout field names)."""
    fixes = []

    def lever(knob: str, flag: str, value: Any) -> None:
        pinned = pins.get(knob)
        fixes.append(f"{flag} {value}" + (f" (instead of the pinned {pinned})" if pinned is not None else ""))

    if layout.recompute != "full":
        lever("recompute", "--recompute", "full")
    if layout.zero < 3:
        if layout.dp > 1:
            lever("zero", "--zero", 3)
        elif any(pins.get(k) is not None for k in ("tp", "pp", "cp")):
            fixes.append("fewer pinned tp/pp/cp so that dp > 1 and --zero 3 can shard the model states")
    if layout.micro_batch > 1:
        lever("micro_batch", "--micro-batch", 1)
    fixes.append("more GPUs (--nodes/--gpus) or a larger-memory GPU")
    return ", ".join(fixes)
