"""DeepSpeed 0.19.8 (from the package index, DS_BUILD_OPS=0): what its engine builds, read from its source.

Sources (deepspeed 0.19.8): runtime/zero/config.py (stages 0-3; the MiCS keys are gone: "MiCS ZeRO-3 sharding
has been removed"), runtime/config.py (train_batch_size = micro x gradient_accumulation x data-parallel size,
where the data-parallel size is world / (tp x pp) as the mpu reports it: CP ranks count as data-parallel),
runtime/pipe/engine.py (PipelineModule runs its own 1F1B-like TrainSchedule; "ZeRO-2 and ZeRO-3 are
incompatible with pipeline parallelism"; gradients are reduced after the last backward), moe/layer.py (ep_size
groups inside the data-parallel ranks; enable_expert_tensor_parallelism splits experts by TP). TP comes from the model code (an mpu such as Megatron-DeepSpeed's);
DeepSpeed's sequence parallelism is Ulysses (all-to-all), not the ring/all-gather CP the cost model costs.
"""

from __future__ import annotations

from planner.frameworks.profile import FrameworkProfile, Rule

PROFILE = FrameworkProfile(
    name="deepspeed",
    title="DeepSpeed",
    release="0.19.8",
    pip="DS_BUILD_OPS=0 pip install deepspeed==0.19.8",
    schedules={"1f1b": "PipelineEngine TrainSchedule (1F1B order)"},
    recompute={"none": "no recomputation",
               "full": "deepspeed.checkpointing.checkpoint around every transformer layer (model code)"},
    zero={0: "plain data parallel (allreduce)", 1: "ZeRO stage 1", 2: "ZeRO stage 2", 3: "ZeRO stage 3"},
    unsupported={"schedule=interleaved": "DeepSpeed's pipeline engine has no interleaved schedule",
                 "schedule=zb-h1": "DeepSpeed's pipeline engine has no zero-bubble schedule",
                 "schedule=gpipe": "DeepSpeed's pipeline engine runs its own 1F1B-order TrainSchedule",
                 "recompute=selective": "DeepSpeed has no attention-core recomputation of its own"},
    cp="",
    ep="deepspeed.moe ep_size groups inside the data-parallel ranks",
    mesh_orders=(("pp", "dp_replicate", "dp_shard", "cp", "tp"),),
    runtime="pytorch",
    overlap_dp_comm=True,
    fused_elementwise="eager PyTorch kernels",
    export_target="deepspeed",
    rules=(
        Rule("deepspeed.cp", "DeepSpeed 0.19.8 has no ring or all-gather context parallelism (cp={cp}); its Ulysses "
             "sequence parallelism is a different algorithm", "plan with cp=1", lambda t, m, w: t["cp"] > 1),
        Rule("deepspeed.hsdp", "DeepSpeed 0.19.8 removed MiCS: ZeRO shards over all {dp} data-parallel ranks, not "
             "groups of {dp_shard}", "use a sharding group equal to dp (no HSDP)",
             lambda t, m, w: (t["zero"] > 0) & (t["dp_shard"] != t["dp"])),
        Rule("deepspeed.pp-zero", "DeepSpeed's pipeline engine supports ZeRO stage 0 or 1 only, not {zero}",
             "use zero 0 or 1 with pp > 1", lambda t, m, w: (t["pp"] > 1) & (t["zero"] >= 2)),
    ),
)
