"""Activation recomputation (Chen et al. 2016; policies of Korthikanti et al. 2022).

  full       each decoder layer runs under `checkpoint_wrapper`: only its input is kept; the whole layer
             is recomputed in the backward pass.
  selective  only the attention core (softmax(QK^T)V, the part whose activations grow with S^2 and cost
             few FLOPs to redo) is checkpointed; the matmuls' activations are kept. Under CP the core
             includes the K/V all-gather, which is then repeated in the backward pass.
  none       nothing is recomputed.

Applied after TP and CP (it wraps the modules they produced) and before FSDP (FSDP must see the wrapped
layer as the unit it shards), the order torchtitan uses. Non-reentrant checkpointing (`use_reentrant=False`)
works with DTensor and keyword arguments.
"""

from __future__ import annotations

from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper

from executor.model import Transformer


def _wrap(module):
    return checkpoint_wrapper(module, checkpoint_impl=CheckpointImpl.NO_REENTRANT, preserve_rng_state=False)


def apply_ac(part: Transformer, policy: str) -> None:
    """Wrap `part`'s layers (full) or attention cores (selective) in place; "none" leaves it untouched."""
    if policy == "none":
        return
    if policy not in ("full", "selective"):
        raise ValueError(f"unknown recompute policy {policy!r}")
    for key, block in list(part.layers.items()):
        if policy == "full":
            part.layers[key] = _wrap(block)
        else:
            block.attention.core = _wrap(block.attention.core)
