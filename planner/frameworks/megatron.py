"""Megatron-LM / Megatron-Core core_v0.19 (megatron-core 0.19.0 from the package index; the Megatron-LM
core_v0.19.0 tag for the training arguments): what it builds, read from its source.

Sources: megatron/core/parallel_state.py `initialize_model_parallel` (DP = world / (tp*pp*cp); expert
groups: etp = tp, edp = world / (etp*ep*pp), so EP lives inside DP x CP; order tp-cp-ep-dp-pp, or
tp-cp-ep-pp-dp with --use-tp-pp-dp-mapping, which asserts "the data parallel size of the attention and moe
layers must be the same" under pp > 1, i.e. edp == dp, i.e. cp == ep; num_distributed_optimizer_instances
must divide dp*cp and edp); megatron/training/arguments.py (--recompute-granularity selective recomputes
the attention core, core_attn, as Korthikanti et al. 2022; --recompute-method block "will recompute the input
activations for only a set number of transformer layers per pipeline stage" (transformer_config.py
recompute_method), counted per model chunk: with --recompute-num-layers (layers per chunk)/k and even chunks it is
the plan's every-k; schedules: 1F1B and interleaved 1F1B only;
--use-distributed-optimizer shards the optimizer over dp x cp; Megatron-FSDP for ZeRO-2/3; --cp-comm-type
p2p, the default, is the ring attention the megatron runtime costs; --tp-comm-overlap "can happen only when
sequence parallelism is enabled"; --overlap-p2p-communication is on unless --no-overlap-p2p-communication). The rules read from them (megatron.dp-outer-order,
.hsdp-ep, .dtype, .interleaved-two-stages, its schedules and mesh orders) are in `planner.layout.framework_rules`.
"""

from __future__ import annotations

from planner.frameworks.profile import FrameworkProfile, caveat

PROFILE = FrameworkProfile(
    name="megatron",
    title="Megatron-LM",
    release="core_v0.19.0",
    pip="pip install megatron-core==0.19.0  (plus a Megatron-LM core_v0.19.0 checkout for pretrain_gpt.py)",
    cp="--cp-comm-type p2p: ring attention, each step's K/V exchange overlapped with attention (Transformer Engine)",
    ep="EP groups inside DP x CP (expert tensor parallel = tp); EP's data-parallel group is dp*cp/ep",
    runtime="megatron",
    overlap_dp_comm=True,
    # --tp-comm-overlap (Transformer Engine userbuffers; needs sequence parallelism, so it applies to layouts with
    # it) and --overlap-p2p-communication (on by default in core_v0.19: only --no-overlap-p2p-communication exists)
    tp_comm_overlap=True,
    overlap_pp_comm=True,
    fused_elementwise="fused kernels (Transformer Engine / Apex; runtime megatron)",
    export_target="megatron",
    caveats=(
        caveat("megatron", "optimizer-shard", ("cp", "zero", "dp", "dp_shard"),
               lambda c, f: ~((c["cp"] > 1) & (c["zero"] >= 1)),
               lambda r, f: f"the distributed optimizer shards over dp x cp / instances = {r['dp']}x{r['cp']}/"
               f"{r['dp'] // r['dp_shard']} ranks (the plan costed {r['dp_shard']}): less optimizer memory per GPU "
               "than predicted"),
    ),
)
