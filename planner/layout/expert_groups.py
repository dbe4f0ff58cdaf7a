"""Expert-parallel groups: which ranks exchange tokens, and how the others hold the experts (numpy only).

EP borrows its ranks from the data block D = dp_replicate x dp_shard x cp (the ranks that hold the same
weights and different tokens), as TorchTitan composes it (`ParallelDims`: "EP borrows all cp and some
dp_shard degree"). A rank's EP group is the `ep` consecutive ranks of D in the plan's axis order: walking
D's axes from the innermost (the fastest-varying in `mesh_axes`), EP takes every rank of each axis while ep
covers it, then a divisor of the next one. With the default order (cp inside dp_shard inside dp_replicate)
EP takes the CP ranks first, then the shard group, then DP replicas.

The rule (`ep_problem`): ep divides dp * cp, and along that walk ep is a multiple of the size of every axis
it covers wholly and divides the size of the axis where it ends. Otherwise the group is not a block of the
mesh and no DeviceMesh slice can express it. With power-of-two degrees the second part always holds.
Beyond TorchTitan (which needs cp | ep and ep | dp_shard * cp) the executor also builds EP groups inside CP
(ep < cp) and EP groups that span DP replicas (ZeRO-0, or an HSDP shard group smaller than ep / cp).

Dense model states (`state_shard_ranks`): ZeRO >= 1 shards them over dp_shard x cp and replicates them over
dp_replicate (HSDP when dp_replicate > 1). The CP ranks of a replica hold the same weights and sum their
gradients, so sharding over them too moves no more bytes per rank and divides the states by cp once more.
TorchTitan does this (v0.2.0 torchtitan/distributed/parallel_dims.py line 141 flattens ("dp_shard", "cp") into
"dp_shard_cp"; models/llama3/infra/parallelize.py lines 115-121 apply FSDP over ("dp_replicate", "dp_shard_cp")),
and so does Megatron-Core's distributed optimizer (core_r0.9.0 megatron/core/optimizer/__init__.py line 402
`get_data_parallel_group(with_context_parallel=True)`; distributed_data_parallel.py line 227, the gradient
buffers' reduce-scatter group; NeMo 24.09 nemo/core/optim/distributed_adam.py line 132 for Apex's optimizer).
ZeRO-0 replicates over the whole data block.

Experts: each EP rank holds num_experts / ep of them. The D / ep ranks with the same EP coordinate (the
expert-data-parallel group) hold the same experts and treat them as the dense weights are treated,
restricted to the ranks outside EP: ZeRO >= 1 shards them over the dp_shard x cp ranks outside EP
(`expert_shard_size`; TorchTitan's efsdp = dp_shard x cp / ep, parallel_dims.py, where EP lies inside
dp_shard x cp; Megatron's expert optimizer over dp x cp / ep, core_r0.9.0 optimizer/__init__.py line 431 and
parallel_state.py lines 848-862) and replicates them over the dp_replicate ranks outside EP; ZeRO-0
replicates them over the whole expert-data-parallel group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

DATA_AXES = ("dp_replicate", "dp_shard", "cp")
"""The axes of the data block D that EP borrows from."""


def data_axes_inner_first(mesh_axes: Sequence[str]) -> list[str]:
    """D's axes from the fastest-varying (innermost) to the slowest, as laid out by `mesh_axes`."""
    return [a for a in reversed(tuple(mesh_axes)) if a in DATA_AXES]


def ep_parts(
    ep: np.ndarray, sizes: Mapping[str, np.ndarray], axes_inner_first: Sequence[str]
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per D axis, how many of its ranks one EP group spans (1 = none, the axis size = all), and whether
    the group is a block of the mesh (see the module docstring). Vectorised over rows."""
    remaining = np.asarray(ep, dtype=np.int64)
    ok = np.ones(remaining.shape, dtype=bool)
    parts: dict[str, np.ndarray] = {}
    for axis in axes_inner_first:
        size = np.asarray(sizes[axis], dtype=np.int64)
        whole = remaining >= size
        ok &= np.where(whole, remaining % size == 0, size % remaining == 0)
        parts[axis] = np.where(whole, size, remaining)
        remaining = np.where(whole, remaining // size, 1)
    return parts, ok & (remaining == 1)


def layout_ep_parts(layout) -> dict[str, int] | None:
    """`ep_parts` of one `Layout` as plain ints, or None when its EP group is not a block of the mesh."""
    sizes = {a: np.array([layout.axis_sizes()[a]]) for a in DATA_AXES}
    parts, ok = ep_parts(np.array([layout.ep]), sizes, data_axes_inner_first(layout.mesh_axes))
    if not bool(ok[0]) or (layout.dp * layout.cp) % layout.ep:
        return None
    return {a: int(p[0]) for a, p in parts.items()}


def ep_problem(layout) -> str | None:
    """Why the executor cannot build `layout`'s EP groups (one line), or None when it can."""
    if layout.ep == 1 or layout_ep_parts(layout) is not None:
        return None
    return not_a_block(layout.ep, layout.axis_sizes(), data_axes_inner_first(layout.mesh_axes))


def not_a_block(ep: int, sizes: Mapping[str, int], axes_inner_first: Sequence[str]) -> str:
    """The one-line reason an EP group of `ep` ranks is not a block of the data axes (`ep_problem`)."""
    walk = ", ".join(f"{a}={sizes[a]}" for a in axes_inner_first)
    return (f"ep={ep} is not a block of the data axes ({walk}, innermost first): EP takes ep consecutive "
            "ranks of them, so ep must be a multiple of each axis it spans and divide the axis it ends in")


SHARD_AXES = ("dp_shard", "cp")
"""The axes ZeRO >= 1 shards model states over (flattened; see the module docstring); dp_replicate replicates."""


def state_shard_ranks(dp_shard, cp):
    """Ranks ZeRO >= 1 shards a rank's dense model states over: dp_shard x cp (the module docstring, with the
    TorchTitan and Megatron sources). The one rule the executor's FSDP mesh and the cost model both follow."""
    return dp_shard * cp


def expert_shard_size(ep: np.ndarray, sizes: Mapping[str, np.ndarray], axes_inner_first: Sequence[str]) -> np.ndarray:
    """Ranks a ZeRO >= 1 rank shards its experts' states over: the dp_shard x cp ranks outside its EP group
    (`state_shard_ranks` when ep == 1). Rows whose EP group is not a block get the same formula (not buildable;
    `ep_problem` says so)."""
    parts, _ = ep_parts(ep, sizes, axes_inner_first)
    return np.prod([np.asarray(sizes[a], dtype=np.int64) // parts[a] for a in SHARD_AXES], axis=0)
