"""--smoke: the plan's layout at toy size with a toy batch, and no comparison with the full-size prediction.

A 64-rank plan for a 1024-sequence batch kept that batch under --smoke (about 150 s per step with 8 ranks on
the 2-core machine); `smoke_plan` keeps every layout knob and shrinks the batch to one sequence per
micro-batch and pp micro-batches. The step lines and metrics carry no deviation against the full-size model.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "distributed"))

from dist_plans import make_plan  # noqa: E402

from executor.metrics import MetricsLog  # noqa: E402
from executor.train import smoke_plan  # noqa: E402
from planner.layout import Layout  # noqa: E402


@pytest.mark.parametrize("layout", [
    Layout(dp=2, tp=2, pp=2, micro_batch=4, num_microbatches=64, schedule="interleaved", virtual_stages=2,
           zero=1, dp_shard=2, sequence_parallel=True, recompute="full"),
    Layout(dp=8, micro_batch=8, num_microbatches=16, zero=3, dp_shard=8),
    Layout(pp=4, micro_batch=2, num_microbatches=32, schedule="zb-h1"),
], ids=["interleaved", "fsdp", "zb-h1"])
def test_smoke_keeps_the_layout_and_shrinks_the_batch(layout: Layout) -> None:
    plan = make_plan("llama3-8b", layout, seq_len=8192, dtype="bf16", cluster_name="dgx-h100")
    small = smoke_plan(plan)
    lay = small.layout
    assert lay.micro_batch == 1 and lay.num_microbatches == max(1, layout.pp if layout.pp > 1 else 1)
    keep = {"layer_partition", "micro_batch", "num_microbatches"}
    assert lay.model_dump(exclude=keep) == layout.model_dump(exclude=keep)
    assert small.inputs.workload.batch == lay.global_batch == layout.dp * max(layout.pp, 1)
    assert lay.global_batch < layout.global_batch
    Layout.model_validate(lay.model_dump())  # still a valid layout (1F1B/interleaved/ZB-H1 need m >= pp)
    assert small.placement == plan.placement and small.world_size == plan.world_size


def test_smoke_metrics_have_no_deviation(tmp_path: Path) -> None:
    lines: list[str] = []
    log = MetricsLog(tmp_path / "m.jsonl", predicted_step_time_s=0.5, predicted_tokens_per_s=2048.0, predicted_mfu=0.4,
                     tokens_per_step=1024, flops_per_token=None, peak_flops_total=None, total_steps=3, smoke=True,
                     printer=lines.append)
    row = log.record(1, 5.5, 2.0)
    log.close()
    assert row["deviation"] is None and row["smoke"] is True
    assert "predicted" not in lines[0] and "2000.0 ms" in lines[0], lines
