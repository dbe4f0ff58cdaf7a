"""MFU is achieved model FLOP/s over the sum of the peak FLOP/s of every rank's own GPU (from the placement).

On a mixed A100 + H100 cluster the old definition divided by W x the A100's peak and reported 99 % MFU at
308.7 TFLOP/s per GPU. The plan, `compare`, `replan`, the exports and the executor's measured MFU all read
the same definition (`planner.plan.peak_flops_of_ranks`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_inputs import invoke

import hardware_profiles as hp
from planner import search
from planner.model import preset
from planner.plan import Plan, peak_flops_of_ranks
from planner.workload import Workload

A100_BF16, H100_BF16 = hp.gpu("a100-80gb").peak_flops["bf16"], hp.gpu("h100-sxm").peak_flops["bf16"]


@pytest.fixture(scope="module")
def mixed_plan() -> Plan:
    """llama3-8b on 2 DGX A100 + 2 DGX H100 hosts, all 32 GPUs used (dp fills them)."""
    cluster = hp.cluster("hetero-a100-h100", nodes=4)
    return search(preset("llama3-8b"), cluster, Workload(global_batch=256, seq_len=4096), top=1, tp=8, pp=1)[0]


def test_mixed_cluster_mfu_counts_each_ranks_gpu(mixed_plan: Plan) -> None:
    pred, W = mixed_plan.prediction, mixed_plan.world_size
    hosts = {p.host for p in mixed_plan.placement}
    assert W == 32 and hosts == {0, 1, 2, 3}
    achieved = pred.model_tflops_per_gpu * 1e12 * W
    peaks = 16 * A100_BF16 + 16 * H100_BF16  # hosts 0-1 are DGX A100, 2-3 DGX H100 (the profile's order)
    assert peak_flops_of_ranks(mixed_plan.inputs.cluster, mixed_plan.placement, "bf16") == pytest.approx(peaks)
    assert pred.mfu == pytest.approx(achieved / peaks, rel=1e-9)
    assert pred.mfu < achieved / (W * A100_BF16) / 1.5  # the old, A100-only denominator overstated it


def test_every_command_shows_the_plans_mfu(tmp_path: Path, mixed_plan: Plan) -> None:
    path = tmp_path / "mixed.json"
    path.write_text(mixed_plan.to_json())
    pct = f"{100 * mixed_plan.prediction.mfu:.1f} %"
    code, out, _ = invoke(["compare", str(path), "--json", "-"])
    assert code == 0 and json.loads(out)[0]["mfu"] == pytest.approx(mixed_plan.prediction.mfu)
    code, out, _ = invoke(["export", str(path), "--to", "megatron"])
    assert code == 0 and f"MFU {pct}" in out, out[:400]
    code, out, _ = invoke(["replan", str(path), "--gpus", "32"])
    assert code == 0 and pct.replace(" ", "") in out.replace(" ", ""), out


def test_one_kind_of_gpu_is_unchanged() -> None:
    plan = search(preset("llama3-8b"), hp.cluster("dgx-h100", nodes=1), Workload(global_batch=64, seq_len=4096), top=1)[0]
    pred = plan.prediction
    assert pred.mfu == pytest.approx(pred.model_tflops_per_gpu * 1e12 / H100_BF16, rel=1e-9)
