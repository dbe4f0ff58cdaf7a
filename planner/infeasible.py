"""What would make a model fit, for the "fits nowhere" message (`planner.api.infeasible_message`).

The search reports the least-memory layout it found; the fixes offered are the memory levers that layout
does not pull yet, naming the pin that holds a lever back when the user pinned it:

- activation recomputation (`--recompute full`): activations shrink to one layer input per layer;
- ZeRO-3 / FSDP (`--zero 3`): weights, gradients and optimizer state sharded over the DP group (only when
  there is a DP group, dp > 1);
- a smaller micro-batch (`--micro-batch 1`): activations scale with it;
- more GPUs (`--nodes/--gpus`) and a larger-memory GPU always remain.
"""

from __future__ import annotations

from typing import Any

from planner.layout import Layout


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
