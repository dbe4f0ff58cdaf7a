"""One optimizer step of the parallel model: micro-batches, pipeline schedule, AdamW, and the global loss.

The objective is the mean next-token cross-entropy over every token of the global batch, whatever the
layout: each micro-batch's loss is its mean, gradients are divided by the number of micro-batches (here or
by the pipeline schedule's `scale_grads`), and FSDP/replicate average them over the DP x CP ranks, whose
token counts are equal. That is what makes every layout's step equal the single-process reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from executor.model import loss_fn
from executor.parallelize import ParallelModel


@dataclass(frozen=True, kw_only=True)
class OptimizerConfig:
    lr: float = 3e-4
    betas: tuple[float, float] = (0.9, 0.95)
    """Llama 2/3 AdamW betas (Touvron et al. 2023, section 2.2)."""
    eps: float = 1e-8
    weight_decay: float = 0.1
    """Llama 2 weight decay (Touvron et al. 2023, section 2.2)."""


def _kind(p: torch.Tensor) -> tuple:
    if isinstance(p, DTensor):
        return ("dtensor", p.device_mesh, tuple(p.placements))
    return ("tensor",)


def build_optimizers(model: ParallelModel, cfg: OptimizerConfig) -> list[torch.optim.AdamW]:
    """One AdamW per model chunk (per-chunk state dicts keep DCP keys layout-independent).

    `foreach` (multi-tensor kernels) only when all of a chunk's parameters are alike: with TP but no SP,
    norm weights stay plain tensors beside DTensors and foreach AdamW fails on the mix.
    """
    optimizers = []
    for part in model.parts:
        params = [p for p in part.parameters() if p.requires_grad]
        kinds = {_kind(p)[:2] for p in params}
        optimizers.append(
            torch.optim.AdamW(
                params,
                lr=cfg.lr,
                betas=cfg.betas,
                eps=cfg.eps,
                weight_decay=cfg.weight_decay,
                foreach=len(kinds) == 1,
            )
        )
    return optimizers


def sync_tied_embeddings(model: ParallelModel) -> None:
    """Sum the gradients of the two copies of a tied embedding split over pipeline stages.

    Megatron-LM's embedding group (Shoeybi et al. 2019): the first chunk's token table and the last chunk's
    LM head start equal (executor.init) and, with summed gradients and identical AdamW updates, stay equal.
    Both copies are sharded alike (vocab rows over TP, then FSDP over the same DP layout), so each rank
    exchanges its local gradient shard with its counterpart at the other end of its pipeline.
    """
    if model.meshes.layout.pp == 1 or not model.parts[0].args.tied_embeddings:
        return
    ends = model.meshes.pp.mesh.tolist()  # global ranks of this rank's pipeline, stage order
    mine = peer = None
    for part in model.parts:
        if part.tok_embeddings is not None:
            mine, peer = part.tok_embeddings.weight, ends[-1]
        if part.output is not None:
            mine, peer = part.output.weight, ends[0]
    if mine is None or mine.grad is None:
        return
    grad = mine.grad.to_local() if isinstance(mine.grad, DTensor) else mine.grad
    send, recv = grad.contiguous(), torch.empty_like(grad)
    ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    grad.add_(recv)  # a + b on one end, b + a on the other: the same fp32 sum


def forward_backward(model: ParallelModel, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor | None:
    """Gradients of this rank's batch (B/dp rows); returns the mean loss on last-stage ranks, else None."""
    layout = model.meshes.layout
    if model.schedule is not None:
        losses: list[torch.Tensor] = []
        args = (inputs,) if model.has_first else ()
        target = targets if model.has_last else None
        # return_outputs=False: the step's result is unused, and with it True the last stage keeps every
        # micro-batch's output (the logits) in `output_chunks` until the step ends and then concatenates them
        # (torch 2.13 pipelining/stage.py forward_one_chunk `if self.is_last and save_forward_output`;
        # schedules.py `_merge_outputs`), memory the planner does not count.
        model.schedule.step(*args, target=target, losses=losses if model.has_last else None, return_outputs=False)
        sync_tied_embeddings(model)
        return torch.stack([loss.detach() for loss in losses]).mean() if model.has_last else None
    (part,) = model.parts
    nmb = layout.num_microbatches
    # ZeRO-0/1 reduce gradients once per step; ZeRO-2/3 every micro-batch into sharded gradients.
    sync_every = layout.zero >= 2
    total = torch.zeros((), device=inputs.device)
    for i, (x, y) in enumerate(zip(inputs.chunk(nmb), targets.chunk(nmb), strict=True)):
        if isinstance(part, FSDPModule) and nmb > 1:
            part.set_requires_gradient_sync(sync_every or i == nmb - 1)
        loss = loss_fn(part(x), y)
        (loss / nmb).backward()
        total += loss.detach()
    return total / nmb


def optimizer_step(optimizers: list[torch.optim.Optimizer]) -> None:
    for opt in optimizers:
        opt.step()
        opt.zero_grad(set_to_none=True)


def global_loss(local: torch.Tensor | None, device: torch.device) -> float:
    """Mean over the ranks that computed a loss (the last pipeline stage of every DP/CP/TP coordinate).

    Their token counts are equal, so the mean of their means is the global batch's mean loss. A collective
    over the whole world: it also marks the end of the step for timing.
    """
    buf = torch.zeros(2, dtype=torch.float64, device=device)
    if local is not None:
        buf[0], buf[1] = local.double(), 1.0
    dist.all_reduce(buf)
    return float(buf[0] / buf[1])


def train_step(
    model: ParallelModel, optimizers: list[torch.optim.Optimizer], inputs: torch.Tensor, targets: torch.Tensor
) -> float:
    local = forward_backward(model, inputs, targets)
    optimizer_step(optimizers)
    return global_loss(local, inputs.device)
