"""The cost model's pipeline bubble rate beside Qi et al. 2024's Table 5, for their published layouts.

    .venv/bin/python benchmarks/zb_bubble_rates.py [--model 1.5B]

Qi, Wan, Huang, Lin 2024 ("Zero Bubble Pipeline Parallelism", ICLR) Table 5 lists bubble rates per schedule and
setting. They are computed, not measured: (cost - m (T_F + T_B + T_W)) / cost, with cost the schedule's makespan
simulated from profiled T_F, T_B, T_W (the median stage: sail-sg/zero-bubble-pipeline-parallelism,
zerobubble/runtime.py, "Using uniform f/b/w timing for now") and a per-hop time measured on a chain of blocking
send/recv calls (runtime.py, the communication benchmark). Each cross-stage dependency of the simulated schedule
costs that hop (scheduler/zb.py, `Graph.manual_order.put`).

Per case this prints two rates of the model:
- `as_costed`: (pipeline_s - m max_r t_r) / pipeline_s of the pinned published layout, unequal stages included;
- `uniform`: Qi's definition on the model's middle stage (t, its W pass w) with the model's own hop: its exposed
  stage-boundary seconds per transfer (`pp_comm_s` over 2 (m v + p - 1); the host synchronisation included where
  the runtime makes one, planner.cost.comm.blocking_exchange_calls):
  (p - 1)(u + 2 c) / (m t + (p - 1)(u + 2 c)), u = t for 1F1B and t - 2 w for ZB-H1 (Qi et al. Sec. 3).
Table 5's values are printed where they are verified in benchmarks/data/published_runs.yaml (the 1.5B model).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pandas as pd  # noqa: E402
import validation  # noqa: E402
from published_cases import build_model, load_runs  # noqa: E402
from published_runs import workload  # noqa: E402

from planner.api import evaluate  # noqa: E402
from planner.cost.schedule_times import context_for_plan, plan_stage_times  # noqa: E402

TABLE5 = {("1.5B", "1f1b", 24): 0.2431, ("1.5B", "zb-h1", 24): 0.1585, ("1.5B", "zb-h1", 32): 0.1242,
          ("1.5B", "zb-h1", 64): 0.0674}
"""Qi et al. 2024 Table 5, the values verified in published_runs.yaml's source note and docs/cost_sources.md."""


def rows(model_filter: str | None) -> pd.DataFrame:
    out = []
    for case in load_runs().cases:
        if case.source.key != "qi2024_zb" or (model_filter and f"_{model_filter}_" not in case.id):
            continue
        fixed = validation.published_layout_cost(case)
        plan = evaluate(build_model(case), fixed.cluster, workload(case), fixed.layout, allow_oom=True,
                        framework="any")
        ctx = context_for_plan(plan, framework="any")
        st = plan_stage_times(plan, ctx)
        m, p, sched = st.num_microbatches, len(st.total_s), st.schedule
        mid = p // 2
        t, w = st.total_s[mid], st.weight_grad_s[mid]
        b = plan.prediction.breakdown
        hop = b.pp_comm_s / (2 * (m * st.virtual_stages + p - 1))
        unit = {"1f1b": t, "zb-h1": t - 2 * w}.get(sched)
        uniform = None if unit is None else (p - 1) * (unit + 2 * hop) / (m * t + (p - 1) * (unit + 2 * hop))
        size = case.id.split("_")[2]
        published = case.id.rsplit("_", 1)[1]
        out.append({
            "case": case.id, "schedule": published, "m": m,
            "as_costed": (st.pipeline_s - m * max(st.total_s)) / st.pipeline_s, "uniform": uniform,
            "table5": TABLE5.get((size, sched, m)) if published != "zb-2p" else None, "w_share": w / t,
            "hop_ms": hop * 1e3, "step_err_pct": 100 * (plan.prediction.step_time_s / validation.published_s(case) - 1),
        })
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="only this model size, e.g. 1.5B")
    args = ap.parse_args(argv)
    with pd.option_context("display.width", 200, "display.max_rows", 100):
        print(rows(args.model).round(4).to_string(index=False))


if __name__ == "__main__":
    main()
