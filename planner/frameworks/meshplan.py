"""meshplan's own executor (`meshplan run`): what it builds, straight from executor/ (the default framework)."""

from __future__ import annotations

import numpy as np

from planner.frameworks.profile import FrameworkProfile, Rule
from planner.layout.table import MESH_ORDERS


def _dtype(model, workload) -> str | None:
    if workload.dtype in ("fp16", "fp8"):
        return (f"meshplan run trains bf16 (GPU) or fp32, not {workload.dtype} (executor.train.param_dtype_for)")
    return None


def _ep_not_a_block(t, model, workload) -> np.ndarray:
    """Rows whose EP group is not a block of the data axes in their mesh order (planner.expert_groups, the rule
    executor.train.check_plan applies)."""
    from planner.layout.expert_groups import data_axes_inner_first, ep_parts

    bad = np.zeros(len(t["ep"]), dtype=bool)
    sizes = {"dp_replicate": t["dp"] // t["dp_shard"], "dp_shard": t["dp_shard"], "cp": t["cp"]}
    for code in np.unique(t["order"]).tolist():
        rows = t["order"] == code
        _, ok = ep_parts(t["ep"][rows], {k: v[rows] for k, v in sizes.items()},
                         data_axes_inner_first(MESH_ORDERS[int(code)]))
        bad[rows] = (t["ep"][rows] > 1) & ~ok
    return bad


PROFILE = FrameworkProfile(
    name="meshplan",
    title="meshplan run",
    release="",
    pip="pip install meshplan",
    schedules={"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved": "ScheduleInterleaved1F1B",
               "zb-h1": "ScheduleInterleavedZeroBubble, one chunk per rank"},
    recompute={"none": "nothing recomputed",
               "selective": "the attention core softmax(QK^T)V of every layer (executor.ac)",
               "full": "every decoder layer from its input (executor.ac)"},
    zero={0: "FSDP2 replicate (DDP) over DP x CP", 1: "fully_shard(reshard_after_forward=False), one reduction per step",
          2: "fully_shard(reshard_after_forward=False), reduce-scatter every micro-batch",
          3: "fully_shard(reshard_after_forward=True); HSDP on (dp_replicate x cp, dp_shard)"},
    unsupported={},
    cp="all-gathered K/V over 2*cp load-balanced chunks (Llama 3 paper Sec. 3.3.2; executor.cp)",
    ep="ep consecutive ranks of dp_replicate x dp_shard x cp in the plan's axis order (planner.expert_groups)",
    mesh_orders=None,
    runtime="pytorch",
    overlap_dp_comm=True,
    fused_elementwise="eager PyTorch kernels (no torch.compile)",
    export_target="torchrun",
    rules=(
        Rule("meshplan.ep-group", "meshplan run forms an EP group from ep consecutive ranks of the data axes "
             "(planner.expert_groups): ep={ep} is not a block of them in the order {order}",
             "choose another ep or mesh order", _ep_not_a_block),
    ),
    model_rules=(_dtype,),
)
