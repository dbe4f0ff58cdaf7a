"""Expert parallelism without ranks: which ranks form an EP group (against a brute-force enumeration of the
rank grid), the row regrouping of received tokens, GShard's capacity order, and the smoke model's experts."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from executor.ep import expert_major_order
from executor.routing import within_capacity
from planner.layout import DEFAULT_MESH_AXES, Layout
from planner.layout.expert_groups import DATA_AXES, ep_problem, expert_shard_size, layout_ep_parts
from planner.model import preset
from planner.model.smoke import smoke_spec


def _groups_by_enumeration(layout: Layout) -> list[set[int]] | None:
    """EP groups as the definition says: ep consecutive ranks of the data block, in the order the data axes
    vary over the rank grid (innermost fastest); None when some group is not a block of the mesh, i.e. its
    ranks' data coordinates are not a product of one range per axis (what DeviceMesh slices can express)."""
    groups: dict[tuple, list[int]] = {}
    inner_first = [a for a in reversed(layout.mesh_axes) if a in DATA_AXES]
    sizes = layout.axis_sizes()
    for rank in range(layout.world_size):
        c = layout.rank_coords(rank)
        index, stride = 0, 1
        for axis in inner_first:
            index += c[axis] * stride
            stride *= sizes[axis]
        rest = tuple(c[a] for a in layout.mesh_axes if a not in DATA_AXES)
        groups.setdefault((rest, index // layout.ep), []).append(rank)
    out = []
    for ranks in groups.values():
        coords = [layout.rank_coords(r) for r in ranks]
        per_axis = [sorted({c[a] for c in coords}) for a in DATA_AXES]
        if len(ranks) != np.prod([len(v) for v in per_axis]):
            return None
        out.append(set(ranks))
    return out


def _groups_from_parts(layout: Layout, parts: dict[str, int]) -> list[set[int]]:
    """EP groups as executor.mesh builds them: ranks equal in every coordinate except the inner `parts[a]`
    part of each data axis a (coordinate // parts[a] is the axis's mod_ep dim)."""
    groups: dict[tuple, set[int]] = {}
    for rank in range(layout.world_size):
        c = layout.rank_coords(rank)
        key = tuple(c[a] // parts[a] if a in DATA_AXES else c[a] for a in layout.mesh_axes)
        groups.setdefault(key, set()).add(rank)
    return list(groups.values())


LAYOUTS = [
    Layout(dp=4, ep=2, zero=3, dp_shard=4),
    Layout(dp=4, ep=4, zero=3, dp_shard=2),  # spans DP replicas (beyond TorchTitan)
    Layout(dp=2, cp=2, ep=2, zero=3, dp_shard=2),  # EP inside CP
    Layout(dp=2, cp=4, ep=2, zero=3, dp_shard=2),
    Layout(dp=2, cp=2, ep=4, zero=0, tp=2),
    Layout(dp=4, ep=2, zero=3, dp_shard=2, mesh_axes=("tp", "dp_shard", "pp", "cp", "dp_replicate")),
    Layout(dp=2, cp=2, ep=2, zero=3, dp_shard=2, mesh_axes=("pp", "cp", "dp_replicate", "tp", "dp_shard")),
    Layout(dp=3, cp=2, ep=3),  # not a block: 3 neither divides cp=2 nor is a multiple of it
    Layout(dp=12, ep=6, zero=3, dp_shard=4),  # 6 spans more than dp_shard=4 but is no multiple of it
    Layout(dp=6, ep=3, zero=3, dp_shard=6),
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda lay: lay.describe() + " " + ",".join(lay.mesh_axes))
def test_ep_groups_match_the_enumerated_definition(layout: Layout) -> None:
    want = _groups_by_enumeration(layout)
    parts = layout_ep_parts(layout)
    if want is None:
        assert parts is None and ep_problem(layout) is not None
        return
    assert parts is not None and ep_problem(layout) is None
    assert sorted(map(sorted, _groups_from_parts(layout, parts))) == sorted(map(sorted, want))
    assert all(len(g) == layout.ep for g in want)


def test_expert_states_shard_over_the_shard_ranks_outside_ep() -> None:
    def shard(layout: Layout) -> int:
        sizes = {a: np.array([layout.axis_sizes()[a]]) for a in DATA_AXES}
        inner = [a for a in reversed(layout.mesh_axes) if a in DATA_AXES]
        return int(expert_shard_size(np.array([layout.ep]), sizes, inner)[0])

    assert shard(Layout(dp=8, ep=1, zero=3, dp_shard=8)) == 8  # no EP: experts are dense weights
    assert shard(Layout(dp=8, ep=2, zero=3, dp_shard=8)) == 4  # EP takes 2 of the 8 shard ranks
    assert shard(Layout(dp=4, cp=2, ep=2, zero=3, dp_shard=4)) == 4  # EP inside CP: the shard group is whole
    assert shard(Layout(dp=4, ep=4, zero=3, dp_shard=2)) == 1  # EP spans the shard group and a replica


def test_every_power_of_two_layout_has_block_ep_groups() -> None:
    """With power-of-two degrees the block condition always holds (one of two powers of 2 divides the other)."""
    for dp_r, dp_s, cp, ep in itertools.product((1, 2, 4), (1, 2, 4), (1, 2, 4), (2, 4, 8, 16)):
        dp = dp_r * dp_s
        if (dp * cp) % ep:
            continue
        for axes in (DEFAULT_MESH_AXES, ("cp", "dp_shard", "tp", "dp_replicate", "pp")):
            layout = Layout(dp=dp, cp=cp, ep=ep, zero=3 if dp_s > 1 else 0, dp_shard=dp_s, mesh_axes=axes)
            assert ep_problem(layout) is None, layout


def test_received_rows_are_regrouped_by_expert() -> None:
    # From rank 0: 2 rows for local expert 0, 1 for expert 1; from rank 1: 0 and 3; from rank 2: 1 and 0.
    counts = torch.tensor([[2, 1], [0, 3], [1, 0]])
    # Arrival order: r0e0 r0e0 r0e1 | r1e1 r1e1 r1e1 | r2e0  ->  expert 0: rows 0, 1, 6; expert 1: 2, 3, 4, 5.
    assert expert_major_order(counts).tolist() == [0, 1, 6, 2, 3, 4, 5]
    assert expert_major_order(torch.zeros(2, 2, dtype=torch.int64)).tolist() == []


def test_capacity_places_first_choices_before_second_ones() -> None:
    # One sequence of 4 tokens, top-2 over 3 experts, capacity 2 per expert.
    chosen = torch.tensor([[[0, 1], [0, 2], [1, 0], [0, 1]]])
    # First choices in token order: e0 (t0, t1, t3) and e1 (t2): t3's first choice is e0's third -> dropped.
    # Second choices: e1 (t0) is e1's second place -> kept; e2 (t1) kept; e0 (t2) is full -> dropped;
    # e1 (t3) would be e1's third -> dropped.
    want = [[True, True], [True, True], [True, False], [False, False]]
    assert within_capacity(chosen, 3, 2)[0].tolist() == want


def test_smoke_model_keeps_experts_divisible_by_ep() -> None:
    spec = preset("deepseek-v3")  # 256 routed experts
    assert smoke_spec(spec, tp=1, cp=1).moe.num_experts == 4
    assert smoke_spec(spec, tp=1, cp=1, ep=8).moe.num_experts == 8
    assert smoke_spec(spec, tp=1, cp=1, ep=2).moe.num_experts == 4
    assert smoke_spec(preset("tiny-moe"), tp=1, cp=1, ep=4).moe.num_experts == 4


def test_planner_expert_state_memory_follows_the_executor_meshes() -> None:
    """Hand count: ZeRO-3 over dp_shard=8 with ep=2 (EP takes 2 of the shard ranks): dense states / 8,
    each rank's experts (half of them) / the 4 shard ranks outside its EP group. fp32 AdamW: 8 B of moments."""
    import hardware_profiles as hp
    from planner import evaluate
    from planner.workload import Workload

    spec = preset("tiny-moe")
    plan = evaluate(spec, hp.cluster("local-cpu", gpus=8), Workload(global_batch=8, seq_len=64, dtype="fp32"),
                    Layout(dp=8, ep=2, zero=3, dp_shard=8, micro_batch=1), allow_oom=True)
    layers = range(spec.num_layers)
    dense = sum(spec.layer_dense_params(i) for i in layers) + spec.embedding_params() + spec.output_params()
    experts = sum(spec.layer_expert_params(i) for i in layers)
    (stage,) = plan.prediction.memory_per_stage
    assert stage.optimizer_bytes == pytest.approx(8 * (dense / 8 + experts / 2 / 4), rel=1e-12)
    assert stage.weights_bytes == pytest.approx(4 * (dense / 8 + experts / 2 / 4), rel=1e-12)
