"""The DeviceMesh of a plan: built in the plan's axis order, then sliced and flattened for each job.

`init_device_mesh` lays ranks out row-major over `layout.mesh_axes` (outermost first), exactly as the
planner's `Layout.rank_coords` and placement assume. From it:

  dp           = (dp_replicate, dp_shard) flattened: data sharding and loss averaging
  fsdp         = the mesh FSDP/replicate reduce gradients over. CP ranks hold the same weights as DP ranks,
                 so CP joins the gradient group. ZeRO >= 1 shards over dp_shard x cp flattened, the planner's
                 sharding group (planner.layout.expert_groups.state_shard_ranks; TorchTitan's dp_shard_cp
                 mesh), and replicates across dp_replicate: a 2-D HSDP mesh (replicate, shard) when
                 dp_replicate > 1. ZeRO-0 replicates over (dp_replicate, dp_shard, cp) flattened.
  tp, cp, pp   = 1-D slices.
  ep           = expert parallelism (ep > 1): the `ep` consecutive ranks of the data block
                 dp_replicate x dp_shard x cp (planner.layout.expert_groups). To slice it, each data axis X is
                 built as two mesh dims, X_mod_ep (outer) and X_in_ep (inner: the ranks of X inside one EP
                 group), whose row-major product is X, so the rank layout is exactly the plan's.
  expert_dp    = the mesh the experts' gradients are reduced over: the data ranks outside the EP group,
                 treated as the dense weights are treated: ZeRO >= 1 shards over (dp_shard_mod_ep, cp_mod_ep)
                 flattened (planner.layout.expert_groups.expert_shard_size) and replicates across
                 dp_replicate_mod_ep (HSDP when that is > 1); ZeRO-0 replicates over all three.

Flattening is needed only where two axes are both > 1 (a size-1 axis adds nothing), which keeps the number of
process groups created small. After building, `check` compares every submesh size with the layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from planner.layout import Layout
from planner.layout.expert_groups import (
    DATA_AXES,
    SHARD_AXES,
    data_axes_inner_first,
    expert_shard_size,
    layout_ep_parts,
    state_shard_ranks,
)


@dataclass(kw_only=True)
class Meshes:
    world: DeviceMesh
    """The full mesh: the plan's axes in its order (data axes split in two under EP, see the module docstring)."""
    pp: DeviceMesh
    tp: DeviceMesh
    cp: DeviceMesh
    dp: DeviceMesh
    """(dp_replicate, dp_shard), 1-D flattened: which slice of the global batch a rank reads."""
    fsdp: DeviceMesh
    """Gradient-reduction mesh: 1-D (shard or replicate group) or 2-D (replicate, shard) for HSDP."""
    layout: Layout
    ep: DeviceMesh | None = None
    """The EP group (ep > 1), else None."""
    expert_dp: DeviceMesh | None = None
    """Gradient-reduction mesh of the experts under EP (ep > 1), else None (experts are dense weights)."""

    @property
    def dp_rank(self) -> int:
        return self.dp.get_local_rank()

    @property
    def pp_rank(self) -> int:
        return self.pp.get_local_rank()

    @property
    def cp_rank(self) -> int:
        return self.cp.get_local_rank()

    @property
    def tp_rank(self) -> int:
        return self.tp.get_local_rank()

    def owns_experts(self) -> bool:
        """True on one rank of every expert replica set (coordinate 0 in the expert-data-parallel and TP
        meshes; with ep = 1, DP/CP/TP coordinate 0): who counts a copy of the experts exactly once."""
        if self.expert_dp is None:
            return self.dp_rank == 0 and self.cp_rank == 0 and self.tp_rank == 0
        coords = self.expert_dp.get_coordinate() or []
        return all(c == 0 for c in coords) and self.tp_rank == 0


