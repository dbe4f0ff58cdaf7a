"""meshplan's own executor (`meshplan run`): what it builds, straight from executor/ (the default framework)."""

from __future__ import annotations

from planner.frameworks.profile import FrameworkProfile, Rule


def _dtype(model, workload) -> str | None:
    if workload.dtype in ("fp16", "fp8"):
        return (f"meshplan run trains bf16 (GPU) or fp32, not {workload.dtype} (executor.train.param_dtype_for)")
    return None


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
    ep="",
    mesh_orders=None,
    runtime="pytorch",
    overlap_dp_comm=True,
    fused_elementwise="eager PyTorch kernels (no torch.compile)",
    export_target="torchrun",
    rules=(
        Rule("meshplan.ep", "meshplan run keeps every expert on every rank (executor.moe): ep={ep} cannot run",
             "plan with ep=1, or for a framework with expert parallelism (--framework megatron|torchtitan|deepspeed)",
             lambda t, model, w: t["ep"] > 1),
    ),
    model_rules=(_dtype,),
)
