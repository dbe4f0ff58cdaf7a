"""The DeviceMesh of a plan: built in the plan's axis order, then sliced and flattened for each job.

`init_device_mesh` lays ranks out row-major over `layout.mesh_axes` (outermost first), exactly as the
planner's `Layout.rank_coords` and placement assume. From it:

  dp           = (dp_replicate, dp_shard) flattened: data sharding and loss averaging
  fsdp         = the mesh FSDP/replicate reduce gradients over. CP ranks hold the same weights as DP ranks,
                 so CP joins the gradient group. ZeRO >= 1 shards over `dp_shard` only, the plan's sharding
                 group (the planner's memory model divides by dp_shard), and replicates across
                 dp_replicate x cp: a 2-D HSDP mesh (replicate, shard) whenever that product is > 1.
                 ZeRO-0 replicates over (dp_replicate, dp_shard, cp) flattened.
  tp, cp, pp   = 1-D slices.

Flattening is needed only where two axes are both > 1 (a size-1 axis adds nothing), which keeps the number of
process groups created small. After building, `check` compares every submesh size with the layout.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from planner.layout import Layout


@dataclass(kw_only=True)
class Meshes:
    world: DeviceMesh
    """The full mesh, dims named and ordered as `layout.mesh_axes`."""
    pp: DeviceMesh
    tp: DeviceMesh
    cp: DeviceMesh
    dp: DeviceMesh
    """(dp_replicate, dp_shard), 1-D flattened: which slice of the global batch a rank reads."""
    fsdp: DeviceMesh
    """Gradient-reduction mesh: 1-D (shard or replicate group) or 2-D (replicate, shard) for HSDP."""
    layout: Layout

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


def _combine(world: DeviceMesh, axes: list[str], name: str) -> DeviceMesh:
    """One 1-D mesh spanning `axes`: a plain slice when at most one of them is > 1, else a `_flatten`.

    DeviceMesh slices only in mesh order, so the axes are taken in the order the plan put them.
    """
    names = list(world.mesh_dim_names or ())
    big = [a for a in names if a in axes and world[a].size() > 1]
    if len(big) <= 1:
        return world[big[0] if big else axes[0]]
    return world[tuple(big)]._flatten(name)


def build_meshes(layout: Layout, device_type: str) -> Meshes:
    world = init_device_mesh(device_type, layout.mesh_shape, mesh_dim_names=tuple(layout.mesh_axes))
    dp = _combine(world, ["dp_replicate", "dp_shard"], "dp")
    if layout.zero == 0:
        # ZeRO-0 replicates over every DP x CP rank.
        fsdp = _combine(world, ["dp_replicate", "dp_shard", "cp"], "dp_cp")
    elif layout.dp_replicate * layout.cp > 1:
        # Shard inside dp_shard, replicate across dp_replicate x cp: HSDP (also when the shard group is 1).
        fsdp = _hsdp_mesh(world)
    else:
        fsdp = world["dp_shard"]
    meshes = Meshes(world=world, pp=world["pp"], tp=world["tp"], cp=world["cp"], dp=dp, fsdp=fsdp, layout=layout)
    check(meshes)
    return meshes


def _hsdp_mesh(world: DeviceMesh) -> DeviceMesh:
    """The 2-D (replicate = dp_replicate x cp, shard = dp_shard) mesh of HSDP.

    Slicing cannot produce it in general (DeviceMesh slices only in mesh order, and dp_shard usually sits
    between dp_replicate and cp), and a mesh built from the rank grid would not share the world mesh's root,
    which FSDP needs to combine it with the TP mesh. `DeviceMesh._concatenate` (what FSDP2 itself uses for
    `DataParallelMeshDims`) joins two submeshes of the same root.
    """
    replicate = _combine(world, ["dp_replicate", "cp"], "dp_replicate_cp")
    return DeviceMesh._concatenate([replicate, world["dp_shard"]])


def check(meshes: Meshes) -> None:
    """Submesh sizes must equal the layout's degrees (an internal invariant; a failure is a meshplan bug)."""
    lay = meshes.layout
    expected = {"pp": lay.pp, "tp": lay.tp, "cp": lay.cp, "dp": lay.dp}
    for name, size in expected.items():
        got = getattr(meshes, name).size()
        assert got == size, f"{name} mesh has {got} ranks, layout says {size}"
    fsdp_ranks = meshes.fsdp.size()
    assert fsdp_ranks == lay.dp * lay.cp, f"gradient mesh has {fsdp_ranks} ranks, expected dp*cp={lay.dp * lay.cp}"
