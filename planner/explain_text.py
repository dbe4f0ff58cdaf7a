"""The words of `planner.explain`: values as text, NVLink domains spanned, the one-line verdict per knob."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from planner.plan import Plan

GiB = 2**30

AXES_OF = {"tp": ("tp",), "cp": ("cp",), "pp": ("pp",), "dp": ("dp_replicate", "dp_shard"),
           "zero": ("dp_replicate", "dp_shard"), "dp_shard": ("dp_shard",)}
SHORT = {"compute_s": "compute", "tp_comm_s": "TP communication", "cp_comm_s": "CP communication",
          "ep_comm_s": "EP all-to-all", "pp_comm_s": "PP send/recv", "dp_comm_s": "DP/FSDP communication",
          "bubble_s": "the pipeline bubble", "optimizer_s": "the optimizer step"}


def value_text(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def worst_stage(plan: Plan) -> str:
    worst = max(plan.prediction.memory_per_stage, key=lambda s: s.total_bytes - s.capacity_bytes)
    return (f"stage {worst.stage} needs {worst.total_bytes / GiB:.1f} GiB of "
            f"{worst.capacity_bytes / GiB:.1f} GiB")


def _domains(plan: Plan, axes: tuple[str, ...]) -> int:
    """Scale-up (NVLink) domains spanned by rank 0's group along `axes` (hosts without a rack-scale domain)."""
    lay = plan.layout
    sizes = dict(zip(lay.mesh_axes, lay.mesh_shape))
    dom = plan.inputs.cluster.get("nvlink_domain") or {}
    hosts_per_domain = int(dom.get("hosts", 1))
    ranks = [0]
    for axis in axes:  # rank 0's group: vary the group's axes, others at 0
        stride = int(np.prod([sizes[a] for a in lay.mesh_axes[lay.mesh_axes.index(axis) + 1:]], dtype=np.int64))
        ranks = [r + j * stride for r in ranks for j in range(sizes[axis])]
    return len({plan.placement[r].host // hosts_per_domain for r in ranks})


def _scaleup_word(plan: Plan) -> str:
    groups = plan.inputs.cluster.get("host_groups") or [{}]
    link = str(groups[0].get("node", {}).get("scaleup_link") or "")
    return "NVLink domains" if link.startswith("nvlink") else "hosts"


SHOWN_WITH = ("tp", "pp", "dp", "cp", "micro_batch", "schedule", "virtual_stages", "zero", "sequence_parallel")
"""Knobs listed next to a runner-up when they differ from the plan (what else had to change)."""


def pct(value: float) -> str:
    return f"{value:.2f}" if abs(value) < 0.1 else f"{value:.1f}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n != 1 else f"1 {word.removesuffix('s')}"


def verdict(knob: str, base: Plan, alt: Plan | None, ru: Any, no_fit: str | None,
             blocked: str | None, lone: bool = False) -> str:
    name = knob.upper() if knob in ("tp", "pp", "dp", "cp", "ep") else knob
    if ru is None or alt is None:
        text = f"{'the other' if lone else 'every other'} {name} {no_fit}" if no_fit else f"no valid layout with another {name}"
        return text + (f"; {blocked}" if blocked else "")
    head = f"{name}={ru.value}"
    others = [f"{k}={value_text(getattr(alt.layout, k))}" for k in SHOWN_WITH
              if k != knob and getattr(alt.layout, k) != getattr(base.layout, k)
              and not (k == "sequence_parallel" and alt.layout.tp == 1)]
    if others:
        head += f" (with {', '.join(others)})"
    axes = AXES_OF.get(knob)
    if axes and int(np.prod([alt.layout.axis_sizes()[a] for a in axes])) > 1:
        d0, d1 = _domains(base, axes), _domains(alt, axes)
        if d1 != d0:
            head += f" {'spans' if d1 > d0 else 'stays in'} {_plural(d1, _scaleup_word(alt))} (was {d0})"
    if ru.delta_pct < -1e-7:
        return (f"{head} is {pct(-ru.delta_pct)} % faster: the plan is not the optimum along this knob (pinned, or "
                "outside the searched space)")
    if ru.delta_pct <= 1e-7:
        return f"{head} ties (same step time)"
    term = ru.main_term
    text = (f"{head}: +{pct(ru.delta_pct)} % step time, most in {SHORT[term]} "
            f"(+{ru.term_deltas_s[term]:.3g} s)")
    return text + (f"; {blocked}" if blocked else "")
