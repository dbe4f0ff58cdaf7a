"""The executor's FSDP meshes shard over exactly the ranks the cost model divides the model states by.

One process builds every rank's DeviceMesh through torch's fake process group (no communication): the shard
dim of the dense gradient mesh must have dp_shard x cp ranks (`expert_groups.state_shard_ranks`) and the
experts' the count `cost.layer_costs.expert_shard` prices, for every mesh order the search builds and the
orders with EP inside CP or across DP replicas."""

from __future__ import annotations

import pytest
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from executor.mesh import build_meshes, shard_ranks
from planner.cost.layer_costs import expert_shard
from planner.layout import SEARCHED_ORDERS, Layout, layout_to_row
from planner.layout.expert_groups import state_shard_ranks

LAYOUTS = [
    Layout(dp=2, cp=2, zero=3, dp_shard=2),  # cp2 x dp_shard2: FSDP over 4 ranks, no replica
    Layout(dp=4, cp=2, zero=1, dp_shard=2),  # HSDP: replicate 2 x shard (dp_shard 2 x cp 2)
    Layout(dp=2, cp=2, tp=2, zero=2, dp_shard=1),  # FSDP over the CP ranks alone, HSDP over dp_replicate
    Layout(dp=2, cp=2, pp=2, zero=3, dp_shard=2, num_microbatches=2, mesh_axes=list(SEARCHED_ORDERS[1])),  # pp between dp_shard, cp
    Layout(dp=2, cp=2, ep=2, zero=3, dp_shard=2),  # EP inside CP: experts over the dp_shard ranks
    Layout(dp=2, cp=4, ep=2, zero=2, dp_shard=2),  # EP takes half the CP ranks
    Layout(dp=4, cp=2, ep=4, zero=3, dp_shard=2),  # EP over CP and dp_shard, experts replicated over DP
    Layout(dp=4, cp=2, ep=8, zero=1, dp_shard=2),  # EP across DP replicas: experts unsharded
    Layout(dp=4, cp=2, zero=0),  # DDP over every data rank: nothing sharded
]


@pytest.fixture
def fake_world(request):
    """A fake process group of the layout's world size (rank 0), torn down after the test."""
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=request.param.world_size)
    yield request.param
    dist.destroy_process_group()


@pytest.mark.parametrize("fake_world", LAYOUTS, ids=str, indirect=True)
def test_fsdp_meshes_shard_over_what_the_cost_model_divides_by(fake_world: Layout) -> None:
    layout = fake_world
    meshes = build_meshes(layout, "cpu")
    assert meshes.fsdp.size() == layout.dp * layout.cp  # every data rank reduces the gradients
    if layout.zero == 0:
        assert meshes.fsdp.ndim == 1
        return
    assert shard_ranks(meshes.fsdp) == state_shard_ranks(layout.dp_shard, layout.cp)
    assert meshes.fsdp.size() // shard_ranks(meshes.fsdp) == layout.dp_replicate
    assert meshes.fsdp.ndim == (2 if layout.dp_replicate > 1 else 1)
    if layout.ep > 1:
        assert shard_ranks(meshes.expert_dp) == int(expert_shard(layout_to_row(layout))[0])
