"""The GEMM shape list for the GPU harness (benchmarks/training_gemm_shapes.py) and the harness itself.

The list must be exactly what the cost model times for the validation rows, or a measurement of it says nothing
about the model: each case's forward GEMMs add up to the layer's forward FLOPs, every forward GEMM comes with its
two backward passes at the same FLOPs, and the committed file is what the script writes today. The harness
(measure_kernels.py --shapes) runs on CPU as a smoke test, so a GPU session spends its time measuring.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import training_gemm_shapes as tgs  # noqa: E402
from published_cases import build_model, load_runs  # noqa: E402

from planner.model.flops import layer_forward_flops, layer_gemms  # noqa: E402


def _case(case_id: str):
    return next(c for c in load_runs().cases if c.id == case_id)


def test_each_forward_gemm_has_its_two_backward_passes_at_equal_flops() -> None:
    fwd, dgrad, wgrad = tgs.passes("mlp_down", 4096, 3584, 8192)
    assert [p[1] for p in (fwd, dgrad, wgrad)] == list(tgs.PASSES)
    assert fwd[2:] == (4096, 3584, 8192)
    assert dgrad[2:] == (4096, 8192, 3584)  # inner dimension: the layer's output width
    assert wgrad[2:] == (8192, 4096, 3584)  # inner dimension: the tokens
    assert len({p[2] * p[3] * p[4] for p in (fwd, dgrad, wgrad)}) == 1


@pytest.mark.parametrize("case_id, micro_batch", [
    ("megatron_core_2024_h100_7.1B", 4),  # dense GPT, TP 2
    ("liu2025_table3_mixtral-8x22b_128gpu_mcore", 1),  # MoE, TP 2 and EP 8
])
def test_a_case_forward_gemms_add_up_to_the_layer_flops(case_id: str, micro_batch: int) -> None:
    case = _case(case_id)
    spec = build_model(case)
    par = case.parallelism
    tokens = micro_batch * case.model.seq_len // par.cp
    gemms = tgs.case_gemms(case, micro_batch)
    lm_head = [g for g in gemms if g[0] == "lm_head" and g[1] == "fwd"]
    assert len(lm_head) == 1 and lm_head[0][2:5] == (tokens, spec.hidden_size, -(-spec.vocab_size // par.tp))
    layer_kinds = {spec.is_moe_layer(i) for i in range(spec.num_layers)}
    for is_moe in layer_kinds:
        flops = layer_forward_flops(spec, is_moe, case.model.seq_len)
        expected = (flops.total - flops.attn_scores) * tokens
        names = {name for name, *_ in layer_gemms(spec, is_moe, 1)}
        listed = sum(2 * m * k * n * count for name, step, m, k, n, count in gemms
                     if step == "fwd" and name in names)
        # Per TP rank: everything but the replicated router is split by tp; experts run on ep ranks' tokens.
        router = [g for g in gemms if g[0] == "moe_router" and g[1] == "fwd"]
        replicated = sum(2 * m * k * n for _, _, m, k, n, _ in router)
        assert listed - replicated == pytest.approx((expected - replicated) / par.tp, rel=1e-9)


def test_the_committed_shape_file_is_what_the_script_writes_today() -> None:
    rows, skipped = tgs.shapes(load_runs().cases)
    committed = json.loads(tgs.OUT.read_text())
    assert committed["shapes"] == rows, "rerun benchmarks/training_gemm_shapes.py and commit its output"
    assert committed["cases_left_out"] == skipped
    assert [len(r["cases"]) for r in rows] == sorted((len(r["cases"]) for r in rows), reverse=True)


def test_the_harness_times_a_shape_file_on_cpu_and_keeps_partial_results(tmp_path: Path) -> None:
    shapes = tmp_path / "shapes.json"
    rows = [{"pass": step, "m": 64, "k": 32, "n": 48, "count": 1, "flops": 2.0 * 64 * 32 * 48}
            for step in tgs.PASSES]
    shapes.write_text(json.dumps({"shapes": rows}))
    out = tmp_path / "timed.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "measure_kernels.py"), "--shapes", str(shapes),
                           "--json", str(out), "--device", "cpu", "--limit", "2", "--reference", "64"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    timed = result["training_gemm"]
    assert [t["pass"] for t in timed] == ["fwd", "dgrad"]
    assert all(t["time_s"] > 0 and t["reference_time_s"] > 0 for t in timed)
    assert result["reference"] == {"m": 64, "k": 64, "n": 64, "flops": 2.0 * 64**3}
    assert "timed all 2 shapes" in done.stdout


def test_the_fit_report_scales_out_a_gpu_slowing_down_over_the_run() -> None:
    """Shapes timed on the FLOP-only curve itself, but by a GPU 20 % slower from the middle of the run on (its
    reference cube slower by the same factor): the raw residuals show the slowdown, the drift-free ones do not."""
    import fit_kernel_profile

    peak = 989.4e12
    shapes = json.loads(tgs.OUT.read_text())["shapes"][:40]
    rows = []
    for i, s in enumerate(shapes):
        slow = 1.2 if i >= 20 else 1.0
        rows.append(dict(s, time_s=(s["flops"] + 5.85e9) / (peak * 0.724) * slow, reference_time_s=1e-4 * slow))
    data = {"device": "synthetic", "torch": "-", "reference": {"m": 4096, "k": 4096, "n": 4096,
                                                                "flops": 2.0 * 4096**3}, "training_gemm": rows}
    df, _ = fit_kernel_profile.training_residuals(data, "h200")
    assert df["committed_pct"].min() < -15
    assert df["drift_free_pct"].abs().max() < 1e-9
    assert "drift_free_pct" in fit_kernel_profile.training_shape_report(data, "h200")


def test_the_fit_report_shows_a_shape_effect_the_flop_only_curve_misses() -> None:
    """Times made slower at small K than the FLOP-only curve (the effect the measurement is for) show up as a
    more negative residual in the small-K band than in the large one."""
    import fit_kernel_profile

    peak = 989.4e12
    shapes = json.loads(tgs.OUT.read_text())["shapes"]
    rows = [dict(s, time_s=(s["flops"] + 5.85e9) / (peak * 0.72) * (1 + 135 / s["k"])) for s in shapes]
    data = {"device": "synthetic", "torch": "-", "training_gemm": rows}
    df, _ = fit_kernel_profile.training_residuals(data, "h200")
    by_band = df.groupby("k_band", observed=True)["committed_pct"].mean()
    assert by_band["1024-2047"] < by_band["K >= 8192"] < 0
    report = fit_kernel_profile.training_shape_report(data, "h200")
    assert "K >= 8192" in report and "wgrad" in report
