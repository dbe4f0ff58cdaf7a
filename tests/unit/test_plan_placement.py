"""The plan's rank placement: built without per-object validation from meshplan's own topology
(`placement_of`), equal in every respect to validated `RankPlacement`s; a plan file's placement is still
validated in full when loaded."""

from __future__ import annotations

import gc
import json

import pytest

import hardware_profiles
from planner.api import search
from planner.cost.context import cached_topology
from planner.errors import UserError
from planner.layout import Workload
from planner.model import load_model
from planner.plan import Plan, RankPlacement, placement_of


def test_trusted_placement_equals_validated_objects() -> None:
    topology = cached_topology(hardware_profiles.cluster("dgx-h100", nodes=2))
    pairs = topology.hosts_and_indices(16)
    fast = placement_of(pairs)
    slow = tuple(RankPlacement(rank=r, host=h, gpu=g) for r, (h, g) in enumerate(pairs))
    assert fast == slow
    assert [p.model_dump_json() for p in fast] == [p.model_dump_json() for p in slow]
    assert [p.model_fields_set for p in fast] == [p.model_fields_set for p in slow]
    assert [hash(p) for p in fast] == [hash(p) for p in slow]
    assert (fast[9].host, fast[9].gpu) == (1, 1)
    with pytest.raises(Exception, match="frozen"):
        fast[0].host = 3  # type: ignore[misc]


def test_plan_with_trusted_placement_round_trips_and_loads_validated(tmp_path) -> None:
    plan = search(load_model("llama3-8b"), hardware_profiles.cluster("dgx-h100", nodes=2),
                  Workload(global_batch=64, seq_len=8192))[0]
    assert [(p.rank, p.host, p.gpu) for p in plan.placement] == [(r, r // 8, r % 8) for r in range(16)]
    text = plan.model_dump_json()
    assert Plan.model_validate_json(text) == plan
    path = tmp_path / "plan.json"
    path.write_text(text)
    assert Plan.load(path) == plan
    data = json.loads(text)
    data["placement"][3]["host"] = -1  # a hand-edited plan file is checked entry by entry
    path.write_text(json.dumps(data))
    with pytest.raises(UserError, match="placement"):
        Plan.load(path)


def test_placement_leaves_the_cyclic_collector_as_it_found_it() -> None:
    """placement_of pauses the collector while it builds (no cycles to free) and restores its state."""
    assert gc.isenabled()
    assert placement_of([(0, 0), (0, 1)])[1] == RankPlacement(rank=1, host=0, gpu=1)
    assert gc.isenabled()
    gc.disable()
    try:
        placement_of([(0, 0)])
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(TypeError):
        placement_of([(0, 0), None])  # type: ignore[list-item]  (a failure midway re-enables it too)
    assert gc.isenabled()
