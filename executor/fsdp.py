"""Data parallelism by ZeRO stage (Rajbhandari et al. 2020) with FSDP2 and its `replicate` sibling.

  zero 0   `replicate` (FSDP2's DDP: full weights, gradients all-reduced) over the DP x CP ranks
  zero 1   `fully_shard(reshard_after_forward=False)`, gradient sync only on the last micro-batch
  zero 2   `fully_shard(reshard_after_forward=False)`, gradients reduce-scattered every micro-batch
  zero 3   `fully_shard(reshard_after_forward=True)`: parameters re-gathered for the backward pass
  HSDP     the same on the 2-D (dp_replicate, dp_shard x cp) mesh: sharded inside a group, replicated across

ZeRO-1 and ZeRO-2 are "ZeRO-2-like" in FSDP2 terms: parameters stay unsharded between forward and backward
(no re-gather, the memory cost of ZeRO-1/2's full weights), optimizer state and the gradients handed to the
optimizer are sharded. The difference between 1 and 2 is when gradients are reduced: once per step from
an unsharded accumulator (1) or every micro-batch into a sharded one (2); see `step.forward_backward`.
Under pipeline parallelism the schedule owns that choice: PyTorch's stages turn gradient sync and
post-backward resharding off for every micro-batch and reduce once after the last one
(`PipelineStage.backward_maybe_with_nosync` / `perform_reduce_grad`), so there ZeRO-2 behaves as ZeRO-1 and
ZeRO-3 keeps each layer gathered from its first backward to the step's end; the planner costs exactly that
(planner.cost.memory.state_sharding_stage).

Units: each decoder layer is its own FSDP unit (its all-gather overlaps the previous layer's compute), the
chunk root holds embeddings, final norm and head. Exception, `per_layer=False`: the zero-bubble pipeline
schedules split each backward into input- and weight-gradient passes, and per-layer FSDP units then give
wrong gradients with no error (measured on torch 2.13); sharding only the chunk root is correct, so the
pipeline builder asks for that.

Experts under expert parallelism (`expert_mesh`): each MoE layer's local experts are one more unit, wrapped
first on the expert-data-parallel mesh (executor.mesh), so the layer's unit leaves them out; as TorchTitan
does, also when that mesh has one rank (every data rank in one EP group) and in the zero-bubble case, where
dense weights are sharded per chunk root only: experts must never be reduced over the dense mesh, whose
ranks hold different experts. Under zero bubble the expert unit is not resharded after forward (as the
chunk root is not): with resharding, ZeRO-3 zb-h1 gives wrong expert gradients (measured, torch 2.13), and
under pipeline parallelism ZeRO-3 holds gathered weights until the step's reduction anyway
(planner.cost.memory.state_sharding_stage).

Mixed precision: bf16 compute on GPU, fp32 on CPU; gradients reduced in fp32, or in bf16 where the plan's
`Workload.grad_reduce_dtype` says so (`MixedPrecisionPolicy.reduce_dtype`; gloo reduces bf16 too, so CPU runs it).
"""

from __future__ import annotations

import torch
from torch.distributed._composable.replicate_with_fsdp import replicate
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from executor.model import Transformer
from executor.moe import MoE


def mixed_precision(param_dtype: torch.dtype | None, reduce_dtype: torch.dtype | None = None) -> MixedPrecisionPolicy:
    """FSDP2's policy: compute in `param_dtype` (None: the fp32 parameters themselves), reduce gradients in
    `reduce_dtype` (the plan's `Workload.grad_reduce_dtype`; None: fp32). FSDP2 casts each unsharded gradient to
    reduce_dtype before its reduce-scatter / all-reduce and the reduced shard back to the fp32 parameter's dtype,
    so bf16 halves the collective's bytes while the optimizer still sees fp32 gradients."""
    reduce = reduce_dtype if reduce_dtype is not None else torch.float32
    if param_dtype is None and reduce == torch.float32:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce)


def apply_fsdp(
    part: Transformer,
    mesh: DeviceMesh,
    *,
    zero: int,
    param_dtype: torch.dtype | None = None,
    reduce_dtype: torch.dtype | None = None,
    per_layer: bool = True,
    expert_mesh: DeviceMesh | None = None,
) -> None:
    """Wrap `part` for data parallelism over `mesh` in place (skipped when the mesh has one rank and no
    mixed precision is asked for: there is nothing to reduce), its experts over `expert_mesh` under EP;
    gradients are reduced in `reduce_dtype` (`mixed_precision`)."""
    if mesh.size() == 1 and param_dtype is None:
        return
    mp = mixed_precision(param_dtype, reduce_dtype)
    if expert_mesh is not None:
        for moe in [m for m in part.modules() if isinstance(m, MoE)]:
            if zero == 0:
                replicate(moe.experts, mesh=expert_mesh, mp_policy=mp)
            else:
                # Under zero bubble they stay gathered like the chunk root: resharding them after forward
                # gives wrong gradients with the split backward (measured on torch 2.13, ZeRO-3 zb-h1).
                fully_shard(moe.experts, mesh=expert_mesh, mp_policy=mp, reshard_after_forward=zero == 3 and per_layer)
    if zero == 0:
        if per_layer:
            for key, block in part.layers.items():
                part.layers[key] = replicate(block, mesh=mesh, mp_policy=mp)
        replicate(part, mesh=mesh, mp_policy=mp)
        return
    reshard = zero == 3
    if per_layer:
        for key, block in part.layers.items():
            part.layers[key] = fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
    # The root's parameters are used last in the forward pass and first in the backward: never reshard them.
    fully_shard(part, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
