"""Turn the published-runs benchmark's predictions into the planner's validated-runs file.

    .venv/bin/python benchmarks/published_runs.py --write-validated

`record` makes one `planner.validation.records.ValidatedRun` from a predicted case (its pinned layout, the
published and the predicted step time); `write` replaces planner/validation/validated_runs.json with them. Only
cases that validate the cost model go in: predicted, exactly representable (no recorded gaps), and not on a
runtime the team decided not to model (the 2021 DeepSpeed ZeRO-3 baselines). `held_out` is true for a case
whose source no committed constant was fitted on (FITTED_SOURCES).
"""

from __future__ import annotations

import math
from typing import Any

from planner.cost.context import CostContext
from planner.layout import RECOMPUTE_NAMES, SCHEDULE_NAMES
from planner.solver.space import nvlink_domain_size
from planner.validation.bands import band_among, band_for, deviation, gpu_family, run_features
from planner.validation.records import ValidatedRun, write_validated_runs

__all__ = ["ValidatedRun", "leave_one_out_coverage", "record", "validates", "write"]

NOT_VALIDATED_FRAMEWORKS = frozenset({"deepspeed-2021-zero3"})
FITTED_SOURCES = frozenset({"korthikanti2022", "torchtitan2025_asynctp"})
"""Sources a committed constant was fitted on: efficiency.SUSTAINED_FRACTION_OF_ISOLATED (Korthikanti et al.
2022 Table 4) and runtime.TP_OVERLAP_HIDDEN_FRACTION (TorchTitan's async-TP benchmark)."""


def record(case_id: str, source: str, framework: str, ctx: CostContext, row: dict[str, Any], published_s: float,
           predicted_s: float) -> ValidatedRun:
    """The validated run of one predicted case (`row`: the pinned layout's search-table row)."""
    gpus = int(row["dp"] * row["tp"] * row["pp"] * row["cp"])
    tokens = ctx.workload.tokens_per_step
    mfu = ctx.model_flops_per_token * tokens / (published_s * gpus * ctx.peak_flops)
    return ValidatedRun(
        id=case_id, source=source, framework=framework, family=gpu_family(ctx.gpu.name),
        runtime=str(ctx.workload.runtime), gpus=gpus, nvlink_domain=nvlink_domain_size(ctx.cluster),
        tp=int(row["tp"]), pp=int(row["pp"]), cp=int(row["cp"]), ep=int(row["ep"]), zero=int(row["zero"]),
        schedule=SCHEDULE_NAMES[int(row["sched"])] if row["pp"] > 1 else "1f1b",
        recompute=RECOMPUTE_NAMES[int(row["rc"])], seq_len=int(ctx.workload.seq_len),
        dtype=ctx.workload.dtype, attention_kernel=ctx.workload.attention_kernel,
        moe=ctx.model.moe is not None, published_mfu=min(mfu, 1.0), error=(predicted_s - published_s) / published_s,
        held_out=source not in FITTED_SOURCES,
    )


def validates(framework: str, predicted_s: float, exact: bool = True) -> bool:
    return framework not in NOT_VALIDATED_FRAMEWORKS and math.isfinite(predicted_s) and exact


def leave_one_out_coverage(records: list[ValidatedRun]) -> tuple[int, int, float]:
    """How honest the bands are on runs they did not see: for each run, the band built from all the others;
    returns (runs inside their band, runs, mean band width)."""
    inside, widths = 0, []
    for i, r in enumerate(records):
        band = band_among(run_features(r), records[:i] + records[i + 1:])
        x = deviation(r.error)
        inside += band.low <= x <= band.high
        widths.append(band.high - band.low)
    return inside, len(records), sum(widths) / max(len(widths), 1)


def write(records: list[ValidatedRun], command: str) -> None:
    write_validated_runs(records, generated_by=command)
    band_for.cache_clear()  # bands of this process now come from the new file
    inside, n, width = leave_one_out_coverage(records)
    print(f"wrote {n} validated runs to planner/validation/validated_runs.json; leave-one-out band coverage "
          f"{inside}/{n} (mean band width {100 * width:.1f} points)")
