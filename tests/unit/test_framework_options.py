"""What a training framework can and cannot do, as the planner models it: allowed-value sets for knobs
(schedules, recompute policies, ZeRO stages a framework implements), data-parallel overlap on or off, and the
sustained share of the isolated GEMM plateau per GPU profile."""

from __future__ import annotations

import dataclasses

import pytest

import hardware_profiles
import planner
import planner.cost.runtime as runtime
from planner.api import make_context
from planner.cost.efficiency import SUSTAINED_FRACTION_OF_ISOLATED
from planner.layout import Workload
from planner.model import load_model


@pytest.fixture(scope="module")
def setting():
    return load_model("llama3-8b"), hardware_profiles.cluster("dgx-h100", nodes=4), Workload(global_batch=64, seq_len=4096)


def test_a_set_of_schedules_searches_exactly_those(setting) -> None:
    model, cluster, workload = setting
    allowed = ("1f1b", "interleaved")
    best = planner.search(model, cluster, workload, top=20, pp=4, schedule=allowed)
    assert {p.layout.schedule for p in best} <= set(allowed)
    # The best of the set is the better of the two single-schedule searches.
    each = [planner.search(model, cluster, workload, top=1, pp=4, schedule=s)[0].prediction.step_time_s for s in allowed]
    assert best[0].prediction.step_time_s == pytest.approx(min(each), rel=1e-12)
    # And the unrestricted search (which may pick ZB-H1) is never slower.
    free = planner.search(model, cluster, workload, top=1, pp=4)[0].prediction.step_time_s
    assert free <= best[0].prediction.step_time_s + 1e-12


def test_a_set_of_recompute_policies_and_zero_stages(setting) -> None:
    model, cluster, workload = setting
    plans = planner.search(model, cluster, workload, top=30, recompute=["none", "full"], zero=(0, 1))
    assert {p.layout.recompute for p in plans} <= {"none", "full"}
    assert {p.layout.zero for p in plans} <= {0, 1}


def test_dp_reduction_without_overlap_is_fully_exposed(setting) -> None:
    model, cluster, _ = setting
    layout = dict(dp=32, tp=1, pp=1, micro_batch=1, zero=1, recompute="full")
    overlapped = planner.search(model, cluster, Workload(global_batch=64, seq_len=4096), top=1, **layout)[0]
    serial = planner.search(model, cluster, Workload(global_batch=64, seq_len=4096, overlap_dp_comm=False), top=1,
                            **layout)[0]
    assert serial.prediction.breakdown.compute_s == pytest.approx(overlapped.prediction.breakdown.compute_s)
    # Reduce-scattering 16 GB of gradients and gathering the weights over 32 GPUs takes tens of ms; with overlap
    # most of it hides behind the last backward and the next forward.
    assert serial.prediction.breakdown.dp_comm_s > 0.05
    assert serial.prediction.breakdown.dp_comm_s > 3 * overlapped.prediction.breakdown.dp_comm_s
    assert serial.prediction.step_time_s > overlapped.prediction.step_time_s


@pytest.mark.parametrize(("gpu_cluster", "sustained"), [
    ("dgx-h100", 0.848),  # measured on H200 (same die), profile field
    ("dgx-a100", SUSTAINED_FRACTION_OF_ISOLATED),  # no profile value: the Korthikanti Table 4 fit
    ("local-cpu", 1.0),  # CPU plateau is measured in place
])
def test_gemm_plateau_is_the_profile_plateau_sustained(gpu_cluster: str, sustained: float) -> None:
    ctx = make_context(load_model("tiny"), hardware_profiles.cluster(gpu_cluster, nodes=1),
                       Workload(global_batch=8, seq_len=64))
    assert ctx.sustained_fraction == pytest.approx(sustained)
    assert ctx.max_fraction == pytest.approx(ctx.gpu.matmul_efficiency.max_fraction * sustained)


