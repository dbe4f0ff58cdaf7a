"""Every-k recomputation with pipeline parallelism: even chunks that each hold a multiple of k layers.

Each chunk then recomputes exactly 1/k of its layers, what the mean-layer cost counts and what Megatron's block
method (the same number of layers in every chunk) and the executor (every k-th layer of each chunk) run.
"""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

import hardware_profiles
from planner.api import evaluate, search
from planner.errors import UserError
from planner.layout import Layout, Workload, rules
from planner.model import preset
from planner.validation.records import load_validated_runs

MODEL = preset("llama3-8b")  # 32 layers
CLUSTER = hardware_profiles.cluster("dgx-h100", nodes=1)
WORKLOAD = Workload(global_batch=64, seq_len=4096)


def test_the_search_gives_every_chunk_the_same_layers_and_matches_evaluate() -> None:
    plans = search(MODEL, CLUSTER, WORKLOAD, top=3, pp=4, recompute="every-2")
    assert plans
    for plan in plans:
        lay = plan.layout
        chunks = lay.partition(MODEL.num_layers)
        assert len(set(chunks)) == 1 and chunks[0] % 2 == 0, chunks
        again = evaluate(MODEL, CLUSTER, WORKLOAD, lay.model_copy(update={"layer_partition": None}))
        np.testing.assert_allclose(again.prediction.step_time_s, plan.prediction.step_time_s, rtol=1e-12)


def test_every_k_keeps_the_activations_in_between_none_and_full_rank_by_rank() -> None:
    """Per stage, every-2 keeps half of its layers as full recomputation does and half as none: its activation
    bytes are the mean of theirs on every rank (even chunks), and its step lies between theirs."""
    base = Layout(dp=2, pp=4, num_microbatches=16, micro_batch=2, zero=1, dp_shard=2, layer_partition=(8, 8, 8, 8))
    by = {rc: evaluate(MODEL, CLUSTER, WORKLOAD, base.model_copy(update={"recompute": rc}), allow_oom=True)
          for rc in ("none", "every-2", "full")}
    acts = {rc: [s.activations_bytes for s in p.prediction.memory_per_stage] for rc, p in by.items()}
    np.testing.assert_allclose(acts["every-2"], 0.5 * (np.array(acts["none"]) + np.array(acts["full"])), rtol=1e-9)
    steps = [by[rc].prediction.step_time_s for rc in ("none", "every-2", "full")]
    assert steps[0] < steps[1] < steps[2]


def test_uneven_or_indivisible_chunks_are_refused_by_name() -> None:
    # 4 x 4 chunks of 2 layers cannot recompute every 4th
    interleaved = Layout(dp=2, pp=4, num_microbatches=32, schedule="interleaved", virtual_stages=4, recompute="every-4")
    with pytest.raises(UserError, match=r"num_layers=32 is not divisible by pp\*virtual_stages\*k=64 "
                                        r"\[partial_recompute_even_chunks\]"):
        rules.check(interleaved, MODEL, WORKLOAD, 8)
    even = Layout(dp=2, pp=4, num_microbatches=32, recompute="every-2", layer_partition=(8, 8, 8, 8))
    rules.check(even, MODEL, WORKLOAD, 8)
    with pytest.raises(ValidationError, match=r"recompute=every-2 with pp=4 needs the same layers in every chunk; "
                                              r"layer_partition=\[7, 9, 9, 7\] is uneven"):
        Layout(**{**even.model_dump(), "layer_partition": (7, 9, 9, 7)})
    rules.check(Layout(**{**even.model_dump(), "layer_partition": (7, 9, 9, 7), "recompute": "full"}), MODEL, WORKLOAD, 8)


def test_a_recompute_policy_no_validated_run_used_is_an_extrapolation() -> None:
    used = {r.recompute for r in load_validated_runs().runs}
    assert "every-2" not in used  # every published every-k run has other gaps: none validates the cost model
    plan = search(MODEL, CLUSTER, WORKLOAD, pp=2, recompute="every-2")[0]
    assert "recompute every-2: no validated run used it" in " ".join(plan.prediction.extrapolations)
    validated = next(iter(sorted(used)))
    plan = search(MODEL, CLUSTER, WORKLOAD, recompute=validated)[0]
    assert not any(e.startswith("recompute ") for e in plan.prediction.extrapolations)


def test_the_per_rank_partition_search_keeps_the_even_chunks_on_mixed_gpus() -> None:
    """On a cluster of two GPU kinds the partition is otherwise chosen rank by rank (CP-SAT); under every-k it stays
    even, and the plan says why."""
    cluster = hardware_profiles.cluster("hetero-a100-h100")
    plan = search(MODEL, cluster, Workload(global_batch=512, seq_len=4096), pp=2, recompute="every-2")[0]
    chunks = plan.layout.partition(MODEL.num_layers)
    assert len(set(chunks)) == 1 and chunks[0] % 2 == 0, chunks
    assert any(f"keeps the even chunks {list(chunks)}" in note for note in plan.notes)
