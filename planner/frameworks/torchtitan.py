"""TorchTitan 0.3.0 (pytorch/torchtitan, from the package index): what it builds, read from its source.

Sources (torchtitan 0.3.0): config/configs.py `ParallelismConfig` (degrees, fsdp_reshard_after_forward,
enable_sequence_parallel, expert_parallel_degree "EP borrows ranks from FSDP and TP: efsdp = dp_shard * cp *
tp / ep"), distributed/parallel_dims.py `ParallelDims.build_mesh` (one mesh order: pp, dp_replicate,
dp_shard, cp, tp; FSDP over dp_shard x cp whenever cp > 1), models/llama3/parallelize.py ("DDP has not
supported > 1D parallelism"), distributed/activation_checkpoint.py (none / full / per-op selective, the
plan's recompute "op" / memory-budget), models/common/moe_sharding.py (with EP the routed experts are sharded on the ep
axis only, not split by TP). Context parallelism is PyTorch's `context_parallel` (SDPA with K/V all-gather,
the default rotate method, and head-tail load balancing), the algorithm the cost model costs. The rules read
from them (torchtitan.ddp-1d, .cp-fsdp, .ep-group, .ep-tp, .architecture, .dtype, its ZeRO stages, recompute
policies and mesh order) are in `planner.layout.framework_rules`.
"""

from __future__ import annotations

from planner.frameworks.profile import FrameworkProfile, caveat

PROFILE = FrameworkProfile(
    name="torchtitan",
    title="TorchTitan",
    release="0.3.0",
    pip="pip install torchtitan==0.3.0",
    cp="PyTorch context_parallel: SDPA with all-gathered K/V (rotate method allgather), head-tail load balancing",
    ep="EP borrows ranks from dp_shard x cp x tp (efsdp = dp_shard*cp*tp/ep); experts are not split by TP",
    runtime="pytorch",
    runtimes=("pytorch", "pytorch-compile"),
    overlap_dp_comm=True,
    # Its SDPA wrapper (torchtitan/models/attention.py, ScaledDotProductAttention._init_backend) ranks
    # FLASH_ATTENTION, EFFICIENT_ATTENTION, MATH under sdpa_kernel(set_priority=True) and puts CUDNN_ATTENTION first
    # only on sm100 (pytorch/torchtitan#1196): FlashAttention-2 on Hopper and Ampere.
    attention_kernel="flash2",
    fused_elementwise="eager by default (runtime pytorch); --compile.enable fuses the element-wise work of every "
    "block (runtime pytorch-compile, with async TP under --tp-comm-overlap)",
    export_target="torchtitan",
    caveats=(
        caveat("torchtitan", "cp-shard", ("cp", "zero", "dp_shard"), lambda c, f: ~((c["cp"] > 1) & (c["zero"] > 0)),
               lambda r, f: f"FSDP shards over dp_shard x cp = {r['dp_shard']}x{r['cp']} ranks (the plan costed "
               f"{r['dp_shard']}): less memory per GPU and a larger reduce-scatter group than predicted"),
        caveat("torchtitan", "ep-borrows-tp", ("ep", "tp"), lambda c, f: ~((c["ep"] > 1) & (c["tp"] > 1)),
               lambda r, f: f"experts are whole on each rank and all-to-all runs over ep x tp = {r['ep']}x{r['tp']} "
               f"ranks (costed as ep={r['ep']} with experts split by TP; the same expert memory and FLOPs per GPU)"),
    ),
)