def _dims(layout: Layout) -> tuple[list[str], list[int], dict[str, list[str]]]:
    """World mesh dims (names, sizes) and, per plan axis, the dims that make it up (row-major)."""
    sizes = layout.axis_sizes()
    parts = layout_ep_parts(layout) if layout.ep > 1 else None
    assert layout.ep == 1 or parts is not None, "EP groups not a block of the mesh (executor.train.check_plan)"
    names: list[str] = []
    shape: list[int] = []
    members: dict[str, list[str]] = {}
    for axis in layout.mesh_axes:
        if parts is not None and axis in DATA_AXES:
            members[axis] = [f"{axis}_mod_ep", f"{axis}_in_ep"]
            shape += [sizes[axis] // parts[axis], parts[axis]]
        else:
            members[axis] = [axis]
            shape.append(sizes[axis])
        names += members[axis]
    return names, shape, members


def _combine(world: DeviceMesh, dims: list[str], name: str) -> DeviceMesh:
    """One 1-D mesh spanning `dims`: a plain slice when at most one of them is > 1, else a `_flatten`.

    DeviceMesh slices only in mesh order, so the dims are taken in the order the world mesh has them.
    """
    names = list(world.mesh_dim_names or ())
    big = [a for a in names if a in dims and world[a].size() > 1]
    if len(big) <= 1:
        return world[big[0] if big else dims[0]]
    return world[tuple(big)]._flatten(name)


def build_meshes(layout: Layout, device_type: str) -> Meshes:
    names, shape, members = _dims(layout)
    world = init_device_mesh(device_type, tuple(shape), mesh_dim_names=tuple(names))

    def of(*axes: str) -> list[str]:
        return [d for a in axes for d in members[a]]

    dp = _combine(world, of("dp_replicate", "dp_shard"), "dp")
    if layout.zero == 0:
        # ZeRO-0 replicates over every DP x CP rank.
        fsdp = _combine(world, of(*DATA_AXES), "dp_cp")
    else:
        # Shard over dp_shard x cp, replicate across dp_replicate: HSDP (also when the shard group is 1).
        fsdp = _fsdp_mesh(world, of("dp_replicate"), of(*SHARD_AXES), "dp_shard_cp")
    ep = expert_dp = None
    if layout.ep > 1:
        ep = _combine(world, [f"{a}_in_ep" for a in DATA_AXES], "ep")
        if layout.zero == 0:
            expert_dp = _combine(world, [f"{a}_mod_ep" for a in DATA_AXES], "expert_dp")
        else:
            expert_dp = _fsdp_mesh(world, ["dp_replicate_mod_ep"], [f"{a}_mod_ep" for a in SHARD_AXES],
                                   "expert_shard")
    meshes = Meshes(
        world=world, pp=world["pp"], tp=world["tp"], cp=_combine(world, of("cp"), "cp"), dp=dp, fsdp=fsdp,
        layout=layout, ep=ep, expert_dp=expert_dp,
    )
    check(meshes)
    return meshes


def _fsdp_mesh(world: DeviceMesh, replicate_dims: list[str], shard_dims: list[str], shard_name: str) -> DeviceMesh:
    """The 1-D shard mesh over `shard_dims`, or the 2-D (replicate, shard) HSDP mesh when the replicate dims
    have more than one rank."""
    shard = _combine(world, shard_dims, shard_name)
    replicate = _combine(world, replicate_dims, f"{shard_name}_replicate")
    return _hsdp_mesh(replicate, shard) if replicate.size() > 1 else shard


def _hsdp_mesh(replicate: DeviceMesh, shard: DeviceMesh) -> DeviceMesh:
    """The 2-D (replicate, shard) mesh of HSDP from two 1-D submeshes of the world mesh.

    Slicing cannot produce it in general (DeviceMesh slices only in mesh order, and dp_shard usually sits
    between dp_replicate and cp), and a mesh built from the rank grid would not share the world mesh's root,
    which FSDP needs to combine it with the TP mesh. `DeviceMesh._concatenate` (what FSDP2 itself uses for
    `DataParallelMeshDims`) joins two submeshes of the same root.
    """
    return DeviceMesh._concatenate([replicate, shard])


def check(meshes: Meshes) -> None:
    """Submesh sizes must equal the layout's degrees (an internal invariant; a failure is a meshplan bug)."""
    lay = meshes.layout
    expected = {"pp": lay.pp, "tp": lay.tp, "cp": lay.cp, "dp": lay.dp}
    for name, size in expected.items():
        got = getattr(meshes, name).size()
        assert got == size, f"{name} mesh has {got} ranks, layout says {size}"
    fsdp_ranks = meshes.fsdp.size()
    assert fsdp_ranks == lay.dp * lay.cp, f"gradient mesh has {fsdp_ranks} ranks, expected dp*cp={lay.dp * lay.cp}"
    if lay.zero >= 1:
        got = shard_ranks(meshes.fsdp)
        want = state_shard_ranks(lay.dp_shard, lay.cp)
        assert got == want, f"FSDP shards over {got} ranks, the planner over dp_shard*cp={want}"
    if lay.ep > 1:
        assert meshes.ep is not None and meshes.expert_dp is not None
        assert meshes.ep.size() == lay.ep, f"ep mesh has {meshes.ep.size()} ranks, layout says {lay.ep}"
        edp = meshes.expert_dp.size()
        assert edp * lay.ep == lay.dp * lay.cp, f"expert gradient mesh has {edp} ranks, expected dp*cp/ep"
        if lay.zero >= 1:
            got, want = shard_ranks(meshes.expert_dp), planner_expert_shard(lay)
            assert got == want, f"experts shard over {got} ranks, the planner over {want}"


def shard_ranks(mesh: DeviceMesh) -> int:
    """Ranks FSDP shards over on a gradient mesh: its last dim (the shard dim of a 2-D HSDP mesh)."""
    return int(mesh.size(mesh.ndim - 1))


def planner_expert_shard(layout: Layout) -> int:
    """Ranks the planner shards `layout`'s routed-expert states over (cost.layer_costs.expert_shard's rule)."""
    sizes = {a: np.array([n]) for a, n in layout.axis_sizes().items() if a in DATA_AXES}
    return int(expert_shard_size(np.array([layout.ep]), sizes, data_axes_inner_first(layout.mesh_axes))[0])
