"""TorchTitan 0.3.0 (pytorch/torchtitan, from the package index): what it builds, read from its source.

Sources (torchtitan 0.3.0): config/configs.py `ParallelismConfig` (degrees, fsdp_reshard_after_forward,
enable_sequence_parallel, expert_parallel_degree "EP borrows ranks from FSDP and TP: efsdp = dp_shard * cp *
tp / ep"), distributed/parallel_dims.py `ParallelDims.build_mesh` (one mesh order: pp, dp_replicate,
dp_shard, cp, tp; FSDP over dp_shard x cp whenever cp > 1), models/llama3/parallelize.py ("DDP has not
supported > 1D parallelism"), distributed/activation_checkpoint.py (none / full / selective per-op or
per-layer / memory-budget), models/common/moe_sharding.py (with EP the routed experts are sharded on the ep
axis only, not split by TP). Context parallelism is PyTorch's `context_parallel` (SDPA with K/V all-gather,
the default rotate method, and head-tail load balancing), the algorithm the cost model costs.
"""

from __future__ import annotations

from planner.frameworks.profile import FrameworkProfile, Rule, experts

TITAN_ORDER = ("pp", "dp_replicate", "dp_shard", "cp", "tp")


def _shard(t):
    """TorchTitan's data_parallel_shard_degree: the FSDP group (1 under ZeRO-0, which is DDP)."""
    return t["dp_shard"] * (t["zero"] > 0) + (t["zero"] == 0)


def _architecture(model, workload) -> str | None:
    """TorchTitan's Llama 3 / Qwen3-MoE blocks: RMSNorm, SwiGLU, RoPE, no biases, untied head, GQA."""
    lacks = [what for what, bad in (
        ("a GELU MLP", model.mlp != "swiglu"), ("LayerNorm", model.norm != "rmsnorm"),
        ("learned positions", model.position != "rope"), ("linear biases", model.linear_bias or model.qkv_bias),
        ("a tied LM head", model.tied_embeddings), ("MLA attention", model.attention != "mha_gqa"),
        ("shared experts", model.moe is not None and model.moe.num_shared_experts > 0),
        ("dense layers between MoE layers",
         model.moe is not None and not all(model.is_moe_layer(i) for i in range(model.num_layers))),
    ) if bad]
    if lacks:
        return (f"{model.name} has {', '.join(lacks)}; TorchTitan's Llama 3 and Qwen3-MoE blocks (which the export "
                "builds) have none of these")
    if workload.dtype in ("fp16", "fp8"):
        return (f"dtype {workload.dtype}: TorchTitan trains bf16 mixed precision (fp8 needs its torchao Float8 "
                "converter, which the export does not set up); plan with --dtype bf16")
    return None


PROFILE = FrameworkProfile(
    name="torchtitan",
    title="TorchTitan",
    release="0.3.0",
    pip="pip install torchtitan==0.3.0",
    schedules={"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "Interleaved1F1B", "zb-h1": "InterleavedZeroBubble"},
    recompute={"none": "--activation-checkpoint:none", "full": "--activation-checkpoint:full (FullAC: every block)"},
    zero={0: "DDP (data_parallel_replicate_degree = dp), only as the sole parallelism",
          2: "FSDP2 with fsdp_reshard_after_forward=never (weights gathered from forward to backward)",
          3: "FSDP2 (HSDP with data_parallel_replicate_degree > 1)"},
    unsupported={
        "zero=1": "TorchTitan has no ZeRO-1: FSDP2 always shards gradients too (ZeRO-2 is "
                  "fsdp_reshard_after_forward=never)",
        "recompute=selective": "TorchTitan's selective AC keeps matmul outputs per op or recomputes every n-th "
                               "layer; neither is the plan's attention-core recomputation",
    },
    cp="PyTorch context_parallel: SDPA with all-gathered K/V (rotate method allgather), head-tail load balancing",
    ep="EP borrows ranks from dp_shard x cp x tp (efsdp = dp_shard*cp*tp/ep); experts are not split by TP",
    mesh_orders=(TITAN_ORDER,),
    runtime="pytorch",
    overlap_dp_comm=True,
    fused_elementwise="eager by default; --compile.enable fuses element-wise work (not costed separately)",
    export_target="torchtitan",
    rules=(
        Rule("torchtitan.ddp-1d",
             "TorchTitan runs ZeRO-0 as DDP, which it allows only as the sole parallelism (\"DDP has not supported "
             "> 1D parallelism\"); this layout has dp={dp} with tp={tp}, pp={pp}, cp={cp}",
             "use FSDP (zero 2 or 3) or HSDP", lambda t, m, w: (t["zero"] == 0) & (t["dp"] > 1)
             & ((t["tp"] > 1) | (t["pp"] > 1) | (t["cp"] > 1))),
        Rule("torchtitan.cp-fsdp",
             "TorchTitan applies FSDP over the CP ranks whenever cp > 1, so ZeRO-0 with cp={cp} would silently "
             "become FSDP", "use zero 2 or 3 with context parallelism", lambda t, m, w: (t["cp"] > 1) & (t["zero"] == 0)),
        Rule("torchtitan.ep-group",
             "TorchTitan forms EP groups inside one FSDP group x cp (efsdp = dp_shard*cp*tp/ep); ep={ep} does not "
             "divide its sharding group x cp, so the expert mesh would span data-parallel replicas (a mesh "
             "dimension of size 0 in build_mesh)",
             "shard over more ranks (a larger FSDP group, not HSDP/ZeRO-0) or use a smaller ep",
             lambda t, m, w: (t["ep"] > 1) & ((_shard(t) * t["cp"]) % t["ep"] != 0)),
        Rule("torchtitan.ep-tp",
             "TorchTitan does not split experts by TP: EP borrows the TP ranks, so expert_parallel_degree = ep x tp "
             "= {ep}x{tp} must divide the {experts} experts", "use a smaller tp or ep",
             lambda t, m, w: (t["ep"] > 1) & (t["tp"] > 1) & (experts(m) % (t["ep"] * t["tp"]) != 0)),
    ),
    caveats=(
        Rule("torchtitan.cp-shard",
             "FSDP shards over dp_shard x cp = {dp_shard}x{cp} ranks (the plan costed {dp_shard}): less memory per GPU "
             "and a larger reduce-scatter group than predicted", "",
             lambda t, m, w: (t["cp"] > 1) & (t["zero"] > 0)),
        Rule("torchtitan.ep-borrows-tp",
             "experts are whole on each rank and all-to-all runs over ep x tp = {ep}x{tp} ranks (costed as ep={ep} "
             "with experts split by TP; the same expert memory and FLOPs per GPU)", "",
             lambda t, m, w: (t["ep"] > 1) & (t["tp"] > 1)),
    ),
    model_rules=(_architecture,),
)
