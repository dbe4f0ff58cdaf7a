"""Error bands, extrapolations and the committed validated-runs file.

The file must be valid, name cases that exist in benchmarks/data/published_runs.yaml, and still agree with the
cost model (a few recorded errors are recomputed: if the model changed, regenerate it with
`benchmarks/published_runs.py --write-validated`). Bands and extrapolations are checked on hand-made runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import hardware_profiles
from planner.api import make_context
from planner.layout import Layout, Workload
from planner.model import preset
from planner.validation.bands import Features, band_among, deviation, features
from planner.validation.extrapolations import extrapolations
from planner.validation.records import ValidatedRun, load_validated_runs

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def run(**kw) -> ValidatedRun:
    base = dict(id="r", source="s", framework="f", family="h100", runtime="megatron", gpus=512, nvlink_domain=8,
                tp=8, pp=1, cp=1, ep=1, zero=1, schedule="1f1b", recompute="none", seq_len=4096, dtype="bf16", attention_kernel="auto", moe=False, published_mfu=0.45,
                error=-0.05, held_out=True)
    return ValidatedRun(**{**base, **kw})


def test_committed_file_is_valid_and_names_published_cases() -> None:
    sys.path.insert(0, str(BENCH))
    import published_runs

    runs = load_validated_runs().runs
    assert len(runs) >= 20
    ids = {c["id"] for c in published_runs.load_cases()} if hasattr(published_runs, "load_cases") else None
    if ids is not None:
        assert {r.id for r in runs} <= ids
    assert not any(r.framework == "deepspeed-2021-zero3" for r in runs)  # not a runtime meshplan models


def test_committed_file_agrees_with_the_cost_model() -> None:
    """Recompute the error of four recorded runs (one per framework family, and an fp8 one): a stale file fails
    here."""
    sys.path.insert(0, str(BENCH))
    import published_runs

    by_id = {r.id: r for r in load_validated_runs().runs}
    picks = [i for i in ("narayanan2021_table1_18.4B", "megatron_core_2024_h100_177B", "megatron_gpt3_175B_1024xA100",
                         "dgxc2024_h100_fp8_llama3.1-8b_8gpu") if i in by_id]
    assert picks, "none of the spot-checked cases is in the validated file"
    df = published_runs.run(picks)
    for row in df.itertuples():
        assert row.error_pct / 100 == pytest.approx(by_id[row.case].error, abs=1e-6), (
            f"{row.case}: the cost model now errs {row.error_pct:.3f} %, the file says {100 * by_id[row.case].error:.3f} %;"
            " regenerate it with benchmarks/published_runs.py --write-validated")


def test_deviation_is_real_over_predicted_minus_one() -> None:
    # predicted 10 % too fast (error -0.10): the real step took 1/0.9 - 1 = 11.1 % longer than predicted
    assert deviation(-0.10) == pytest.approx(1 / 0.9 - 1)
    assert deviation(0.25) == pytest.approx(1 / 1.25 - 1)


def test_band_backs_off_from_the_most_specific_features() -> None:
    runs = [run(id="a", error=-0.10, source="s1"), run(id="b", error=-0.05, source="s2"),
            run(id="c", error=0.02, gpus=48, source="s1"), run(id="d", error=0.01, gpus=32, source="s2"),
            run(id="e", error=-0.03, gpus=2048, source="s1"), run(id="f", error=0.10, tp=1, source="s2"),
            run(id="g", error=-0.2, family="a100", source="s3")]
    f = features("h100", "megatron", 8, 1, 1, 1, 1, "1f1b", 512, 8)
    band = band_among(f, runs)
    # only a and b share the scale too; all features but scale match a..e: five runs
    assert band.runs == 5 and "TP within NVLink" in band.basis and "GPUs" not in band.basis
    assert band.low == pytest.approx(deviation(0.02)) and band.high == pytest.approx(deviation(-0.10))
    # a runtime nobody validated falls back to the family's runs that share CP and EP (6 dense H100 runs)
    other = band_among(features("h100", "pytorch", 8, 1, 1, 1, 1, "1f1b", 512, 8), runs)
    assert other.runs == 6 and other.basis.endswith("with H100, no CP, no EP")
    # an MoE plan does not take its band from dense runs while the family has enough MoE ones
    moe = [run(id=f"m{i}", ep=8, moe=True, error=0.5, source=f"s{i % 2}") for i in range(5)]
    assert band_among(features("h100", "pytorch", 8, 1, 1, 8, 1, "1f1b", 512, 8), runs + moe).high == pytest.approx(
        deviation(0.5))
    nothing = band_among(Features("b200", "pytorch", 1, "none", False, False, False, 0), runs)
    assert nothing.runs == 7 and nothing.basis == "all 7 validated runs"


def test_runs_of_one_source_do_not_make_a_band_alone() -> None:
    """Five CP runs of one recipe (one source) agree closely; the band of a CP plan on another runtime falls back
    past them to the family's runs of two or more sources instead of inheriting their narrow range."""
    recipe = [run(id=f"r{i}", cp=2, gpus=8 * 2**i, error=0.05 + 0.003 * i, source="recipe") for i in range(5)]
    others = [run(id=f"o{i}", error=e, source=f"paper{i % 3}") for i, e in enumerate((-0.12, 0.04, -0.02, 0.09, -0.06))]
    f = features("h100", "pytorch", 4, 4, 2, 1, 1, "zb-h1", 64, 8)
    band = band_among(f, recipe + others)
    assert band.runs == 10 and band.basis.endswith("with H100, no EP") and "from 4 sources" in band.basis
    assert band.high == pytest.approx(deviation(-0.12)) and band.low == pytest.approx(deviation(0.09))
    # with a second source among the CP runs, they make the band again
    second = run(id="x", cp=2, gpus=64, error=0.2, source="other")
    assert band_among(f, recipe + others + [second]).basis.endswith("with H100, CP on, no EP")


