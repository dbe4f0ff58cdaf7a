"""Layout-independent weight initialisation, materialised shard by shard.

The model is built on the meta device, parallelised (TP, FSDP turn parameters into DTensors), then
`materialize` allocates each rank's shards (`to_empty`) and fills them. A parameter's values are a
function of (seed, parameter name, row) only, never of the layout:

  rows of parameter `name` are drawn in blocks of `ROWS_PER_BLOCK` along dim 0; block b comes from a CPU
  generator seeded with sha256(f"{seed}:{name}:{b}"), scaled by the parameter's std.

A rank generates only the blocks that cover its shard's rows (`compute_local_shape_and_global_offset` gives
the shard's place in the full tensor, FSDP-over-TP strided shards included) and slices the other dims, so no
rank ever holds a full tensor it does not own rows of. Names are the layout-independent FQNs (global layer
index, no wrapper prefixes), so the same name gets the same values under any DP/TP/PP/CP layout: a
tested property (tests/distributed).

Scheme (GPT-2, Radford et al. 2019): weights N(0, 0.02), residual projections (wo, w2) N(0, 0.02/sqrt(2L)),
norm scales 1, biases 0.
"""

from __future__ import annotations

import hashlib
import math

import torch
from torch import nn
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

ROWS_PER_BLOCK = 64
"""Rows generated per seeded block: small enough that a shard's edge blocks cost little extra work."""
BASE_STD = 0.02
"""Weight std of GPT-2 (Radford et al. 2019, section 2.3) and Llama reference code."""

_WRAPPER_PREFIXES = ("_checkpoint_wrapped_module.", "_fsdp_wrapped_module.", "_orig_mod.")


def canonical_name(name: str) -> str:
    """The parameter's name without activation-checkpoint/compile wrapper prefixes (same in every layout)."""
    for prefix in _WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


def param_std(name: str, num_layers: int) -> float | None:
    """Std of a normally initialised weight; None for norm scales (ones) and biases (zeros)."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "bias" or "norm" in name:
        return None
    if name.endswith(("wo.weight", "w2.weight")):
        return BASE_STD / math.sqrt(2 * num_layers)
    return BASE_STD


def _block_seed(seed: int, name: str, block: int) -> int:
    digest = hashlib.sha256(f"{seed}:{name}:{block}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def full_rows(name: str, shape: tuple[int, ...], start: int, stop: int, std: float, seed: int) -> torch.Tensor:
    """Rows [start, stop) of the full initial value of parameter `name` (fp32, CPU)."""
    rest = shape[1:]
    first_block, last_block = start // ROWS_PER_BLOCK, (stop - 1) // ROWS_PER_BLOCK
    pieces = []
    for b in range(first_block, last_block + 1):
        rows = min(ROWS_PER_BLOCK, shape[0] - b * ROWS_PER_BLOCK)
        gen = torch.Generator(device="cpu").manual_seed(_block_seed(seed, name, b))
        pieces.append(torch.randn((rows, *rest), generator=gen, dtype=torch.float32))
    block = torch.cat(pieces) if len(pieces) > 1 else pieces[0]
    offset = first_block * ROWS_PER_BLOCK
    return block[start - offset : stop - offset] * std


def initial_value(
    name: str, shape: tuple[int, ...], local_shape: tuple[int, ...], offset: tuple[int, ...], *, num_layers: int, seed: int
) -> torch.Tensor:
    """The initial value of the shard at `offset` with `local_shape` of parameter `name` of full `shape`."""
    std = param_std(name, num_layers)
    if std is None:
        fill = 0.0 if name.endswith("bias") else 1.0
        return torch.full(local_shape, fill, dtype=torch.float32)
    if 0 in local_shape:
        return torch.empty(local_shape, dtype=torch.float32)
    rows = full_rows(name, shape, offset[0], offset[0] + local_shape[0], std, seed)
    index = tuple(slice(o, o + n) for o, n in zip(offset[1:], local_shape[1:], strict=True))
    return rows[(slice(None), *index)]


@torch.no_grad()
def init_weights(module: nn.Module, *, num_layers: int, seed: int) -> None:
    """Fill every (local shard of every) parameter of `module` in place with its layout-independent value.

    Tied models split over pipeline stages hold two copies of the embedding (first chunk's table, last
    chunk's LM head); the head copy takes the table's values so both start equal."""
    args = getattr(module, "args", None)
    tied = bool(getattr(args, "tied_embeddings", False))
    for name, param in module.named_parameters():
        cname = canonical_name(name)
        if tied and cname == "output.weight":
            cname = "tok_embeddings.weight"
        if isinstance(param, DTensor):
            local_shape, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
            local = param.to_local()
        else:
            local_shape, offset = tuple(param.shape), (0,) * param.dim()
            local = param
        value = initial_value(cname, tuple(param.shape), tuple(local_shape), tuple(offset), num_layers=num_layers, seed=seed)
        local.copy_(value.reshape(local.shape))
    for _, buf in module.named_buffers():
        buf.zero_()  # the reference model's only buffers (MoE router biases) start at 0


def materialize(module: nn.Module, device: torch.device, *, num_layers: int, seed: int) -> None:
    """Allocate the meta-device `module`'s local shards on `device`, then initialise them."""
    module.to_empty(device=device)
    tie = getattr(module, "tie_weights", None)
    if tie is not None:
        tie()  # to_empty gives every module its own tensor, which unties shared weights
    init_weights(module, num_layers=num_layers, seed=seed)
