"""`apply_plan`: the plan's layout carried out on the reference model, as a recipe.

Order, and why:
  1. split        the plan's pipeline chunks for this rank, built on the meta device (no memory yet)
  2. EP           keep this rank's experts and install the token exchange (plain modules still, so TP
                  then shards only the experts this rank keeps)
  3. TP / SP      it replaces parameters with DTensors and installs the layout hooks everything else wraps
  4. CP           swaps the attention core (needs the TP-local head counts, so after TP)
  5. AC           wraps layers or attention cores (after TP/CP so it recomputes their communication too,
                  before FSDP so an FSDP unit is the wrapped layer)
  6. FSDP / DDP   last of the module transforms: it shards whatever parameters the others produced (2-D
                  DTensors with TP), per layer, or per chunk root under the zero-bubble schedule; experts
                  under EP on their own mesh
  7. materialise  `to_empty` + layout-independent init of each rank's shards (executor.init)
  8. PP           stages and schedule over the finished chunks (when pp > 1)
The executor never decides anything here: every choice comes from the plan's `Layout`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from executor.ac import apply_ac
from executor.cp import apply_cp, cp_positions
from executor.ep import apply_ep
from executor.fsdp import apply_fsdp
from executor.init import materialize
from executor.mesh import Meshes
from executor.model import Transformer
from executor.model_args import ModelArgs
from executor.pipeline import build_pipeline, split_model, splits_backward
from executor.tp import apply_tp


@dataclass(kw_only=True)
class ParallelModel:
    parts: list[Transformer]
    """This rank's model chunks (one unless interleaved), parallelised and materialised."""
    stage_ids: list[int]
    """Global chunk index of each part."""
    schedule: Any | None
    """The pipeline schedule (pp > 1), else None: the trainer runs forward/backward itself."""
    stages: list[Any]
    meshes: Meshes

    @property
    def has_first(self) -> bool:
        return 0 in self.stage_ids

    @property
    def has_last(self) -> bool:
        return self.meshes.layout.num_chunks - 1 in self.stage_ids


def apply_plan(
    args: ModelArgs,
    meshes: Meshes,
    *,
    device: torch.device,
    seq_len: int,
    seed: int,
    param_dtype: torch.dtype | None = None,
    reduce_dtype: torch.dtype | None = None,
) -> ParallelModel:
    layout = meshes.layout
    with torch.device("meta"):
        parts, stage_ids = split_model(args, layout, meshes.pp_rank)
    zero_bubble = splits_backward(layout)
    if layout.cp > 1:
        positions = cp_positions(seq_len, meshes.cp_rank, layout.cp)
    else:
        positions = torch.arange(seq_len)
    for part in parts:
        apply_ep(part, meshes.ep, meshes.cp)
        apply_tp(part, meshes.tp, sequence_parallel=layout.sequence_parallel)
        apply_cp(part, meshes.cp)
        apply_ac(part, layout.recompute)
        apply_fsdp(part, meshes.fsdp, zero=layout.zero, param_dtype=param_dtype, reduce_dtype=reduce_dtype,
                   per_layer=not zero_bubble,
                   expert_mesh=meshes.expert_dp)
        materialize(part, device, num_layers=args.num_layers, seed=seed)
        part.set_positions(positions.to(device))
    schedule, stages = None, []
    if layout.pp > 1:
        schedule, stages = build_pipeline(parts, stage_ids, meshes, device)
    return ParallelModel(parts=parts, stage_ids=stage_ids, schedule=schedule, stages=stages, meshes=meshes)
