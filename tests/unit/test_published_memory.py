"""The memory model against the peak memory published runs report (benchmarks/published_memory.py).

On the rows the model represents exactly (Qi et al. 2024 Table 4: 1F1B, 1F1B-I and ZB-1p on the Megatron-LM fork,
1.5B-28.3B on 8-32 A100) the predicted peak without the planner's reserve lies 0.4 to 16.7 % above the published
figure: the model is conservative there, and this keeps it so (a change that lets it promise less memory than those
runs used fails). TorchTitan's figures are the allocator's reserved peak, an upper bound of need, and its rows carry
gaps (96 GB H100 at 500 W, fp8), so they are reported, not banded.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import published_memory  # noqa: E402
from published_cases import load_runs, source_key  # noqa: E402


def test_the_memory_model_stays_conservative_on_the_exact_rows_with_a_published_peak() -> None:
    df = published_memory.run()
    exact = df[df.status == "exact"]
    assert len(exact) == 36 and set(exact.source) == {"qi2024_zb"}
    assert exact.fits.all()
    assert exact.error_wo_reserve_pct.between(0.0, 20.0).all(), exact[["case", "error_wo_reserve_pct"]]


def test_every_source_with_memory_figures_says_what_it_measured() -> None:
    sources = {source_key(c) for c in load_runs().cases if published_memory.published_memory_gib(c) is not None}
    assert sources and sources <= set(published_memory.METRICS)


def test_the_benchmark_prints_a_summary_and_refuses_unknown_cases(capsys) -> None:
    assert published_memory.main(["--cases", "qi2024_zb_6.2B_m32_1f1b"]) == 0
    assert "qi2024_zb_6.2B_m32_1f1b" in capsys.readouterr().out
    assert published_memory.main(["--cases", "no-such-case"]) == 2
