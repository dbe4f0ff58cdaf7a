"""`framework="any"`: the cost model's whole space, with no framework's rules and no runtime of its own.

For what-if studies of software meshplan has no profile for, e.g. the historical stacks of
benchmarks/published_runs.py, which pin each source's own feature set. Not a CLI choice: a plan made with it
names no framework a user trains with, and every export re-checks it against the target framework's rules.
The workload's runtime costs are used as given; `planner.layout.rules.rules_for("any")` is the generic rules.
"""

from __future__ import annotations

from planner.frameworks.profile import FrameworkProfile
from planner.layout.names import ANY_FRAMEWORK

PROFILE = FrameworkProfile(
    name=ANY_FRAMEWORK,
    title="any framework (no rules)",
    release="",
    pip="",
    cp="all-gathered K/V (as costed)",
    ep="inside DP x CP (as costed)",
    runtime="",
    overlap_dp_comm=True,
    fused_elementwise="as the GPU profile's calibrated overhead",
    export_target="",
)
