"""Pipeline parallelism with `torch.distributed.pipelining`: the plan's layer partition and schedule.

The model is cut into pp * virtual_stages chunks with `layout.partition(num_layers)` decoder layers each;
chunk c runs on pipeline rank c % pp (Megatron interleaving, Narayanan et al. 2021), embeddings on chunk 0,
final norm and LM head on the last chunk. Each chunk is a `Transformer` holding only its layers, keyed by
global index, so parameter names do not depend on the partition.

Schedules: the plan's schedule names the PyTorch class in the schedule registry
(`planner.layout.schedules`, `PipelineSchedule.torch_class`): gpipe ScheduleGPipe, 1f1b Schedule1F1B,
interleaved ScheduleInterleaved1F1B (virtual_stages chunks per rank), zb-h1 ScheduleInterleavedZeroBubble
with one chunk per rank (backward split into input-gradient (B) and weight-gradient (W) passes, W deferred
into the bubbles: ZB-H1's 1F1B-memory schedule, Qi et al. 2023). Classes that take a list of stages
(`torch_multi_stage`) get this rank's chunks as a list.

Every schedule is given the per-micro-batch mean loss and `scale_grads=True` (gradients divided by the
number of micro-batches), so a step's gradient is the mean over the rank's batch, as without pipelining.
"""

from __future__ import annotations

import torch
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining import schedules as torch_schedules

from executor.mesh import Meshes
from executor.model import Transformer, loss_fn
from executor.model_args import ModelArgs
from planner.layout import SCHEDULES, Layout


def splits_backward(layout: Layout) -> bool:
    """The schedule splits the backward pass (zero bubble); FSDP must then shard only chunk roots
    (see executor.fsdp)."""
    return layout.pp > 1 and SCHEDULES[layout.schedule].splits_backward


def chunk_ids(layout: Layout, pp_rank: int) -> list[int]:
    """Chunks (stage indices) held by a pipeline rank: pp_rank, pp_rank + pp, ..."""
    return list(range(pp_rank, layout.num_chunks, layout.pp))


def chunk_layers(layout: Layout, num_layers: int) -> list[range]:
    """Global layer ids of every chunk, from the plan's partition."""
    sizes = layout.partition(num_layers)
    starts = [sum(sizes[:c]) for c in range(len(sizes))]
    return [range(s, s + n) for s, n in zip(starts, sizes, strict=True)]


def split_model(args: ModelArgs, layout: Layout, pp_rank: int) -> tuple[list[Transformer], list[int]]:
    """The model chunks of `pp_rank` (built on the current default device, meta in the executor)."""
    layers = chunk_layers(layout, args.num_layers)
    last = layout.num_chunks - 1
    ids = chunk_ids(layout, pp_rank)
    parts = [Transformer(args, layers[c], first=c == 0, last=c == last) for c in ids]
    return parts, ids


def build_pipeline(parts: list[Transformer], stage_ids: list[int], meshes: Meshes, device: torch.device):
    """PipelineStage per chunk and the plan's schedule over them (the caller runs `schedule.step`)."""
    layout = meshes.layout
    group = meshes.pp.get_group()
    stages = [PipelineStage(p, s, layout.num_chunks, device, group=group) for p, s in zip(parts, stage_ids, strict=True)]
    entry = SCHEDULES[layout.schedule]
    cls = getattr(torch_schedules, entry.torch_class)
    if entry.torch_multi_stage:
        return cls(stages, n_microbatches=layout.num_microbatches, loss_fn=loss_fn, scale_grads=True), stages
    (stage,) = stages
    return cls(stage, n_microbatches=layout.num_microbatches, loss_fn=loss_fn, scale_grads=True), stages
