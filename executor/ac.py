"""Activation recomputation (Chen et al. 2016; policies of Korthikanti et al. 2022 and TorchTitan).

  full       each decoder layer runs under `checkpoint_wrapper`: only its input is kept; the whole layer
             is recomputed in the backward pass (early_stop off, as TorchTitan's FullAC: the final projection too).
  selective  only the attention core (softmax(QK^T)V, the part whose activations grow with S^2 and cost
             few FLOPs to redo) is checkpointed; the matmuls' activations are kept. Under CP the core
             includes the K/V all-gather, which is then repeated in the backward pass.
  op         per-op selective checkpointing of each decoder layer (TorchTitan's `selective_ac_option = "op"`,
             `SelectiveAC` in 0.3): torch's selective-checkpoint contexts keep the outputs of the ops in
             `SAVED_OPS` and recompute every other op. Matmuls (aten.mm) are counted in call order within the
             layer's forward (torch 2.13 asks the policy in the forward only and replays its decisions by
             op index in the recompute; older releases ask again with ctx.is_recompute, which gets its own
             count, as TorchTitan's policy does); every second one is recomputed
             (Llama: wq wk wv wo w1 w3 w2 -> wk, wo, w3 recomputed). The MoE router's matmul is always
             recomputed and not counted (TorchTitan's `force_recompute_mm_shapes_by_fqns` default
             "moe.router.gate"). The policy sees the local ops under DTensor TP, so TP and SP collectives that
             are not saved (all-reduce, all-gather) are issued again during the recompute.
  every-k    every k-th decoder layer of the part (the k-th, 2k-th, ...: TorchTitan 0.2's layer-wise selective AC
             count, `planner.layout.names.recomputes_layer_whole`) runs under `checkpoint_wrapper` as under full;
             the other layers keep all their activations.
  none       nothing is recomputed.

Applied after TP and CP (it wraps the modules they produced) and before FSDP (FSDP must see the wrapped
layer as the unit it shards), the order torchtitan uses. Non-reentrant checkpointing (`use_reentrant=False`)
works with DTensor and keyword arguments.
"""

from __future__ import annotations

from functools import partial

import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from executor.model import Transformer
from planner.layout.names import RECOMPUTE_EVERY, RECOMPUTE_NAMES, recomputes_layer_whole

aten = torch.ops.aten
COUNTED_MATMULS = frozenset({aten.mm.default, aten.linear.default})
"""Matmuls whose every second call is recomputed (a backend that keeps aten.linear undecomposed counts it too)."""
SAVED_OPS = frozenset({
    *COUNTED_MATMULS,
    # Compute-intensive ops (torch._functorch.partitioners.get_default_op_list, TorchTitan 0.3's save set) and
    # the CPU flash kernel the same SDPA call runs on gloo test hosts.
    aten.addmm.default, aten.bmm.default,
    aten._scaled_dot_product_flash_attention.default, aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_cudnn_attention.default, aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten._flash_attention_forward.default, aten._efficient_attention_forward.default,
    # Communication whose output is worth keeping rather than re-communicating (SP's reduce-scatter, EP).
    torch.ops._c10d_functional.reduce_scatter_tensor.default,
    torch.ops._c10d_functional.all_to_all_single.default,
    # Absolute maxima (low-precision scaling factors).
    aten.max.default,
})
"""Ops whose outputs per-op selective checkpointing keeps (all but every second counted matmul)."""


def _wrap(module, **kwargs):
    return checkpoint_wrapper(module, checkpoint_impl=CheckpointImpl.NO_REENTRANT, preserve_rng_state=False, **kwargs)


def op_policy(force_recompute_shapes: frozenset[tuple[int, ...]] = frozenset()):
    """A fresh selective-checkpoint policy for one layer call (its matmul counters start at zero).

    `force_recompute_shapes`: (in, out) weight shapes whose matmuls are recomputed and not counted."""
    counts = {False: 0, True: 0}  # matmuls seen in the forward / in the recompute

    def policy(ctx, func, *args, **kwargs) -> CheckpointPolicy:
        if func in COUNTED_MATMULS:
            weight = tuple(args[1].shape) if func == aten.mm.default else tuple(args[1].shape)[::-1]
            if weight in force_recompute_shapes:
                return CheckpointPolicy.PREFER_RECOMPUTE
            counts[ctx.is_recompute] += 1
            if counts[ctx.is_recompute] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE if func in SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _op_context(force_recompute_shapes: frozenset[tuple[int, ...]]):
    return create_selective_checkpoint_contexts(op_policy(force_recompute_shapes))


def _router_shapes(block) -> frozenset[tuple[int, ...]]:
    """(in, out) local weight shapes of the block's MoE router (empty for a dense block)."""
    router = getattr(getattr(block, "feed_forward", None), "router", None)
    if router is None:
        return frozenset()
    out_f, in_f = router.weight.shape  # under TP a replicated DTensor: its local shape is the full one
    return frozenset({(in_f, out_f)})


def apply_ac(part: Transformer, policy: str) -> None:
    """Wrap `part`'s layers (full, op; every k-th under every-k) or attention cores (selective) in place; "none"
    leaves it untouched."""
    if policy == "none":
        return
    if policy not in RECOMPUTE_NAMES:
        raise ValueError(f"unknown recompute policy {policy!r}")
    for index, (key, block) in enumerate(list(part.layers.items())):
        if policy == "full" or recomputes_layer_whole(policy, index):
            # early_stop=False, as TorchTitan's FullAC and Megatron's recompute: the whole forward runs again, the
            # last matmul included (torch's default stops once the saved tensors are back, skipping the layer's
            # final projection): what the cost model counts.
            part.layers[key] = _wrap(block, early_stop=False)
        elif policy in RECOMPUTE_EVERY:
            continue
        elif policy == "op":
            # early_stop=False (as TorchTitan): the recompute runs the whole layer, so every second matmul is
            # recomputed even where no backward op reads its output (GELU's last one): what the cost model counts.
            part.layers[key] = _wrap(block, context_fn=partial(_op_context, _router_shapes(block)), early_stop=False)
        else:
            block.attention.core = _wrap(block.attention.core)
