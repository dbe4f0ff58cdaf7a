"""Tensor parallelism (Megatron-LM, Shoeybi et al. 2019) and sequence parallelism (Korthikanti et al. 2022).

DTensor styles from `torch.distributed.tensor.parallel`, applied per module:
  embeddings      RowwiseParallel: vocab-sharded table, output Replicate (or Shard(1) = sequence-sharded, SP)
  wq, wk, wv, w1, w3, experts' w1/w3   ColwiseParallel: heads / MLP width sharded, no communication
  wo, w2          RowwiseParallel: all-reduce (or reduce-scatter to Shard(1) under SP)
  norms           SequenceParallel under SP (computed on the local sequence shard); plain otherwise
  attention, MLP  PrepareModuleInput under SP: all-gather the sequence before the column-parallel matmuls
  LM head         ColwiseParallel, vocab-sharded, output Replicate: every TP rank gets full logits and
                  computes the same loss (no loss-parallel: simple, and exact)

MoE layers: the router stays replicated; each expert (and the shared expert) is column/row sharded like a
dense MLP with Replicate output, and under SP the whole MoE block gathers its input sequence and scatters
its output. Routing is computed from replicated activations, so every TP rank routes identically. Under
expert parallelism the experts stay TP-sharded the same way (TorchTitan's ETP = TP): the ranks of one TP
group route the same tokens, exchange them within their own EP groups (one per TP coordinate) and so feed
their expert shards identical rows.

Without SP, norm weights stay plain tensors next to DTensors, so the optimizer is built with foreach=False
in that case (`train.build_optimizers`).
"""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    PrepareModuleOutput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from executor.model import Transformer
from executor.moe import MoE


def _mlp_plan(prefix: str, mlp: nn.Module, out_layout: Shard | Replicate) -> dict:
    plan = {f"{prefix}.w1": ColwiseParallel(), f"{prefix}.w2": RowwiseParallel(output_layouts=out_layout)}
    if getattr(mlp, "w3", None) is not None:
        plan[f"{prefix}.w3"] = ColwiseParallel()
    return plan


def apply_tp(part: Transformer, tp_mesh: DeviceMesh, *, sequence_parallel: bool) -> None:
    """Shard `part` over `tp_mesh` in place (no-op for a 1-rank mesh)."""
    if tp_mesh.size() == 1:
        return
    sp = sequence_parallel
    act = Shard(1) if sp else Replicate()  # layout of the residual stream between modules
    top: dict = {}
    if part.tok_embeddings is not None:
        top["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=act)
    if part.pos_embeddings is not None:
        top["pos_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=act)
    if part.norm is not None and sp:
        top["norm"] = SequenceParallel()
    if part.output is not None:
        top["output"] = ColwiseParallel(input_layouts=act, output_layouts=Replicate(), use_local_output=True)
    if top:
        parallelize_module(part, tp_mesh, top)
    # Each style distributed its own copy of a tied weight; both are vocab-sharded Shard(0) on tp_mesh.
    part.tie_weights()

    for block in part.layers.values():
        plan: dict = {
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=act),
        }
        if sp:
            plan["attention_norm"] = SequenceParallel()
            plan["ffn_norm"] = SequenceParallel()
            plan["attention"] = PrepareModuleInput(
                input_layouts=(Shard(1), None, None), desired_input_layouts=(Replicate(), None, None)
            )
        ffn = block.feed_forward
        if isinstance(ffn, MoE):
            for key, expert in ffn.experts.items():  # this rank's experts (all of them unless EP)
                plan.update(_mlp_plan(f"feed_forward.experts.{key}", expert, Replicate()))
            if ffn.shared is not None:
                plan.update(_mlp_plan("feed_forward.shared", ffn.shared, Replicate()))
            if sp:
                # Local (not DTensor) input: the replicated router is a plain Linear.
                plan["feed_forward"] = PrepareModuleInput(
                    input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
                )
        else:
            plan.update(_mlp_plan("feed_forward", ffn, act))
            if sp:
                plan["feed_forward"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        parallelize_module(block, tp_mesh, plan)
        if sp and isinstance(ffn, MoE):
            parallelize_module(
                ffn,
                tp_mesh,
                PrepareModuleOutput(output_layouts=(Replicate(),), desired_output_layouts=(Shard(1),)),
            )
