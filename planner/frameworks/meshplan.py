"""meshplan's own executor (`meshplan run`): what it builds, straight from executor/ (the default framework).

Its rules (the EP-group block rule of `planner.layout.expert_groups`, its precisions) and what its recompute
policies and ZeRO stages mean there are in `planner.layout.framework_rules`; the executor applies the same
rules to every plan it runs (`executor.train.check_plan`).
"""

from __future__ import annotations

from planner.frameworks.profile import FrameworkProfile

PROFILE = FrameworkProfile(
    name="meshplan",
    title="meshplan run",
    release="",
    pip="pip install meshplan",
    cp="all-gathered K/V over 2*cp load-balanced chunks (Llama 3 paper Sec. 3.3.2; executor.cp)",
    ep="ep consecutive ranks of dp_replicate x dp_shard x cp in the plan's axis order (planner.layout.expert_groups)",
    runtime="pytorch",
    overlap_dp_comm=True,
    fused_elementwise="eager PyTorch kernels, no torch.compile (runtime pytorch)",
    export_target="torchrun",
)
