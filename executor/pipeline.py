"""Pipeline parallelism with `torch.distributed.pipelining`: the plan's layer partition and schedule.

The model is cut into pp * virtual_stages chunks with `layout.partition(num_layers)` decoder layers each;
chunk c runs on pipeline rank c % pp (Megatron interleaving, Narayanan et al. 2021), embeddings on chunk 0,
final norm and LM head on the last chunk. Each chunk is a `Transformer` holding only its layers, keyed by
global index, so parameter names do not depend on the partition.

Schedules (plan name -> PyTorch class):
  gpipe        ScheduleGPipe              all forwards, then all backwards (Huang et al. 2019)
  1f1b         Schedule1F1B               one-forward-one-backward (PipeDream-Flush, Narayanan et al. 2021)
  interleaved  ScheduleInterleaved1F1B    virtual_stages chunks per rank (Narayanan et al. 2021)
  zb-h1        ScheduleInterleavedZeroBubble with one chunk per rank: backward split into input-gradient
               (B) and weight-gradient (W) passes, W deferred into the bubbles; with one chunk per rank
               this is ZB-H1's 1F1B-memory schedule (Qi et al. 2023)

Every schedule is given the per-micro-batch mean loss and `scale_grads=True` (gradients divided by the
number of micro-batches), so a step's gradient is the mean over the rank's batch, as without pipelining.
"""

from __future__ import annotations

import torch
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import (
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble,
)

from executor.mesh import Meshes
from executor.model import Transformer, loss_fn
from executor.model_args import ModelArgs
from planner.layout import Layout

SCHEDULES = {
    "gpipe": ScheduleGPipe,
    "1f1b": Schedule1F1B,
    "interleaved": ScheduleInterleaved1F1B,
    "zb-h1": ScheduleInterleavedZeroBubble,
}
MULTI_STAGE = {"interleaved", "zb-h1"}
"""Schedules whose class takes a list of stages (PipelineScheduleMulti)."""
ZERO_BUBBLE = {"zb-h1"}
"""Schedules that split the backward pass; FSDP must then shard only chunk roots (see executor.fsdp)."""


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
    cls = SCHEDULES[layout.schedule]
    if layout.schedule in MULTI_STAGE:
        return cls(stages, n_microbatches=layout.num_microbatches, loss_fn=loss_fn, scale_grads=True), stages
    (stage,) = stages
    return cls(stage, n_microbatches=layout.num_microbatches, loss_fn=loss_fn, scale_grads=True), stages
