"""The framework inside the search: its feature sets as set-valued pins, its rules as the row filter.

Both are needed. The row filter alone is the truth (a row the framework cannot build is dropped), but the
search leaves out options dominated under the cost model unless they are asked for (ZeRO-2/3 under pipeline
parallelism, which hold ZeRO-1's memory); a framework without ZeRO-1 (TorchTitan) must have them searched, so
its allowed stages are passed as pins, which the space enumerates explicitly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from planner.errors import UserError
from planner.frameworks import framework

if TYPE_CHECKING:
    from planner.frameworks.profile import FrameworkProfile
    from planner.solver.space import Pins


def framework_pins(ctx: Any, pins: Pins) -> Pins:
    """`pins` narrowed to what `ctx.framework` implements, with its row filter (idempotent)."""
    from planner.solver.space import Pins

    if pins.keep is not None:
        return pins
    from planner.layout.names import RECOMPUTE_NAMES as RECOMPUTE
    from planner.layout.schedules import SCHEDULE_NAMES as SCHEDULES

    profile = framework(getattr(ctx, "framework", None))
    values = dict(pins.values)
    everything = {"schedule": set(SCHEDULES), "recompute": set(RECOMPUTE), "zero": {0, 1, 2, 3}}
    for name, allowed in profile.allowed().items():
        pinned = values.get(name)
        if pinned is None and set(allowed) == everything[name]:
            continue  # no restriction: dominated options stay out of the search as usual
        if pinned is None:
            values[name] = allowed
        elif isinstance(pinned, (tuple, list, set, frozenset)):
            values[name] = tuple(v for v in pinned if v in allowed)
        elif pinned not in allowed:
            values[name] = ()  # a pinned value the framework lacks: nothing to search
    return Pins(values, keep=profile.keep(ctx.model, ctx.workload))


def check_pins(profile: FrameworkProfile, pins: dict[str, Any]) -> None:
    """Refuse (one line, naming the framework's reason) a pinned knob value the framework cannot run."""
    for name, allowed in profile.allowed().items():
        pinned = pins.get(name)
        values = pinned if isinstance(pinned, (tuple, list, set, frozenset)) else () if pinned is None else (pinned,)
        for value in values:
            if value not in allowed and not (name == "schedule" and pins.get("pp") == 1):
                why = profile.unsupported.get(f"{name}={value}", f"{profile.label()} has no {name} {value!r}")
                raise UserError(why, where=f"--{name} {value} with --framework {profile.name}",
                                fix=f"use {' or '.join(map(str, allowed))}, or another --framework")


__all__ = ["check_pins", "framework_pins"]
