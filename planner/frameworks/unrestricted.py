"""`framework="any"`: the cost model's whole space, with no framework's rules and no runtime of its own.

For what-if studies of software meshplan has no profile for, e.g. the historical stacks of
benchmarks/published_runs.py, which pin each source's own feature set. Not a CLI choice: a plan made with it
names no framework a user trains with, and every export re-checks it against the target framework's rules.
The workload's runtime costs are used as given.
"""

from __future__ import annotations

from planner.frameworks.profile import FrameworkProfile

PROFILE = FrameworkProfile(
    name="any",
    title="any framework (no rules)",
    release="",
    pip="",
    schedules={"gpipe": "", "1f1b": "", "interleaved": "", "zb-h1": ""},
    recompute={"none": "", "selective": "", "full": ""},
    zero={0: "", 1: "", 2: "", 3: ""},
    unsupported={},
    cp="all-gathered K/V (as costed)",
    ep="inside DP x CP (as costed)",
    mesh_orders=None,
    runtime="",
    overlap_dp_comm=True,
    fused_elementwise="as the GPU profile's calibrated overhead",
    export_target="",
)
