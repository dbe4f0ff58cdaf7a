"""Plan-vs-world and plan-vs-model checks: one-line UserErrors naming the field and the fix (no ranks)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "distributed"))

from dist_plans import make_plan  # noqa: E402

from executor.train import check_plan  # noqa: E402
from executor.world import check_world, hardware_of  # noqa: E402
from planner.errors import UserError  # noqa: E402
from planner.layout import Layout  # noqa: E402
from planner.plan import Plan  # noqa: E402
from planner.plan.run_options import parse_args  # noqa: E402


def _env(monkeypatch, world: int, rank: int = 0) -> None:
    monkeypatch.setenv("WORLD_SIZE", str(world))
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("LOCAL_RANK", str(rank))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(world))


def test_world_size_mismatch(monkeypatch) -> None:
    plan = make_plan("tiny", Layout(dp=2, tp=2, zero=3, dp_shard=2, micro_batch=2, num_microbatches=2))
    _env(monkeypatch, 2)
    with pytest.raises(UserError) as exc:
        check_world(plan, smoke=False, plan_path="p.json")
    msg = str(exc.value)
    assert "needs 4 ranks (dp2 x tp2 x pp1 x cp1) but torchrun started 2" in msg and "fix:" in msg
    assert "\n" not in msg


def test_cpu_plan_runs_on_gloo(monkeypatch) -> None:
    plan = make_plan("tiny", Layout(dp=2, zero=3, dp_shard=2, micro_batch=4))
    _env(monkeypatch, 2, rank=1)
    world = check_world(plan, smoke=False, plan_path="p.json")
    assert (world.backend, world.device.type, world.rank, world.on_planned_device) == ("gloo", "cpu", 1, True)
    assert world.hardware.kind == "cpu" and world.hardware.peak_flops.get("fp32", 0) > 0


def test_gpu_plan_needs_cuda_or_smoke(monkeypatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    layout = Layout(tp=2, micro_batch=4)
    plan = make_plan("llama3-8b", layout, seq_len=8192, dtype="bf16", cluster_name="dgx-h100")
    assert hardware_of(plan.inputs.cluster).kind == "cuda"
    _env(monkeypatch, 2)
    with pytest.raises(UserError, match="h100-sxm GPUs but no CUDA device.*--smoke"):
        check_world(plan, smoke=False, plan_path="p.json")
    world = check_world(plan, smoke=True, plan_path="p.json")
    assert world.backend == "gloo" and world.on_planned_device is False


def test_plan_model_checks() -> None:
    plan = make_plan("tiny", Layout(dp=2, micro_batch=4))
    data = plan.model_dump(mode="json")
    data["inputs"]["workload"]["global_batch"] = 16
    with pytest.raises(UserError, match=r"dp\*micro_batch\*num_microbatches=2\*4\*1=8 != global batch 16 \[batch_matches\]"):
        check_plan(Plan.model_validate(data), smoke=False, where="p.json")


def test_expert_parallel_checks() -> None:
    """ep > 1 runs (the data axes lend it ranks) when its group is a block of the mesh and it divides the
    plan's experts; otherwise one line names the rule and the fix."""
    check_plan(make_plan("tiny-moe", Layout(dp=2, ep=2, zero=3, dp_shard=2, micro_batch=4)), smoke=False, where="p")
    check_plan(make_plan("tiny-moe", Layout(dp=2, cp=2, ep=4, zero=0, micro_batch=4)), smoke=True, where="p")
    with pytest.raises(UserError, match=r"ep=2: num_experts=1 is not divisible by ep \(a dense model.*\[ep_divides_experts\]") as exc:
        check_plan(make_plan("tiny", Layout(dp=2, ep=2, micro_batch=4)), smoke=False, where="p")
    assert "fix:" in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(UserError, match=r"ep=3: num_experts=4 is not divisible by ep \[ep_divides_experts\]"):
        check_plan(make_plan("tiny-moe", Layout(dp=3, ep=3, micro_batch=1, num_microbatches=8)), smoke=True,
                   where="p")
    # cp=2 is the innermost data axis and ep=3 neither divides it nor is a multiple of it.
    six = Layout(dp=3, cp=2, ep=3, micro_batch=1, num_microbatches=8)
    with pytest.raises(UserError, match=r"ep=3 is not a block of the data axes \(cp=2, dp_shard=1, dp_replicate=3"):
        check_plan(make_plan("tiny-moe", six), smoke=True, where="p")


def test_smoke_plan_shrinks_model_and_sequence() -> None:
    plan = make_plan("llama3-8b", Layout(tp=2, cp=2, micro_batch=4), seq_len=8192, dtype="bf16",
                     cluster_name="dgx-h100")
    spec, args, seq = check_plan(plan, smoke=True, where="p.json")
    assert spec.num_layers == 32 and args.hidden_size < 256 and seq == 64


def test_options() -> None:
    opts = parse_args(["plans/x.json", "--steps", "5"])
    assert opts.run_dir == Path("runs/x") and opts.metrics_path == Path("runs/x/metrics.jsonl")
    with pytest.raises(UserError, match="--checkpoint-dir"):
        parse_args(["x.json", "--resume"])
    with pytest.raises(UserError, match="--steps"):
        parse_args(["x.json", "--steps", "0"])


def test_heterogeneous_cluster_device_per_host() -> None:
    import hardware_profiles as hp

    cluster = hp.cluster("hetero-a100-h100").model_dump(mode="json")
    names = [hardware_of(cluster, host).gpu_name for host in range(4)]
    assert names == ["a100-80gb", "a100-80gb", "h100-sxm", "h100-sxm"]
    assert hardware_of(cluster, 3).memory_bytes == hp.gpu("h100-sxm").memory_bytes
