"""DeepSpeed 0.19.8 (from the package index, DS_BUILD_OPS=0): what its engine builds, read from its source.

Sources (deepspeed 0.19.8): runtime/zero/config.py (stages 0-3; the MiCS keys are gone: "MiCS ZeRO-3 sharding
has been removed"), runtime/config.py (train_batch_size = micro x gradient_accumulation x data-parallel size,
where the data-parallel size is world / (tp x pp) as the mpu reports it: CP ranks count as data-parallel),
runtime/pipe/engine.py (PipelineModule runs its own 1F1B-like TrainSchedule; "ZeRO-2 and ZeRO-3 are
incompatible with pipeline parallelism"; gradients are reduced after the last backward), moe/layer.py (ep_size
groups inside the data-parallel ranks; enable_expert_tensor_parallelism splits experts by TP). TP comes from the
model code (an mpu such as Megatron-DeepSpeed's); DeepSpeed's sequence parallelism is Ulysses (all-to-all), not
the ring/all-gather CP the cost model costs. The rules read from them (deepspeed.cp, .hsdp, .pp-zero, its
schedule, recompute policies and mesh order) are in `planner.layout.framework_rules`.
"""

from __future__ import annotations

from planner.frameworks.profile import FrameworkProfile

PROFILE = FrameworkProfile(
    name="deepspeed",
    title="DeepSpeed",
    release="0.19.8",
    pip="DS_BUILD_OPS=0 pip install deepspeed==0.19.8",
    cp="",
    ep="deepspeed.moe ep_size groups inside the data-parallel ranks",
    runtime="pytorch",
    overlap_dp_comm=True,
    fused_elementwise="eager PyTorch kernels (runtime pytorch)",
    export_target="deepspeed",
)