def _ctx(cluster: str, gpus: int, seq: int = 8192):
    return make_context(preset("llama3-70b"), hardware_profiles.cluster(cluster, gpus=gpus),
                        Workload(global_batch_tokens=512 * seq, seq_len=seq, runtime="megatron"))


def test_extrapolations_name_each_knob_outside_the_validated_runs() -> None:
    runs = [run(id="big", gpus=1024, pp=8, schedule="interleaved", published_mfu=0.47),
            run(id="cp2", gpus=64, cp=2, seq_len=16384)]
    ctx = _ctx("dgx-h100", 16384)
    lay = Layout(dp=8, tp=8, pp=16, cp=16, num_microbatches=16, schedule="zb-h1")
    got = extrapolations(ctx, lay, mfu=0.52, runs=runs)
    text = " | ".join(got)
    assert "16,384 GPUs: beyond the largest validated H100 run (1,024 GPUs, big)" in text
    assert "pp=16: deeper than any validated pipeline (pp=8)" in text
    assert "schedule zb-h1: no validated run used it" in text
    assert "cp=16 at 8,192 tokens per sequence (512 per CP rank): no validated run with cp >= 16" in text
    assert "predicted MFU 52.0 % is above the best published H100 run (47.0 %, big)" in text
    # inside the envelope: nothing to say
    small = Layout(dp=8, tp=8, pp=8, num_microbatches=8, schedule="interleaved", virtual_stages=2)
    assert extrapolations(_ctx("dgx-h100", 512), small, mfu=0.40, runs=runs) == ()
    # another GPU family, MoE without validated EP, ZeRO-3 with none validated
    got = extrapolations(_ctx("dgx-a100", 64), Layout(dp=8, tp=8, zero=3, dp_shard=8, num_microbatches=64, ep=8),
                         mfu=0.3, runs=runs)
    assert any(g.startswith("A100 GPUs: no validated run on this GPU family") for g in got)
    assert any(g.startswith("ep=8: no validated MoE run") for g in got)
    assert any(g.startswith("ZeRO-3/FSDP: no validated ZeRO-3 run on A100") for g in got)
    # CP in an MoE model: the dense CP run does not vouch for it, a validated MoE run with CP does
    moe = make_context(preset("mixtral-8x7b"), hardware_profiles.cluster("dgx-h100", gpus=64),
                       Workload(global_batch_tokens=512 * 16384, seq_len=16384, runtime="megatron"), framework="any")
    moe_cp = Layout(dp=8, cp=2, ep=8, num_microbatches=64)
    moe_runs = [*runs, run(id="moe", moe=True, ep=8, gpus=64)]
    assert any(g.startswith("cp=2 in an MoE model: no validated MoE run used context parallelism")
               for g in extrapolations(moe, moe_cp, mfu=0.3, runs=moe_runs))
    covered = [*moe_runs, run(id="moe_cp", moe=True, ep=8, cp=2, gpus=64, seq_len=16384)]
    assert not any("in an MoE model" in g for g in extrapolations(moe, moe_cp, mfu=0.3, runs=covered))
    assert not any("in an MoE model" in g for g in extrapolations(_ctx("dgx-h100", 64), Layout(
        dp=4, tp=8, cp=2, num_microbatches=128), mfu=0.3, runs=runs))  # a dense model: nothing MoE to say
    # a precision no validated run trained in (fp8 here; the bf16 runs vouch for bf16 only)
    fp8 = make_context(preset("llama3-70b"), hardware_profiles.cluster("dgx-h100", gpus=512),
                       Workload(global_batch_tokens=512 * 8192, seq_len=8192, runtime="megatron", dtype="fp8"),
                       framework="any")
    assert extrapolations(fp8, small, mfu=0.40, runs=runs) == ("dtype fp8: no validated run trained in fp8",)
    assert extrapolations(fp8, small, mfu=0.40, runs=[*runs, run(id="f8", dtype="fp8")]) == ()
    # fp8 validated on Megatron (Transformer Engine) does not vouch for torchao's recipe on the pytorch stack
    fp8_torch = make_context(preset("llama3-70b"), hardware_profiles.cluster("dgx-h100", gpus=512),
                             Workload(global_batch_tokens=512 * 8192, seq_len=8192, runtime="pytorch", dtype="fp8"),
                             framework="any")
    mixed = [*runs, run(id="f8", dtype="fp8"),
             *(run(id=f"p{i}", runtime="pytorch", pp=8, schedule="interleaved") for i in range(3))]
    got = extrapolations(fp8_torch, small, mfu=0.40, runs=mixed)
    assert got == ("dtype fp8 on runtime pytorch: no validated run of this training stack trained in fp8",)
    # FlashAttention-2 on Hopper, which no validated run used; on Ampere it is the profile's own kernel: nothing to say
    def with_kernel(cluster: str, kernel: str = "flash2") -> object:
        return make_context(preset("llama3-70b"), hardware_profiles.cluster(cluster, gpus=512),
                            Workload(global_batch_tokens=512 * 8192, seq_len=8192, runtime="megatron",
                                     attention_kernel=kernel), framework="any")
    got = extrapolations(with_kernel("dgx-h100"), small, mfu=0.40, runs=runs)
    assert len(got) == 1 and got[0].startswith("attention kernel flash2 on H100: no validated run used it")
    assert extrapolations(with_kernel("dgx-h100"), small, mfu=0.40, runs=[*runs, run(id="fa2", attention_kernel="flash2")]) == ()
    a100_runs = [run(id=f"a{i}", family="a100") for i in range(3)]
    assert not any("attention kernel" in g for g in extrapolations(with_kernel("dgx-a100"), small, mfu=0.30, runs=a100_runs))
    # FlashAttention-1 is timed from FlashAttention-2 on every GPU: an extrapolation until a run of the family used it
    flash1 = with_kernel("dgx-a100", "flash1")
    got = extrapolations(flash1, small, mfu=0.30, runs=[*runs, *a100_runs])
    assert len(got) == 1 and got[0].startswith("attention kernel flash1 on A100: no validated run used it")
    fa1_run = run(id="fa1", family="a100", attention_kernel="flash1")
    assert extrapolations(flash1, small, mfu=0.30, runs=[*runs, *a100_runs, fa1_run]) == ()


