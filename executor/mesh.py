"""The DeviceMesh of a plan: built in the plan's axis order, then sliced and flattened for each job.

`init_device_mesh` lays ranks out row-major over `layout.mesh_axes` (outermost first), exactly as the
planner's `Layout.rank_coords` and placement assume. From it:

  dp           = (dp_replicate, dp_shard) flattened: data sharding and loss averaging
  fsdp         = the mesh FSDP/replicate reduce gradients over. CP ranks hold the same weights as DP ranks,
                 so CP joins the gradient group (as in torchtitan): ZeRO >= 1 shards over (dp_shard, cp)
                 flattened, with dp_replicate as the outer replicate axis of a 2-D HSDP mesh when it is > 1
                 (`Layout.dp_shard` is the sharding group: zero 3 with dp_shard 1 shards nothing); ZeRO-0
                 replicates over (dp_replicate, dp_shard, cp) flattened.
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
    elif layout.dp_replicate > 1:
        # Shard inside (dp_shard x cp), replicate across dp_replicate: HSDP (also when the shard group is 1).
        fsdp = _hsdp_mesh(world, _combine(world, ["dp_shard", "cp"], "dp_shard_cp"), device_type)
    else:
        fsdp = _combine(world, ["dp_shard", "cp"], "dp_shard_cp")
    meshes = Meshes(world=world, pp=world["pp"], tp=world["tp"], cp=world["cp"], dp=dp, fsdp=fsdp, layout=layout)
    check(meshes)
    return meshes


def _hsdp_mesh(world: DeviceMesh, shard: DeviceMesh, device_type: str) -> DeviceMesh:
    """The 2-D (dp_replicate, shard) mesh of HSDP.

    A slice of the world mesh when the plan puts dp_replicate outside the shard axes (the usual order);
    otherwise DeviceMesh cannot slice out of order and the mesh is rebuilt from the rank grid.
    """
    shard_name = shard.mesh_dim_names[0] if shard.mesh_dim_names else "dp_shard"
    try:
        return world["dp_replicate", shard_name]
    except KeyError:
        return _explicit_hsdp(world, device_type)


def _explicit_hsdp(world: DeviceMesh, device_type: str) -> DeviceMesh:
    """(dp_replicate, dp_shard x cp) from the rank grid, replicate axis first, for unusual axis orders.

    Every rank builds the same 3-D mesh (all other axes folded into the first dim), so every rank takes part
    in creating every group, then slices its own 2-D plane.
    """
    names = list(world.mesh_dim_names or ())
    grid = world.mesh.permute([names.index(a) for a in ("pp", "tp", "dp_replicate", "dp_shard", "cp")])
    full = grid.reshape(grid.shape[0] * grid.shape[1], grid.shape[2], -1)
    mesh = DeviceMesh(device_type, full, mesh_dim_names=("pp_tp", "dp_replicate", "dp_shard_cp"))
    return mesh["dp_replicate", "dp_shard_cp"]


def check(meshes: Meshes) -> None:
    """Submesh sizes must equal the layout's degrees (an internal invariant; a failure is a meshplan bug)."""
    lay = meshes.layout
    expected = {"pp": lay.pp, "tp": lay.tp, "cp": lay.cp, "dp": lay.dp}
    for name, size in expected.items():
        got = getattr(meshes, name).size()
        assert got == size, f"{name} mesh has {got} ranks, layout says {size}"
    fsdp_ranks = meshes.fsdp.size()
    assert fsdp_ranks == lay.dp * lay.cp, f"gradient mesh has {fsdp_ranks} ranks, expected dp*cp={lay.dp * lay.cp}"