def _evaluate(setting, workload: Workload | None = None, **layout):
    model, cluster, default = setting
    plan = planner.search(model, cluster, workload or default, top=1, **layout)[0]
    return plan.prediction, plan


def test_zero2_and_zero3_under_pipeline_hold_zero1_weights_and_gradients(setting) -> None:
    shape = dict(dp=4, tp=2, pp=4, micro_batch=1, schedule="1f1b", recompute="none",
                 mesh_axes=("pp", "dp_replicate", "dp_shard", "cp", "tp"))
    (z1, _), (z2, plan2), (z3, plan3) = (_evaluate(setting, zero=z, **shape) for z in (1, 2, 3))
    for other in (z2, z3):
        for a, b in zip(z1.memory_per_stage, other.memory_per_stage):
            assert (a.weights_bytes, a.gradients_bytes, a.optimizer_bytes) == (b.weights_bytes, b.gradients_bytes,
                                                                               b.optimizer_bytes)
            assert b.buffers_bytes == a.buffers_bytes  # the pipeline's receive buffers only, no gathered layers
    # ZeRO-2 reduces once per step under PP, exactly like ZeRO-1; ZeRO-3 also gathers weights every backward.
    assert z2.step_time_s == pytest.approx(z1.step_time_s, rel=1e-12)
    assert z3.breakdown.dp_comm_s > z1.breakdown.dp_comm_s
    assert any("holds weights and gradients like ZeRO-1" in n for n in plan2.notes + plan3.notes)
    # Without PP, ZeRO-2 shards the gradients and ZeRO-3 the weights as well.
    flat = dict(dp=16, dp_shard=16, tp=2, pp=1, micro_batch=1, recompute="none")
    (f1, _), (f3, _) = (_evaluate(setting, zero=z, **flat) for z in (1, 3))
    assert f3.memory_per_stage[0].weights_bytes < f1.memory_per_stage[0].weights_bytes / 8


def test_search_leaves_dominated_zero_stages_out_under_pipeline(setting) -> None:
    model, cluster, workload = setting
    plans = planner.search(model, cluster, workload, top=40, pp=4)
    # ZeRO-2/3 over all of DP is ZeRO-1 with more traffic under PP; only ZeRO-3's HSDP groups, which ZeRO-1 does
    # not offer, may remain
    assert all(p.layout.zero <= 1 or (p.layout.zero == 3 and p.layout.dp_shard < p.layout.dp) for p in plans)


def test_pytorch_pipeline_reduces_gradients_after_the_last_backward(setting, monkeypatch) -> None:
    """PyTorch's pipeline schedules reduce once after the last backward (exposed); Megatron-Core overlaps it.

    The two runtimes also differ in their element-wise and optimizer costs, so the semantics are compared on one
    runtime with only that trait switched."""
    megatron = runtime.RUNTIME_COSTS["megatron"]
    after_last = dataclasses.replace(megatron, reduce_after_last_backward_under_pp=True)
    work = Workload(global_batch=64, seq_len=4096, runtime="megatron")
    shape = dict(dp=4, tp=2, pp=4, micro_batch=1, schedule="1f1b", recompute="none", zero=1)
    flat = dict(dp=16, tp=2, pp=1, micro_batch=1, recompute="none", zero=1)
    overlapped, _ = _evaluate(setting, work, **shape)
    b, _ = _evaluate(setting, work, **flat)
    monkeypatch.setitem(runtime.RUNTIME_COSTS, "megatron", after_last)
    exposed, _ = _evaluate(setting, work, **shape)
    a, _ = _evaluate(setting, work, **flat)
    assert exposed.breakdown.dp_comm_s > 2 * overlapped.breakdown.dp_comm_s
    assert exposed.breakdown.compute_s == pytest.approx(overlapped.breakdown.compute_s)
    # Without PP both overlap it the same way.
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-12)
    assert runtime.RUNTIME_COSTS["pytorch"].reduce_after_last_backward_under_pp and not megatron.reduce_after_last_backward_under_pp