def test_plans_carry_band_and_extrapolations_through_json() -> None:
    from planner.api import search
    from planner.plan import Plan

    plan = search(preset("llama3-8b"), hardware_profiles.cluster("dgx-h100", gpus=8),
                  Workload(global_batch=16, seq_len=8192, runtime="megatron"))[0]
    assert plan.prediction.error_band is not None and plan.prediction.error_band.runs > 0
    again = Plan.model_validate_json(plan.model_dump_json())
    assert again == plan and again.prediction.extrapolations == plan.prediction.extrapolations
    hi = plan.prediction.error_band.high
    assert plan.prediction.pessimistic_step_time_s == pytest.approx(plan.prediction.step_time_s * (1 + hi))


def test_a_runtime_validated_without_model_parallelism_does_not_cover_tp_pp_or_cp() -> None:
    """Validated PyTorch runs that are all FSDP alone (tp = pp = cp = 1) make 'runtime pytorch' validated, but a
    TP4 PP4 pytorch plan still lies outside them: each dimension no run of that runtime used is named; a Megatron
    run with TP and PP covers nothing of the pytorch stack's."""
    fsdp_only = [run(id=f"fsdp{i}", runtime="pytorch", tp=1, zero=3, gpus=64) for i in range(5)]
    megatron = [run(id="mega", tp=8, pp=8, cp=2, schedule="interleaved")]
    ctx = make_context(preset("llama3-70b"), hardware_profiles.cluster("dgx-h100", gpus=64),
                       Workload(global_batch_tokens=512 * 8192, seq_len=8192, runtime="pytorch"))
    lay = Layout(dp=4, tp=4, pp=4, num_microbatches=16, schedule="interleaved", virtual_stages=2)
    got = extrapolations(ctx, lay, mfu=0.40, runs=fsdp_only + megatron)
    assert not any(g.startswith("runtime pytorch: no validated run") for g in got)
    assert "runtime pytorch with tp > 1: no validated run on this training stack used tp" in got
    assert "runtime pytorch with pp > 1: no validated run on this training stack used pp" in got
    assert not any("with cp > 1" in g for g in got)  # the plan uses no CP
    # CP that no validated run of any stack used: its own line says so, not a second runtime line
    got = extrapolations(ctx, Layout(dp=4, tp=4, cp=4, num_microbatches=16), mfu=0.40, runs=fsdp_only)
    assert any(g.startswith("cp=4 at 8,192 tokens") for g in got) and not any("with cp > 1" in g for g in got)
    # FSDP alone, as validated: nothing said about the runtime
    got = extrapolations(ctx, Layout(dp=64, zero=3, dp_shard=64, num_microbatches=8), mfu=0.40, runs=fsdp_only + megatron)
    assert not any(g.startswith("runtime pytorch") for g in got)
    # with no pytorch run at all, the one runtime line, not one per dimension
    got = extrapolations(ctx, lay, mfu=0.40, runs=megatron)
    assert [g for g in got if g.startswith("runtime pytorch")] == ["runtime pytorch: no validated run on this training stack"]


