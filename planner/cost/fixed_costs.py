"""Costs that FLOPs do not scale: the optimizer step, gradient clipping, FSDP's buffer copies, kernel launches.

All are memory-bound passes or per-kernel gaps, priced from the runtime's counts (`cost.runtime`) and the GPU's
HBM bandwidth:

- optimizer step, per step: (optimizer bytes + clipping bytes) per locally updated parameter (the ZeRO shard
  when zero >= 1) plus the runtime's per-step bytes over the rank's whole chunk (Megatron zeroes its gradient
  buffer, and divides it by the DP size before reducing it), at HBM bandwidth; a measured optimizer time
  (meshplan calibrate) bounds it from below;
- FSDP copies: FSDP2 gathers into one flat buffer and copies each parameter out of it on the compute stream
  (`foreach_all_gather_copy_out`): read + write of the 16-bit weights, once per all-gather;
- kernel launches: every element-wise kernel of a layer adds `runtime.KERNEL_LAUNCH_GAP_S` of GPU time per
  micro-batch where nothing captures the layer in a CUDA graph (none of the three runtimes does by default).
"""

from __future__ import annotations

import numpy as np

from planner.cost import optimizer_state, overhead
from planner.cost.runtime import (
    KERNEL_LAUNCH_GAP_S,
    grad_buffer_step_bytes,
    grad_reduce_bytes,
    runtime_costs,
)
from planner.layout.expert_groups import state_shard_ranks

# Element-wise kernels per op of an eager decoder layer (executor/model.py Block), (forward, backward):
EAGER_KERNELS = {
    "norm": (1, 2),  # fused norm kernel; backward: dx and d(weight) kernels
    "residual": (1, 1),  # the add; backward: one gradient accumulation
    "rope": (9, 14),  # per rotated tensor: float, 4 mul, sub, add, cat, type_as; backward through the same graph
    "swiglu": (2, 3),  # silu, mul; backward: the product's two gradients and silu's
    "gelu": (1, 1),
    "gqa": (1, 1),  # repeat_interleave of K or V; backward: its sum
}


def eager_kernels_per_layer(model) -> tuple[int, int]:
    """(forward, backward) element-wise kernels one eager decoder layer launches per micro-batch."""
    parts = {"norm": 2, "residual": 2, "rope": 2 if model.position == "rope" else 0,
             "swiglu" if model.mlp == "swiglu" else "gelu": 1, "gqa": 2 if model.num_kv_heads != model.num_heads else 0}
    return (sum(n * EAGER_KERNELS[k][0] for k, n in parts.items()), sum(n * EAGER_KERNELS[k][1] for k, n in parts.items()))


def layer_launch_s(ctx) -> tuple[float, float]:
    """(forward, backward) GPU seconds of launching one decoder layer's element-wise kernels, per micro-batch."""
    if ctx.gpu_kind_is_cpu:
        return 0.0, 0.0  # CPU processes run synchronously; their per-op host time is measured (overhead.py)
    rc = runtime_costs(ctx.workload)
    fwd, bwd = eager_kernels_per_layer(ctx.model) if rc.eager_elementwise else rc.fused_kernels_per_layer
    return fwd * KERNEL_LAUNCH_GAP_S, bwd * KERNEL_LAUNCH_GAP_S


def optimizer_step_s(ctx, params: np.ndarray, zero: np.ndarray, dp_shard: np.ndarray, *, cp: np.ndarray) -> np.ndarray:
    """Seconds of the optimizer step (with clipping) on a rank holding `params` parameters before ZeRO sharding;
    ZeRO leaves it the share of its sharding group, dp_shard x cp (`expert_groups.state_shard_ranks`)."""
    rc = runtime_costs(ctx.workload)
    params = np.asarray(params, dtype=float)
    shard = state_shard_ranks(np.asarray(dp_shard, dtype=float), np.asarray(cp, dtype=float))
    local = params / np.where(np.asarray(zero) >= 1, shard, 1.0)
    if ctx.gpu_kind_is_cpu or not ctx.mixed_precision:
        # fp32 training: the fused-kernel count of the reference model (calibrated CPU profiles add their
        # measured optimizer time below): read+write master, m, v and read the gradient, write the weight.
        per_param, per_step = 24.0 + ctx.grad_bytes + ctx.weight_bytes, 0.0
    else:
        per_param = optimizer_state.step_bytes_per_param(ctx) + rc.clip_bytes_per_param
        per_step = grad_buffer_step_bytes(ctx) + (2.0 * grad_reduce_bytes(ctx) if rc.scales_grad_buffer else 0.0)
    traffic = (local * per_param + params * per_step) / ctx.memory_bandwidth_Bps
    # An unfused optimizer (eager PyTorch AdamW on CPU) makes many passes: its measured time per parameter,
    # where calibrated (planner.cost.overhead), bounds the step from below.
    measured = overhead.optimizer_s(ctx, local)
    return traffic if measured is None else np.maximum(traffic, measured)


def fsdp_copy_s(ctx, params: np.ndarray, gathers: np.ndarray) -> np.ndarray:
    """Compute-stream seconds of copying `gathers` all-gathered copies of `params` 16-bit weights out of FSDP2's
    flat buffers (0 for runtimes that gather into the parameters' own storage)."""
    if ctx.gpu_kind_is_cpu or not runtime_costs(ctx.workload).fsdp_copies:
        return np.zeros(np.shape(params))
    return 2.0 * ctx.weight_bytes * np.asarray(params, dtype=float) * gathers / ctx.memory_bandwidth_Bps
