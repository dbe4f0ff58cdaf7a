"""Megatron-LM / Megatron-Core core_v0.19 (megatron-core 0.19.0 from the package index; the Megatron-LM
core_v0.19.0 tag for the training arguments): what it builds, read from its source.

Sources: megatron/core/parallel_state.py `initialize_model_parallel` (DP = world / (tp*pp*cp); expert
groups: etp = tp, edp = world / (etp*ep*pp), so EP lives inside DP x CP; order tp-cp-ep-dp-pp, or
tp-cp-ep-pp-dp with --use-tp-pp-dp-mapping, which asserts "the data parallel size of the attention and moe
layers must be the same" under pp > 1, i.e. edp == dp, i.e. cp == ep; num_distributed_optimizer_instances
must divide dp*cp and edp); megatron/training/arguments.py (--recompute-granularity selective recomputes
the attention core, core_attn, as Korthikanti et al. 2022; schedules: 1F1B and interleaved 1F1B only;
--use-distributed-optimizer shards the optimizer over dp x cp; Megatron-FSDP for ZeRO-2/3; --cp-comm-type
all_gather is the cost model's all-gathered K/V).
"""

from __future__ import annotations

from planner.frameworks.profile import FrameworkProfile, Rule, dp_outer

ORDERS = (("pp", "dp_replicate", "dp_shard", "cp", "tp"),  # tp-cp-ep-dp-pp (default)
          ("dp_replicate", "dp_shard", "pp", "cp", "tp"))  # tp-cp-ep-pp-dp (--use-tp-pp-dp-mapping)


def _dtype(model, workload) -> str | None:
    if workload.dtype == "fp8":
        return "dtype fp8: Megatron trains fp8 only through Transformer Engine recipes the export does not set; plan bf16"
    return None


PROFILE = FrameworkProfile(
    name="megatron",
    title="Megatron-LM",
    release="core_v0.19.0",
    pip="pip install megatron-core==0.19.0  (plus a Megatron-LM core_v0.19.0 checkout for pretrain_gpt.py)",
    schedules={"1f1b": "1F1B (forward_backward_pipelining_without_interleaving)",
               "interleaved": "interleaved 1F1B (--num-layers-per-virtual-pipeline-stage)"},
    recompute={"none": "no recomputation",
               "selective": "--recompute-granularity selective: the attention core (core_attn), as costed",
               "full": "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"},
    zero={0: "DDP (--overlap-grad-reduce)", 1: "--use-distributed-optimizer (shards over dp x cp)",
          2: "Megatron-FSDP --data-parallel-sharding-strategy optim_grads",
          3: "Megatron-FSDP --data-parallel-sharding-strategy optim_grads_params"},
    unsupported={"schedule=zb-h1": "Megatron-LM core_v0.19 has no zero-bubble schedule flag (it would run 1F1B)",
                 "schedule=gpipe": "Megatron-LM has no GPipe schedule (it runs 1F1B)"},
    cp="--cp-comm-type all_gather: all-gathered K/V (Transformer Engine attention)",
    ep="EP groups inside DP x CP (expert tensor parallel = tp); EP's data-parallel group is dp*cp/ep",
    mesh_orders=ORDERS,
    runtime="megatron",
    overlap_dp_comm=True,
    fused_elementwise="fused kernels (Transformer Engine / Apex when installed; eager otherwise)",
    export_target="megatron",
    rules=(
        Rule("megatron.dp-outer-order",
             "Megatron builds the DP-outer order (--use-tp-pp-dp-mapping) with pp > 1 only when the expert data-"
             "parallel size equals the data-parallel size (cp == ep); cp={cp}, ep={ep} fail in "
             "initialize_model_parallel", "use the default order (pp outermost)",
             lambda t, m, w: dp_outer(t) & (t["cp"] != t["ep"])),
        Rule("megatron.hsdp-ep",
             "Megatron's distributed-optimizer instances ({dp_replicate}) must divide the expert data-parallel size "
             "dp*cp/ep; with ep={ep} the EP group would span instances (\"Expert data parallel size should be "
             "divisible by partial DistOpt shard factor\")", "use a larger sharding group or a smaller ep",
             lambda t, m, w: (t["zero"] > 0) & (t["dp"] // t["dp_shard"] > 1)
             & ((t["dp"] * t["cp"] // t["ep"]) % (t["dp"] // t["dp_shard"]) != 0)),
    ),
    caveats=(
        Rule("megatron.optimizer-shard",
             "the distributed optimizer shards over dp x cp / instances = {dp}x{cp}/{dp_replicate} ranks (the plan "
             "costed {dp_shard}): less optimizer memory per GPU than predicted", "",
             lambda t, m, w: (t["cp"] > 1) & (t["zero"] >= 1)),
    ),
    model_rules=(_dtype,),
)