def test_a_validated_compiled_cp_run_vouches_for_neither_eager_pytorch_nor_tp_or_pp() -> None:
    """A validated pytorch-compile run with CP 2 x FSDP (the shape of NeMo AutoModel's Llama 3 70B row, were its gaps
    closed) validates that stack's CP, not the eager `pytorch` runtime of `meshplan run` (the default), and not TP or
    PP on its own stack: those lines stay, the CP line goes."""
    compiled_cp = [run(id="cp2", runtime="pytorch-compile", tp=1, cp=2, zero=3, gpus=64, seq_len=8192)]
    megatron = [run(id="mega", tp=8, pp=8, cp=2, schedule="interleaved")]
    cluster = hardware_profiles.cluster("dgx-h100", gpus=64)
    lay = Layout(dp=2, tp=4, pp=4, cp=2, num_microbatches=16, schedule="interleaved", virtual_stages=2)
    eager = make_context(preset("llama3-70b"), cluster, Workload(global_batch_tokens=512 * 8192, seq_len=8192, runtime="pytorch"))
    got = extrapolations(eager, lay, mfu=0.40, runs=compiled_cp + megatron)
    assert "runtime pytorch: no validated run on this training stack" in got
    compiled = make_context(preset("llama3-70b"), cluster,
                            Workload(global_batch_tokens=512 * 8192, seq_len=8192, runtime="pytorch-compile"))
    got = extrapolations(compiled, lay, mfu=0.40, runs=compiled_cp + megatron)
    assert not any(g.startswith("runtime pytorch-compile: no validated run") for g in got)
    assert "runtime pytorch-compile with tp > 1: no validated run on this training stack used tp" in got
    assert "runtime pytorch-compile with pp > 1: no validated run on this training stack used pp" in got
    assert not any("with cp > 1" in g for g in got)
