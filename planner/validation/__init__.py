"""How far to trust a prediction: error bands from validated runs and the list of what a plan extrapolates.

`records` is the committed data (validated_runs.json, written by benchmarks/published_runs.py), `bands` the
error band of a prediction from the runs that share its features, `extrapolations` the knobs of a plan outside
every validated run. `honesty(ctx, layout, mfu)` gives both for one plan.
"""

from __future__ import annotations


def honesty(ctx, layout, mfu: float):
    """(error band, extrapolations) of a plan's prediction: see `bands.band_for` and `extrapolations`."""
    from planner.solver.space import nvlink_domain_size
    from planner.validation.bands import band_for, features, gpu_family
    from planner.validation.extrapolations import extrapolations

    f = features(gpu_family(ctx.gpu.name), str(ctx.workload.runtime), layout.tp, layout.pp, layout.cp, layout.ep,
                 layout.zero, layout.schedule, layout.world_size, nvlink_domain_size(ctx.cluster))
    return band_for(f), extrapolations(ctx, layout, mfu)
