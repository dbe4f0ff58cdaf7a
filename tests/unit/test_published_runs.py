"""The published-runs data, its step-time derivations, the benchmark's columns and the cross-validation harness.

The issue's targets (mean |error| <= 5 %, max <= 10 % on the visible set) are not all met: the full benchmark
(benchmarks/published_runs.py) prints where the model stands. This test keeps a few cases in the band the model
reaches now, on the side it errs, so an accidental change to the cost model fails CI; checks that every case in the
data file loads and builds a model, a cluster and a workload; that each source's FLOP formula reproduces the figures
the source prints next to its times; and that the cross-validation harness splits by source and fits what it should.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from pydantic import ValidationError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import published_runs  # noqa: E402
import validation  # noqa: E402
from published_cases import KnownSuboptimal, build_cluster, build_model, load_runs, source_key  # noqa: E402
from published_partitions import PARTITION_RULES, deepspeed_type_partition, framework_builds, rule_partition  # noqa: E402
from published_runs import FRAMEWORKS  # noqa: E402
from published_step_times import korthikanti_eq7, megatron_2025, narayanan_eq3, palm, step_time_s  # noqa: E402

from planner.cost.memory import RESERVE_FIXED_BYTES, RESERVE_FRACTION  # noqa: E402
from planner.layout import Workload  # noqa: E402
from planner.layout.names import RECOMPUTE_EVERY  # noqa: E402
from planner.layout.schedules import ScheduleCode  # noqa: E402

CASES = {
    # case id: ((lowest, highest) allowed error in %, worst allowed rank of the published layout)
    # The A100 rows moved with the sustained fraction refitted under Megatron's async backward TP collectives
    # (0.880 -> 0.811): the 2021 rows from -2..-6 % to +0.5..+1.8 %, Qi 6.2B from -10.7 to -4.0 %, Qi 1.5B from
    # +0.5 to +7.0 % (its smallest model, now over-predicted).
    "narayanan2021_table1_18.4B": ((-10.0, 5.0), None),
    # Megatron-LM 2021 kept each sent stage output until its backward (megatron/schedules.py output_tensors): the
    # 1T layout's interleaved schedule (v >= 2 on 64 stages of 2 layers) then counts 77.1 GiB on stage 0, which fits
    # the 80 GiB A100 but not under the planning reserve (1 GiB + 5 %): "OOM", predicted at its least-memory setting.
    "narayanan2021_table1_1008.0B": ((-10.0, 5.0), "within reserve"),
    "megatron_core_2024_h100_177B": ((-10.0, 0.0), None),  # TP and P2P overlap on, as the source ran it
    "narayanan2021_table2_PTD-P_529.6B_1120gpu": ((-10.0, 5.0), 5),
    "korthikanti2022_table5_530B_selective_sp": ((-5.0, 5.0), 5),
    # Qi rows as the fork's script at the paper's commit ran them (unfused attention, a 32k tied vocabulary):
    # 6.2B from -4.0 to +0.2 %, 1.5B from +7.0 to +1.1 % (its head stage no longer priced at GPT-2's vocabulary).
    "qi2024_zb_6.2B_m32_1f1b": ((-5.0, 5.0), None),
    "qi2024_zb_1.5B_m24_1f1b": ((-5.0, 5.0), None),  # the source's split, first and last stage one layer fewer
    # BigScience's tr11 design run that BLOOM's layout came from (fp16, DeepSpeed's 'type:transformer' split).
    "bigscience2022_prequel_181B_384gpu_tp4_pp12_mbs2_0225": ((-5.0, 0.0), None),
}


def _case(case_id: str):
    return next(c for c in load_runs().cases if c.id == case_id)


def test_published_subset_stays_in_its_error_band() -> None:
    df = published_runs.run(list(CASES))
    assert sorted(df["case"]) == sorted(CASES)
    for row in df.itertuples():
        (low, high), worst_rank = CASES[row.case]
        assert np.isfinite(row.predicted_s) and row.predicted_s > 0, row.case
        assert low <= row.error_pct <= high, f"{row.case}: {row.error_pct:.1f} % outside [{low}, {high}]"
        if worst_rank == "within reserve":  # it ran: counted over capacity by less than the reserve
            cluster = build_cluster(_case(row.case))
            capacity = cluster.gpus[cluster.host_gpu_names[0]].memory_bytes
            reserve = RESERVE_FIXED_BYTES + RESERVE_FRACTION * capacity
            peak = int(row.rank.removeprefix("OOM ").removesuffix("GiB")) * 2**30
            assert row.rank.startswith("OOM") and capacity < peak + 2**30 and peak <= capacity + reserve, row
            continue  # no pick and no gain for a layout the memory model refuses
        if worst_rank is not None:
            assert row.rank.isdigit() and int(row.rank) <= worst_rank, f"{row.case}: published layout ranks {row.rank}"
        # The spread over unstated settings brackets the best-setting prediction; the pick is never slower.
        assert row.spread_lo_s <= row.predicted_s * (1 + 1e-9) <= row.spread_hi_s * (1 + 1e-9), row.case
        assert row.gain_pct >= -1e-6 and row.pick, row.case


def test_every_case_loads_and_builds_its_inputs() -> None:
    runs = load_runs()
    assert len(runs.cases) >= 150 and len({c.id for c in runs.cases}) == len(runs.cases)
    new_sources = {source_key(c) for c in runs.cases if c.source.key}
    assert len(new_sources) >= 4 and new_sources <= set(runs.sources), new_sources - set(runs.sources)
    assert sum(1 for c in runs.cases if c.source.key) >= 20
    for case in runs.cases:
        model, cluster = build_model(case), build_cluster(case)
        work = published_runs.workload(case)
        assert cluster.num_gpus == case.hardware.num_gpus, case.id
        assert work.seq_len <= model.max_seq_len and work.batch == case.batch.global_batch_seqs, case.id
        seconds, _ = step_time_s(case, model)
        assert 0.05 < seconds < 1000, f"{case.id}: published step time {seconds} s"
        par = case.parallelism
        assert par.tp * par.pp * par.dp * par.cp <= case.hardware.num_gpus, case.id
        if case.source.key:  # every new case says where its numbers are and how its step time follows
            assert case.source.quote and case.step_time is not None and case.framework in published_runs.FRAMEWORKS


def test_qi_models_have_the_sizes_table3_states() -> None:
    """Qi et al. do not state the vocabulary; their Table 3 sizes (1.5 / 6.2 / 14.6 / 28.3 B) bound it with tied
    embeddings, as the fork's script ties them. GPT-2's padded 50304 would give 6.3 / 14.7 / 28.4 B."""
    sizes = {}
    for case in load_runs().cases:
        if source_key(case) == "qi2024_zb":
            sizes.setdefault(case.id.split("_")[2], build_model(case).num_params())
    assert sorted(sizes) == ["1.5B", "14.6B", "28.3B", "6.2B"]
    for stated, params in sizes.items():
        assert round(params / 1e9, 1) == float(stated.rstrip("B")), (stated, params)


def test_korthikanti_eq7_reproduces_table5_mfu_from_its_iteration_times() -> None:
    """Korthikanti et al. 2022 Table 5: MFU of 'present work' = Eq. 7 model FLOPs / (time x 312 TFLOP/s x GPUs)."""
    for size, mfu in (("22B", 41.5), ("175B", 51.4), ("530B", 56.0), ("1T", 56.3)):
        case = _case(f"korthikanti2022_table5_{size}_selective_sp")
        flops = korthikanti_eq7(case.batch.global_batch_seqs, case.model.seq_len, build_model(case))
        seconds, _ = step_time_s(case, build_model(case))
        assert flops / (seconds * 312e12 * case.hardware.num_gpus) * 100 == pytest.approx(mfu, abs=0.4), size


def test_mtnlg_tflops_are_narayanan_eq3_at_the_stated_iteration_times() -> None:
    """Smith et al. 2022 Sec. 2.4 prints the iteration time and TFLOP/s per GPU at 280 / 350 / 420 DGX A100 servers
    (read through transcriptions, so the rows are unverified): Eq. 3, which counts the recomputed forward, links the
    two within the rounding of the TFLOP/s to integers; Eq. 7 (no recomputation) would not."""
    rows = _cases_of("smith2022_mtnlg")
    assert len(rows) == 3 and all(c.verified is False and c.gaps for c in rows)
    for case in rows:
        model = build_model(case)
        seconds, _ = step_time_s(case, model)
        tflops = case.throughput["tflops_per_gpu"]
        eq3 = narayanan_eq3(case.batch.global_batch_seqs, case.model.seq_len, model) / (seconds * case.hardware.num_gpus)
        assert eq3 / 1e12 == pytest.approx(tflops, abs=0.6), case.id
        eq7 = korthikanti_eq7(case.batch.global_batch_seqs, case.model.seq_len, model) / (seconds * case.hardware.num_gpus)
        assert eq7 / 1e12 < 0.8 * tflops, case.id
        par = case.parallelism
        assert par.tp * par.pp * par.dp == case.hardware.num_gpus and case.batch.micro_batch is None


def test_megascale_table2_mfu_matches_its_iteration_times() -> None:
    """MegaScale Table 2 prints iteration time and MFU; Eq. 7 (= PaLM here) links them within rounding."""
    for n, mfu in ((256, 53.0), (1024, 44.7), (12288, 41.2)):
        case = _case(f"megascale2024_table2_175B_megatron_{n}gpu")
        model = build_model(case)
        seconds, _ = step_time_s(case, model)
        for formula in (korthikanti_eq7, palm):
            flops = formula(case.batch.global_batch_seqs, case.model.seq_len, model)
            assert flops / (seconds * 312e12 * n) * 100 == pytest.approx(mfu, abs=0.4), (n, formula.__name__)


def test_torchtitan_tokens_per_second_gives_the_stated_mfu() -> None:
    """The torchtitan benchmark: 'the 1D Llama 3.1 8B model training on 8 or 128 H100 GPUs without Float8 achieves
    33% to 39% MFU' (peak of the H100 SXM, 989 TFLOP/s, its footnote 2)."""
    for case_id in ("torchtitan2024_table1_8B_8gpu_fsdp", "torchtitan2024_table3_8B_128gpu_fsdp_compile"):
        case = _case(case_id)
        model = build_model(case)
        seconds, _ = step_time_s(case, model)
        flops = palm(case.batch.global_batch_seqs, case.model.seq_len, model)
        assert 32.5 <= flops / (seconds * 989.4e12 * case.hardware.num_gpus) * 100 <= 39.5, case_id


def _mpt_cases():
    return [c for c in load_runs().cases if c.framework == "composer-fsdp-2023"]


def test_llmfoundry_rows_reproduce_the_readme_mfu_and_num_params() -> None:
    """llm-foundry's README: mfu = (6 N + 12 n_layers d_model s) tokens/s / (GPUs x GPU_AVAILABLE_FLOPS), with N
    the table's NumParams; the model spec (learned positions, biases, tied head, vocab 50368) counts exactly N, and
    the step time (global batch tokens / tokens per second) gives back the printed MFU."""
    cases = _mpt_cases()
    assert len(cases) >= 30
    for case in cases:
        model = build_model(case)
        assert model.num_params() == case.model.params_table, case.id
        seconds, _ = step_time_s(case, model)
        assert seconds == pytest.approx(case.throughput["global_batch_tokens"] / case.throughput["tokens_per_s"])
        peak = 989.5e12 if case.hardware.gpu.startswith("H100") else 312e12
        per_token = 6.0 * model.num_params() + 12.0 * model.num_layers * model.hidden_size * case.model.seq_len
        mfu = per_token * case.batch.global_batch_seqs * case.model.seq_len / (seconds * peak * case.hardware.num_gpus)
        assert mfu * 100 == pytest.approx(case.throughput["mfu_pct"], abs=0.03), case.id


def test_composer_fsdp_framework_maps_to_full_shard_fsdp_on_eager_pytorch() -> None:
    """Composer FSDP FULL_SHARD: ZeRO-3 over every GPU, no TP/PP/CP/EP, eager PyTorch with fused attention; each
    row pins its stated micro-batch and activation checkpointing. Every row carries the attention-kernel gap (MPT's
    Triton FlashAttention of the flash-attn v1 era, which the model cannot express); the PURE rows reduce their
    gradients in bf16 (Composer 0.13.4 get_mixed_precision) and say so (grad_reduce_dtype), the others in fp32."""
    fw = FRAMEWORKS["composer-fsdp-2023"]
    work = Workload(**fw["workload"])
    assert (work.runtime, work.flash_attention, work.overlap_dp_comm) == ("pytorch", True, True)
    assert {k: fw["features"][k] for k in ("tp", "pp", "cp", "ep", "zero")} == {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "zero": 3}
    for case in _mpt_cases():
        pins = published_runs._pins(case)
        assert (pins["tp"], pins["pp"], pins["dp"], pins["zero"]) == (1, 1, case.hardware.num_gpus, 3), case.id
        assert pins["micro_batch"] == case.batch.micro_batch
        assert pins["recompute"] == ("full" if "Checkpointing True" in case.recompute.setting else "none")
        pure = case.throughput["mp_mode"] == "PURE"
        assert [g.kind for g in case.gaps] == ["runtime"], case.id
        assert published_runs.workload(case).grad_reduce_dtype == ("bf16" if pure else "fp32"), case.id
        assert any("Triton FlashAttention" in g.detail for g in case.gaps if g.kind == "runtime"), case.id
        assert build_cluster(case).num_gpus == case.hardware.num_gpus


def test_megatron_2025_formula_counts_active_experts_only() -> None:
    """A MoE layer's MLP term counts top_k (+ shared) experts: with one expert, top-1, it equals the dense model's."""
    case = _case("liu2025_table3_mixtral-8x22b_128gpu_mcore")
    moe = build_model(case)
    dense = moe.model_copy(update={"moe": None})
    one = moe.model_copy(update={"moe": moe.moe.model_copy(update={"num_experts": 1, "top_k": 1})})
    assert megatron_2025(8, 4096, one) == pytest.approx(megatron_2025(8, 4096, dense))
    assert megatron_2025(8, 4096, moe) > 1.5 * megatron_2025(8, 4096, dense)


def test_framework_pins_stay_inside_the_framework() -> None:
    """The published layout is pinned inside its framework's feature set (a 2021 run gets no sequence
    parallelism, no distributed optimizer, no zero-bubble schedule), and the rank search uses the same set."""
    case = _case("narayanan2021_table1_145.6B")
    pins = published_runs._pins(case)
    assert pins["sequence_parallel"] is False and pins["zero"] == 0 and pins["schedule"] == "interleaved"
    stated = published_runs._stated(case)
    assert "tp" not in stated and "dp" not in stated and stated["recompute"] == "full"
    zb = published_runs._pins(_case("qi2024_zb_14.6B_m64_zb-1p"))
    assert zb["schedule"] == "zb-h1" and zb["micro_batch"] == 1 and (zb["tp"], zb["pp"], zb["dp"]) == (1, 16, 1)


def test_extrapolations_column_reads_the_plan_when_it_has_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The column prints plan.prediction.extrapolations where a planner reports them, and 'n/a' where not."""
    from planner.plan import Prediction

    [row] = published_runs.run(["korthikanti2022_table5_22B_selective_sp"]).to_dict("records")
    reported = "extrapolations" in Prediction.model_fields
    assert (row["extrapolations"] != "n/a") if reported else (row["extrapolations"] == "n/a")
    real = published_runs.plans_from_result

    def with_one(ctx, res):
        plan = real(ctx, res)[0]
        said = ("cp=16 at 8K tokens per sequence: no validated run",)
        return [plan.model_copy(update={"prediction": plan.prediction.model_copy(update={"extrapolations": said})})]

    monkeypatch.setattr(published_runs, "plans_from_result", with_one)
    [row] = published_runs.run(["korthikanti2022_table5_22B_selective_sp"]).to_dict("records")
    assert row["extrapolations"] == "cp=16 at 8K tokens per sequence: no validated run"


def test_split_is_by_source_and_covers_every_source() -> None:
    cases = list(load_runs().cases)
    assert {source_key(c) for c in cases} <= set(validation.SPLIT)
    fit, held = validation.split(cases)
    assert fit and held and not ({source_key(c) for c in fit} & {source_key(c) for c in held})
    assert all(validation.eligible(c) for c in fit + held)
    assert not any(c.framework is None and "ZeRO-3" in c.id for c in fit + held)  # never fitted (issue decision)
    for key, rest, out in validation.leave_one_source_out(cases):
        assert {source_key(c) for c in out} == {key} and key not in {source_key(c) for c in rest}


def test_fit_constants_recovers_a_known_constant_and_reports_held_out_errors() -> None:
    """A predictor that is exact at theta = 0.7 (and off by theta/0.7 elsewhere) is fitted back to 0.7 on the FIT
    part; the held-out errors are then zero, and at the committed 0.8 they are the +14.3 % that 0.8/0.7 implies."""
    cases = [c for c in load_runs().cases if source_key(c) in ("korthikanti2022", "megascale2024")]

    def predictor(case, params):
        return validation.published_s(case) * params[0] / 0.7

    result, table = validation.cross_validate(cases, predictor, np.array([0.8]), bounds=(0.3, 1.0))
    assert result.success and result.params[0] == pytest.approx(0.7, abs=1e-4)
    fitted = table[table["constants"] == "fitted on FIT"].set_index("part")
    committed = table[table["constants"] == "committed"].set_index("part")
    assert fitted.loc[validation.HELD_OUT, "max_abs_pct"] < 0.05
    assert committed.loc[validation.HELD_OUT, "signed_mean_pct"] == pytest.approx(100 * (0.8 / 0.7 - 1), abs=0.01)


def test_refit_predictor_reproduces_the_benchmark_at_the_committed_constant() -> None:
    """The worked example re-evaluates the published layout through the cost model's internals; at the committed
    sustained_fraction it must give exactly the benchmark's prediction (and move with the constant)."""
    case_id = "korthikanti2022_table5_175B_selective_sp"
    predictor = validation.SustainedFractionPredictor("a100-80gb")
    committed = np.array([predictor.committed()])
    [row] = published_runs.run([case_id]).to_dict("records")
    assert predictor(_case(case_id), committed) == pytest.approx(row["predicted_s"], rel=1e-9)
    assert predictor(_case(case_id), committed * 0.9) > row["predicted_s"]
    assert np.isnan(predictor(_case("megatron_core_2024_h100_177B"), committed))  # an H100 case: not covered


def test_known_suboptimal_reasons_name_a_measured_comparison() -> None:
    """A sourced reason names a faster run measured on the same model and GPUs (the same batch, or the same layout at
    the larger batch it was sized for, compared per sequence), or a knob the case states."""
    annotated = [c for c in load_runs().cases if c.known_suboptimal]
    assert annotated
    for case in annotated:
        why = case.known_suboptimal
        if why.faster_case is not None:
            faster = _case(why.faster_case)
            assert faster.id != case.id and source_key(faster) == source_key(case), case.id
            assert faster.hardware.num_gpus == case.hardware.num_gpus, case.id
            assert build_model(faster).num_params() == build_model(case).num_params(), case.id
            batch, faster_batch = case.batch.global_batch_seqs, faster.batch.global_batch_seqs
            if faster_batch != batch:  # the layout's own batch: same layout, larger batch
                assert faster_batch > batch and faster.parallelism == case.parallelism, case.id
            per_sequence = [step_time_s(c, build_model(c))[0] / c.batch.global_batch_seqs for c in (faster, case)]
            assert per_sequence[0] < per_sequence[1], case.id
        held = published_runs.held_values(case)
        assert list(held) == list(why.knobs), case.id
        for knob, value in held.items():
            if knob == "pp":  # the published pipeline size, held: a pipeline the reason says data parallelism beats
                assert value == case.parallelism.pp > 1, case.id
                assert "Narayanan et al. 2021" in why.source and "Figure 14" in why.source, case.id
            else:
                assert isinstance(value, str), case.id
            if knob == "schedule":  # a stated non-interleaved schedule that the source measured interleaving beat
                assert value in ("1f1b", "gpipe") and case.parallelism.pp > 1, case.id
                assert "Narayanan et al. 2021" in why.source and "Figure 12" in why.source, case.id


def test_a_reason_names_a_knob_or_a_faster_case_or_both() -> None:
    with pytest.raises(ValidationError, match="knob"):
        KnownSuboptimal(reason="r", source="s")
    with pytest.raises(ValidationError):
        KnownSuboptimal(reason="r", source="s", knob="tp")  # no source measures a bare TP change as a reason
    both = KnownSuboptimal(reason="r", source="s", knob="pp", faster_case="qi2024_zb_1.5B_m24_zb-2p")
    assert (both.knob, both.faster_case) == ("pp", "qi2024_zb_1.5B_m24_zb-2p")
    assert both.knobs == ("pp",)
    several = KnownSuboptimal(reason="r", source="s", knob=["recompute", "schedule"])
    assert several.knobs == ("recompute", "schedule")
    with pytest.raises(ValidationError, match="twice"):
        KnownSuboptimal(reason="r", source="s", knob=["recompute", "recompute"])
    with pytest.raises(ValidationError, match="knob"):
        KnownSuboptimal(reason="r", source="s", knob=[])  # an empty list holds nothing: not a measure
    with pytest.raises(ValidationError):
        KnownSuboptimal(reason="r", source="s", knob=["recompute", "tp"])


def test_a_two_knob_reason_holds_both_published_settings_in_one_search() -> None:
    """GPT-3 175B on 1024 A100 (tp8 pp16 dp8, 1F1B, full recomputation): Korthikanti et al. 2022 measured full
    recomputation slower and Narayanan et al. 2021 Figure 12 the non-interleaved schedule slower on the same model;
    the part of the claim left is the pick with both settings held at their published values, searched once."""
    case = _case("megatron_gpt3_175B_1024xA100")
    assert case.known_suboptimal.knobs == ("recompute", "schedule")
    assert published_runs.held_values(case) == {"recompute": "full", "schedule": "1f1b"}
    asked: list[dict] = []

    def best_s(**features):
        asked.append(features)
        return None, SimpleNamespace(prediction=SimpleNamespace(step_time_s=30.0))

    left = published_runs.unexplained_gain_pct(case, 24.0, 31.0, 32.0, best_s)
    assert asked == [{**published_runs.framework_features("megatron-lm-2021"), "recompute": "full", "schedule": "1f1b"}]
    assert left == pytest.approx(100 * (31.0 / 30.0 - 1))


def _held_search(step_s: float, asked: list[dict]):
    """A stand-in for the benchmark's `best_s`: records the features it was asked with and answers `step_s`."""
    def best_s(**features):
        asked.append(features)
        return None, SimpleNamespace(prediction=SimpleNamespace(step_time_s=step_s))
    return best_s


def test_a_pp_reason_holds_the_published_pipeline_and_judges_the_rest_against_the_measured_speed_up() -> None:
    """Qi et al. 2024 1.5B, 1F1B, 24 micro-batches on 8 A100 (tp1 pp8 dp1): Narayanan et al. 2021 Figure 14 measured
    deeper pipelines with less data parallelism slower, and Qi's Table 4 measured ZB-2p faster on the same layout.
    The part of the claim left is the pick with pp held at 8, beyond the measured ZB-2p speed-up."""
    case = _case("qi2024_zb_1.5B_m24_1f1b")
    assert (case.known_suboptimal.knob, case.parallelism.pp) == ("pp", 8)
    asked: list[dict] = []
    held_at = partial(_held_search, asked=asked)

    published = step_time_s(case, build_model(case))[0]
    faster = _case(case.known_suboptimal.faster_case)
    measured = published / step_time_s(faster, build_model(faster))[0]
    assert measured > 1.0
    left = published_runs.unexplained_gain_pct(case, 74.0, 1.54, published, held_at(1.30))
    assert asked == [{**published_runs.framework_features("megatron-lm-2023-zb"), "pp": 8}]
    assert left == pytest.approx(100 * ((1.54 / 1.30) / measured - 1))
    # The held pick no faster than the measured alternative: nothing left to explain, whatever the unheld claim.
    assert published_runs.unexplained_gain_pct(case, 74.0, 1.54, published, held_at(1.54 / measured)) == pytest.approx(0.0)


def test_unexplained_gain_is_the_claim_beyond_the_measured_speed_up() -> None:
    case = _case("korthikanti2022_table5_22B_full_recompute")  # Table 5: 1.42 s full recompute, 1.10 s selective + SP

    def never(**_):
        raise AssertionError("a measured faster case needs no search")

    left = published_runs.unexplained_gain_pct(case, 49.0, 1.39, 1.42, never)
    assert left == pytest.approx(100 * (1.49 / (1.42 / 1.10) - 1))
    assert published_runs.unexplained_gain_pct(case, 8.0, 1.39, 1.42, never) == 8.0  # under the bar: nothing to explain
    plain = _case("megatron_core_2024_h100_70B")  # no reason: the whole claim stays unexplained
    assert published_runs.unexplained_gain_pct(plain, 30.0, 2.1, 2.2, never) == 30.0


def test_a_faster_case_at_the_layouts_own_batch_is_compared_per_sequence() -> None:
    """BLOOM's pre-launch GBS 16 test ran the layout sized for GBS 2048 with one micro-batch per 12-stage pipeline;
    the same layout measured 104.70 s at GBS 2048. The claim over the GBS 16 row (with full recomputation held) is
    judged against the measured time per sequence, 15.23 / 16 against 104.70 / 2048 (18.6x)."""
    case = _case("bloom2022_176B_384gpu_gbs16")
    assert case.known_suboptimal.faster_case == "bloom2022_176B_384gpu_gbs2048"
    held: list[dict] = []
    held_at = partial(_held_search, asked=held)

    published = step_time_s(case, build_model(case))[0]
    assert published == pytest.approx(15.23)
    per_sequence = (15.23 / 16) / (104.70 / 2048)
    left = published_runs.unexplained_gain_pct(case, 450.0, 15.4, published, held_at(15.4 / 4.0))
    assert held and all(f["recompute"] == "full" for f in held)
    assert left == pytest.approx(100 * (4.0 / per_sequence - 1))
    assert left < 0  # a claim of 4x at GBS 16 is below the 18.6x the hardware measured per sequence at GBS 2048
    # A claim beyond it stays unexplained.
    assert published_runs.unexplained_gain_pct(case, 3000.0, 15.4, published, held_at(15.4 / 25.0)) > 10


def test_unexplained_gain_uses_the_fastest_measured_alternative_of_the_chain() -> None:
    """Liu et al. 2025 Table 3, Mixtral-8x22B-G8T8 on 128 H100: TP x EP 8.7 % MFU < Megatron-Core 17.1 % < folded
    28.8 %; TP x EP's faster case is Megatron-Core, whose faster case is the folded run, so the claim over TP x EP is
    judged against the folded run's measured speed-up (28.8 / 8.7), not Megatron-Core's (17.1 / 8.7)."""
    case = _case("liu2025_table3_mixtral-8x22b-g8t8_128gpu_tp_ep_dp")
    folded = _case("liu2025_table3_mixtral-8x22b-g8t8_128gpu_folding")
    assert published_runs.fastest_measured(case).id == folded.id
    assert published_runs.fastest_measured(folded).id == folded.id  # no reason: the chain ends at the case itself

    def never(**_):
        raise AssertionError("a measured faster case needs no search")

    published = step_time_s(case, build_model(case))[0]
    speed_up = published / step_time_s(folded, build_model(folded))[0]
    assert speed_up == pytest.approx(28.8 / 8.7, rel=1e-6)
    left = published_runs.unexplained_gain_pct(case, 250.0, 11.4, published, never)
    assert left == pytest.approx(100 * (3.5 / speed_up - 1))


def test_the_pp2_table1_row_is_predicted_with_the_schedule_its_release_builds() -> None:
    """Narayanan 2021 Table 1 39.1B runs at pp 2, where the release it came with (50a4b5fa02) asserts against
    interleaving: the row pins 1F1B, the other pipelined Table 1 rows keep Sec. 5.1's interleaved schedule, and the
    pin is one the release's framework builds."""
    row = _case("narayanan2021_table1_39.1B")
    assert published_runs._stated(row)["schedule"] == "1f1b"
    assert published_runs._stated(_case("narayanan2021_table1_76.1B"))["schedule"] == "interleaved"
    framework = published_runs.framework_name(row)
    work = published_runs.workload(row)
    model = build_model(row)
    assert framework_builds(framework, model.num_layers, 2, 1, ScheduleCode.ONE_F_ONE_B, work)
    assert not framework_builds(framework, model.num_layers, 2, 2, ScheduleCode.INTERLEAVED, work)


def test_megatron_releases_interleave_two_stages_only_with_p2p_overlap() -> None:
    """The rule set's Megatron rule on interleaving 2 stages reaches the historical releases through their workloads:
    the 2021-2023 ones block on stage-boundary sends (and asserted pp > 2), Megatron-Core r0.8 overlaps them."""
    blocking = Workload(global_batch=512, seq_len=2048, overlap_pp_comm=False)
    overlapped = Workload(global_batch=512, seq_len=2048)
    assert not framework_builds("megatron-lm-2021", 40, 2, 4, ScheduleCode.INTERLEAVED, blocking)
    assert framework_builds("megatron-lm-2021", 40, 2, 1, ScheduleCode.ONE_F_ONE_B, blocking)
    assert framework_builds("megatron-lm-2021", 40, 4, 2, ScheduleCode.INTERLEAVED, blocking)
    assert not framework_builds("megascale-2023", 96, 2, 8, ScheduleCode.INTERLEAVED, blocking)
    assert framework_builds("megatron-core-0.8", 48, 2, 8, ScheduleCode.INTERLEAVED, overlapped)
    assert framework_builds("torchtitan-2024", 40, 2, 4, ScheduleCode.INTERLEAVED, blocking)  # not a Megatron rule
    for name in ("megatron-lm-2021", "megatron-lm-2022", "megatron-lm-2023", "megatron-lm-2023-zb", "megascale-2023"):
        assert FRAMEWORKS[name]["workload"]["overlap_pp_comm"] is False, name  # no --overlap-p2p-communication then


def test_the_published_interleaving_is_searched_where_its_framework_builds_it() -> None:
    """Megatron-Core 119B (92 layers, pp 4) interleaves only as 23 chunks of one layer: that degree is searched for
    the published layout; 70B (84 layers, pp 2) builds v = 2..7 inside the search's limit, so nothing is added."""
    by_id = {c.id: c for c in load_runs().cases}
    for case_id, expected in (("megatron_core_2024_h100_119B", {"max_virtual_stages": 23}),
                              ("megatron_core_2024_h100_70B", {})):
        case = by_id[case_id]
        model = build_model(case)
        assert published_runs._chunk_limit(case, model, published_runs.workload(case), published_runs._pins(case)) == expected


def test_the_pick_is_a_layer_split_the_framework_builds() -> None:
    """Megatron asserts layers % pp == 0 and (layers / pp) % layers-per-virtual-stage == 0: 84 layers (the
    Megatron-Core 2024 70B) build on 6 stages of 7 chunks, not on 8 stages; frameworks without a rule build any."""
    assert framework_builds("megatron-core-0.8", 84, 6, 7)
    assert not framework_builds("megatron-core-0.8", 84, 8, 8)
    assert not framework_builds("megatron-core-0.8", 84, 8, 1)
    assert not framework_builds("megatron-lm-2021", 40, 2, 3)  # 18.4B's former pick: 40 layers over 6 chunks
    assert framework_builds("megatron-lm-2021", 40, 2, 4)
    assert framework_builds("megatron-core-0.8", 84, 1, 1)
    assert framework_builds("torchtitan-2024", 84, 8, 8)
    assert framework_builds("megatron-deepspeed-2022", 70, 12, 1)  # BLOOM's own layout: DeepSpeed splits unevenly
    case = next(c for c in load_runs().cases if c.id == "megatron_core_2024_h100_70B")
    row = published_runs.run_case(case)
    tp_pp = row["pick"].split()[1]
    pp, v = int(tp_pp[2:]), 1
    for word in row["pick"].split():
        if word.startswith("interleaved-v"):
            v = int(word.removeprefix("interleaved-v"))
    assert framework_builds("megatron-core-0.8", 84, pp, v), row["pick"]


def _cases_of(source: str) -> list:
    return [c for c in load_runs().cases if source_key(c) == source]


@pytest.mark.parametrize(("source", "tolerance_pts", "rows"), [("torchtitan_a100_2024", 0.1, 8), ("ibm_fms_fsdp_2024", 3.5, 8)])
def test_pytorch_fsdp_rows_give_back_the_published_mfu(source: str, tolerance_pts: float, rows: int) -> None:
    """TorchTitan (utils.get_num_flop_per_token at 1ea476e9f) and the IBM FSDP blog (nanoGPT/PaLM) both count
    6 N + 12 L d s FLOPs per token; with the spec's parameter count and the step time derived from tokens/s/GPU,
    TorchTitan's printed MFU comes back to its rounding (which checks the Llama 2/3 shapes), IBM's to within the
    rounding of its throughputs (to 50-100 tokens/s) and its unstated N."""
    cases = _cases_of(source)
    assert len(cases) == rows
    for case in cases:
        model = build_model(case)
        seconds, _ = step_time_s(case, model)
        tokens = case.batch.global_batch_seqs * case.model.seq_len
        assert seconds == pytest.approx(tokens / (case.throughput["tokens_per_gpu_s"] * case.hardware.num_gpus))
        peak = 989e12 if case.hardware.gpu.startswith("H100") else 312e12
        per_token = 6.0 * model.num_params() + 12.0 * model.num_layers * model.hidden_size * case.model.seq_len
        mfu = per_token * tokens / (seconds * peak * case.hardware.num_gpus)
        assert mfu * 100 == pytest.approx(case.throughput["mfu_pct"], abs=tolerance_pts), case.id


def test_pytorch_fsdp_frameworks_pin_full_or_hybrid_shard_and_carry_their_gaps() -> None:
    """fms-fsdp: FSDP1 FULL_SHARD (dp_shard = dp) or, for 7B, HYBRID_SHARD within a node (dp_shard 8), local batch
    2; every row reduces its gradients in bf16 (bfSixteen: grad_reduce_dtype) and carries FSDP1's flat parameters
    (runtime); 'Selective AC' (every k-th block, k unstated) is pinned as the every-k policies. TorchTitan April 2024: FSDP2 over all 64 ranks, no PP/CP; every row carries
    the unstated A100 network (hardware)."""
    for name, pp_cp in (("fms-fsdp-2024", {"tp": 1, "pp": 1, "cp": 1, "ep": 1}), ("torchtitan-2024-04", {"pp": 1, "cp": 1, "ep": 1})):
        fw = FRAMEWORKS[name]
        assert {k: fw["features"][k] for k in pp_cp} == pp_cp and fw["features"]["zero"] == 3
        assert Workload(**fw["workload"]).runtime == "pytorch"
    for case in _cases_of("ibm_fms_fsdp_2024"):
        pins = published_runs._pins(case)
        hsdp = "HSDP" in case.source.quote.split("|")[2]
        assert (pins["tp"], pins["pp"], pins["dp"], pins["zero"], pins["micro_batch"]) == (1, 1, case.hardware.num_gpus, 3, 2)
        assert pins["dp_shard"] == (8 if hsdp else case.hardware.num_gpus), case.id
        kinds = {g.kind for g in case.gaps}
        assert published_runs.workload(case).grad_reduce_dtype == "bf16" and "comm" not in kinds, case.id
        assert "runtime" in kinds and "recompute" not in kinds, case.id
        # 'Selective AC' checkpoints every k-th block, k unstated: every-k, each k the layout rules allow searched.
        selective = "Selective" in case.recompute.setting
        assert (pins.get("recompute") == tuple(RECOMPUTE_EVERY)) == selective, case.id
        assert build_cluster(case).num_gpus == case.hardware.num_gpus
    hsdp_case = _case("fmsfsdp2024_a100_llama2-7b_128gpu")
    assert validation.published_layout_cost(hsdp_case).layout.dp_shard == 8
    for case in _cases_of("torchtitan_a100_2024"):
        pins = published_runs._pins(case)
        assert (pins["tp"], pins["pp"], pins["dp"], pins["dp_shard"]) == (1, 1, 64, 64)
        assert any(g.kind == "hardware" for g in case.gaps), case.id
        # 'selective layer' (selective_ac_option k, k unstated): the every-k policies, no longer a gap
        layer_wise = "selective layer" in case.recompute.setting
        assert (pins.get("recompute") == tuple(RECOMPUTE_EVERY)) == layer_wise, case.id
        assert not any(g.kind == "recompute" for g in case.gaps), case.id


def _automodel_llama3_flop_per_token(case) -> float:
    """NeMo AutoModel's llama3_flops per token (nemo_automodel/components/utils/flops_utils.py at 2013a4dd6): causal
    attention counted at half, the LM head at 6 V h."""
    m = build_model(case)
    layers, h, s = m.num_layers, m.hidden_size, case.model.seq_len
    return layers * h * h * (12 + 12 * m.num_kv_heads / m.num_heads + 18 * m.ffn_hidden_size / h + 6 * s / h
                             + 6 * m.vocab_size / (layers * h))


@pytest.mark.parametrize("case", _cases_of("nemo_automodel_perf"), ids=lambda c: c.id)
def test_automodel_rows_give_back_the_table_throughput(case) -> None:
    """The stated time per global step gives back the table's tokens/s/GPU (the table rounds both); the Llama row's
    Model TFLOPs/sec/GPU follows from AutoModel's own FLOP formula with the spec's shapes."""
    step_s = step_time_s(case, build_model(case))[0]
    tokens_per_gpu_s = case.batch.global_batch_seqs * case.model.seq_len / (step_s * case.hardware.num_gpus)
    assert tokens_per_gpu_s == pytest.approx(case.throughput["tokens_per_gpu_s"], rel=1.5e-3)
    if case.model.preset == "llama3-70b":
        tflops = _automodel_llama3_flop_per_token(case) * tokens_per_gpu_s / 1e12
        assert tflops == pytest.approx(case.throughput["model_tflops_per_gpu"], abs=1.0)


def test_automodel_rows_pin_the_table_layout_and_carry_their_gaps() -> None:
    """Llama 3 70B: CP 2 x FSDP 32 (ZeRO-3, micro-batch 1), compiled, gradients reduced in bf16 (grad_reduce_dtype);
    FSDP over DP x CP (layout), attention/MLP-only checkpointing (recompute) and the missing clipping (optimizer) are gaps.
    DeepSeek-V3: PP 4 interleaved x EP 64, one reduction per schedule (ZeRO-1 under torch pipelining); TE kernels
    (runtime), DeepEP under the fake balanced gate (comm) and plain Adam without clipping (optimizer) are gaps. The
    source is held out of the cross-validation refit."""
    assert validation.SPLIT["nemo_automodel_perf"] == validation.HELD_OUT
    assert Workload(**FRAMEWORKS["automodel-2025"]["workload"]).runtime == "pytorch-compile"
    llama = _case("automodel_dgxh100_llama3-70b_cp2_64gpu")
    pins = published_runs._pins(llama)
    assert (pins["tp"], pins["pp"], pins["dp"], pins["cp"], pins["zero"], pins["dp_shard"], pins["micro_batch"]) == (1, 1, 32, 2, 3, 32, 1)
    assert {g.kind for g in llama.gaps} == {"layout", "recompute", "optimizer"}
    assert published_runs.workload(llama).grad_reduce_dtype == "bf16"
    for gpus, dp in ((256, 64), (1024, 256)):
        case = _case(f"automodel_dgxh100_deepseek-v3_pp4ep64_{gpus}gpu")
        pins = published_runs._pins(case)
        assert (pins["tp"], pins["pp"], pins["dp"], pins["ep"], pins["zero"], pins["schedule"]) == (1, 4, dp, 64, 1, "interleaved")
        # the 1024-GPU row's 4 schedules per step and ep_shard-sharded experts are a layout gap (GA 1 at 256 GPUs)
        assert {g.kind for g in case.gaps} == {"runtime", "comm", "optimizer"} | ({"layout"} if gpus == 1024 else set())
        assert build_cluster(case).num_gpus == gpus
    for case in _cases_of("nemo_automodel_perf"):
        assert case.runtime == "pytorch-compile" and case.hardware.cluster == "dgx-h100"


# Decoder layers per stage from DeepSpeed's own partition_balanced (deepspeed/runtime/utils.py at 2151c787a,
# 2022-02-18), run on the weights PipelineModule._partition_layers gives GPTModelPipe's specs under
# partition_method 'type:transformer' (False) or 'type:transformer|embedding' (True).
DEEPSPEED_SPLITS = {
    (72, 6, False): (12,) * 6,  # the tr11 prequel's tp8 pp6 rows
    (72, 12, False): (6,) * 12,  # tp4 pp12
    (72, 24, False): (3,) * 24,  # tp2 pp24
    (78, 12, False): (7,) * 11 + (1,),  # chronicles-prequel 'Re-do': "the last stage has 1 block, while the rest have 7"
    (70, 12, False): (6,) * 11 + (4,),
    (70, 12, True): (5,) + (6,) * 10 + (5,),  # BLOOM (tr11-176B-ml.slurm: --pp-partition-method 'type:transformer|embedding')
    (106, 12, True): (8,) + (9,) * 10 + (8,),  # the prequel's first 'type:transformer|embed' shape (02-27)
    (4, 3, False): (1, 1, 2),  # the probe searches windows of len(specs) // pp specs: not a plain greedy fill
    (14, 5, True): (2, 3, 3, 3, 3),
    (72, 12, True): None,  # DeepSpeed leaves the last stage without a decoder layer: meshplan cannot express it
}


@pytest.mark.parametrize(("shape", "split"), DEEPSPEED_SPLITS.items(), ids=[f"{s[0]}L-pp{s[1]}-emb{int(s[2])}" for s in DEEPSPEED_SPLITS])
def test_deepspeed_type_partition_reproduces_deepspeeds_split(shape: tuple[int, int, bool], split: tuple[int, ...] | None) -> None:
    layers, pp, embeddings = shape
    assert deepspeed_type_partition(layers, pp, embeddings) == split
    if split is not None:
        assert sum(split) == layers and len(split) == pp


def test_megatron_deepspeed_releases_split_as_their_partition_method_says() -> None:
    """BLOOM's launch script passes 'type:transformer|embedding'; the fork hard-coded 'type:transformer' before
    2022-02-28, when the tr11 prequel's design runs were measured, and in Microsoft's 2021 fork that MT-NLG's
    stack came from. DeepSpeed's pipeline does not interleave."""
    assert rule_partition(PARTITION_RULES["megatron-deepspeed-2022"], 70, 12, 1) == (5,) + (6,) * 10 + (5,)
    assert rule_partition(PARTITION_RULES["megatron-deepspeed-2022-02"], 72, 24, 1) == (3,) * 24
    assert rule_partition(PARTITION_RULES["megatron-deepspeed-2022-02"], 72, 6, 2) is None
    assert rule_partition(PARTITION_RULES["megatron-deepspeed-2021"], 105, 35, 1) == (3,) * 35  # MT-NLG's layout
    assert rule_partition(PARTITION_RULES["megatron-deepspeed-2021"], 105, 35, 2) is None
    for framework in ("megatron-deepspeed-2021", "megatron-deepspeed-2022", "megatron-deepspeed-2022-02"):
        assert framework in FRAMEWORKS


def test_tr11_prequel_rows_are_one_days_fp16_layout_sweep_held_out() -> None:
    """The prequel's same-day layout sweep of one model (every measured h 14336 / 72-layer / 64-head row of 'GBS
    Variations' on 02-25, and the 02-26 repeat): fp16 ZeRO-1 (reduce-scattered 16-bit gradients, unlike BLOOM's
    BF16_Optimizer) on 384 GPUs, TP 2-8 against PP 2-24 and DP 4-24; held out of every fit. Each time is one
    2nd-iteration snapshot that the source says can fluctuate, and the day's rows disagree by ~20 %, so every row
    carries a ground-truth gap and is reported apart from the visible set."""
    rows = _cases_of("bigscience2022_tr11_prequel")
    assert len(rows) == 22
    assert {(c.parallelism.tp, c.parallelism.pp) for c in rows} == {
        (8, 6), (4, 12), (2, 24), (8, 12), (8, 8), (8, 4), (8, 2), (4, 6), (2, 12), (4, 24)}
    for c in rows:
        assert c.framework == "megatron-deepspeed-2022-02" and c.precision == "fp16" and c.recompute.policy == "full"
        par = c.parallelism
        assert (par.tp * par.pp * par.dp, c.hardware.num_gpus) == (384, 384)
        assert c.batch.global_batch_seqs in (1568, 2016, 2048) and f"| {c.batch.global_batch_seqs} |" in c.source.quote
        assert f"| {par.dp:2d} | {par.tp:2d} | {par.pp:2d} | {c.batch.micro_batch:3d} |" in c.source.quote, c.id
        assert (c.model.layers, c.model.hidden, c.model.heads, c.model.vocab) == (72, 14336, 64, 250880)
        assert c.step_time.value == c.throughput["iteration_time_s"] and f"{c.step_time.value:.2f}" in c.source.quote
        assert validation.part_of(c) == validation.HELD_OUT
        assert [g.kind for g in c.gaps] == ["ground_truth"] and "2nd iteration" in c.gaps[0].detail, c.id
    work = published_runs.workload(rows[0])
    assert work.dtype == "fp16" and work.runtime == "megatron" and not work.zero1_grad_allreduce


# DGX Cloud Benchmarking v24.11.1 (35a9aec) BF16 and FP8 tables: model FLOPs per sequence ('The model flops for ...
# for GBS=1 is ...') and the global batch per GPU count (configure.sh: 128 x N / 8, 128 x N / 64, 252 x N / 576, 4 x N,
# 2 x nodes), per model; the FP8 tables repeat the BF16 tables' layouts and columns.
DGXC_RECIPES = {
    "llama3.1-8b": (4.74e14, lambda n: 128 * n // 8, (1, 1, 2, None, 1), 5),
    "llama3.1-70b": (3.94e15, lambda n: 128 * n // 64, (4, 4, 2, 5, 1), 6),
    "llama3.1-405b": (2.17e16, lambda n: 252 * n // 576, (8, 9, 2, 7, 1), 3),
    "nemotron4-15b": (434.5e12, lambda n: 4 * n, (4, 1, 1, None, 4), 8),
    "nemotron4-340b": (1.01e16, lambda n: 2 * (n // 8), (8, 8, 1, 12, 1), 5),
}
# The README's MFU divides by the peak of the run's precision: 'The peak theoretical throughput for H100 FP8 is 1979
# TFLOPS and for H100 BF16 is 989 TFLOPS'.
DGXC_PEAK_TFLOPS = {"bf16": 989, "fp8": 1979}


def test_dgxc_nemo_rows_give_back_the_tables_mfu_and_pin_the_recipe_layout() -> None:
    """Each BF16 and FP8 DGX H100 row of the DGX Cloud Benchmarking tables: the stated step time with the README's
    own formula (GBS x model FLOPs per sequence / step / GPUs / the precision's peak, 989 or 1979 TFLOP/s) gives back
    the printed MFU (the BF16 70B 2048-GPU column's MFU follows from the 1024-GPU column's step: 0.25 point, stated
    in its derivation); the published layout is pinned as the recipe ran it (TP, PP, CP, VP, MBS, distributed
    optimizer, no recompute but 340B's selective), on dgx-h100 with the megatron-core-0.8 feature set; every FP8 row
    has the BF16 row of its model and GPU count with the same layout and batch; the source is held out."""
    rows = _cases_of("dgxc_benchmarking_2024")
    by_id = {c.id: c for c in rows}
    assert len(rows) == 2 * sum(r[3] for r in DGXC_RECIPES.values()) == 54
    for case in rows:
        precision, key = case.id.split("_")[2:4]
        flops, gbs, (tp, pp, cp, vpp, mbs), _ = DGXC_RECIPES[key]
        n, step = case.hardware.num_gpus, case.step_time.value
        assert case.batch.global_batch_seqs == gbs(n) and case.precision == precision and case.framework == "megatron-core-0.8"
        assert f"{case.throughput['mfu_pct']:.2f}".rstrip("0").rstrip(".") in case.source.quote, case.id
        mfu = case.batch.global_batch_seqs * flops / step / n / (DGXC_PEAK_TFLOPS[precision] * 1e12) * 100
        loose = case.id == "dgxc2024_h100_bf16_llama3.1-70b_2048gpu"
        assert mfu == pytest.approx(case.throughput["mfu_pct"], abs=0.25 if loose else 0.05), case.id
        pins = published_runs._pins(case)
        assert (pins["tp"], pins["pp"], pins["cp"], pins.get("virtual_stages"), pins["micro_batch"]) == (tp, pp, cp, vpp, mbs)
        assert pins["tp"] * pins["pp"] * pins["cp"] * pins["dp"] == n and pins["zero"] == 1
        assert pins["recompute"] == ("selective" if key == "nemotron4-340b" else "none")
        assert build_cluster(case).num_gpus == n and case.hardware.cluster == "dgx-h100"
        assert validation.part_of(case) == validation.HELD_OUT
        assert ("model" in {g.kind for g in case.gaps}) == key.startswith("nemotron4"), case.id
        if precision == "fp8":
            twin = by_id[case.id.replace("_fp8_", "_bf16_")]
            layout = (case.parallelism.model_dump(exclude={"note"}), case.batch, case.recompute, case.model, case.hardware)
            assert layout == (twin.parallelism.model_dump(exclude={"note"}), twin.batch, twin.recompute, twin.model,
                              twin.hardware), case.id
            assert {g.kind for g in case.gaps} - {g.kind for g in twin.gaps} <= {"optimizer"}, case.id
            assert "1979" in case.source.quote and "1979 TFLOP/s" in case.derived["mfu_check"], case.id


def test_dgxc_fp8_rows_state_their_transformer_engine_recipe_and_keep_attention_bf16() -> None:
    """The FP8 rows run Transformer Engine's delayed scaling in the HYBRID format with fp8 weights (configure.sh:
    model.fp8, model.fp8_hybrid, +model.fp8_params) and no fp8 attention (no fp8_dot_product_attention / NVTE_FP8_DPA):
    what meshplan's fp8 workload times (decoder linear layers at the fp8 peak, attention and the LM head at bf16), so
    none carries a precision gap."""
    fp8 = [c for c in _cases_of("dgxc_benchmarking_2024") if c.precision == "fp8"]
    assert len(fp8) == 27
    for case in fp8:
        sw = case.source.software
        assert "fp8_hybrid" in sw and "fp8_params" in sw and "fp8_amax_history_len: 1024" in sw, case.id
        assert "no fp8_dot_product_attention" in sw and "NVTE_FP8_DPA" in sw, case.id
        assert "precision" not in {g.kind for g in case.gaps}, case.id
        assert published_runs.workload(case).dtype == "fp8"


def test_dgxc_rows_keep_the_optimizer_state_their_recipes_set() -> None:
    """NeMo 24.09's Apex DistributedFusedAdam keeps int16 master remainders and fp32 moments for the bf16 models with
    an fp32 optim.dtype (Llama 3.1, Nemotron-4 15B) and no master with bf16 moments for Nemotron-4 340B (optim.dtype
    bf16); with fp8 parameters (the FP8 rows) it stores the master weights (store_params) at optim.dtype: fp32 for
    Llama 3.1 and 15B, bf16 for 340B, which an fp8 workload cannot take (an optimizer gap; predicted with fp32). Each
    row cites its yaml and NeMo's lines. With that, the 340B BF16 recipe on 128 GPUs (tp8 pp8 dp2), which ran, fits
    in the model (it was out of memory at 4 + 16/d bytes per parameter) and ranks."""
    for case in _cases_of("dgxc_benchmarking_2024"):
        w = published_runs.workload(case)
        big = case.id.split("_")[3] == "nemotron4-340b"
        if case.precision == "bf16":
            assert (w.master_weights, w.optimizer_state_dtype) == (("none", "bf16") if big else ("remainders", "fp32")), case.id
            assert "megatron_base_model.py lines 81" in case.parallelism.note, case.id
        else:
            assert (w.master_weights, w.optimizer_state_dtype) == ("fp32", "fp32"), case.id
            assert "lines 808-809" in case.parallelism.note and "store_params=True" in case.parallelism.note, case.id
            assert ("optimizer" in {g.kind for g in case.gaps}) == big, case.id
        assert "35a9aec" in case.parallelism.note, case.id
    (row,) = published_runs.run(["dgxc2024_h100_bf16_nemotron4-340b_128gpu"]).itertuples()
    assert row.rank.isdigit() and np.isfinite(row.predicted_s), row.rank


def test_nemotron4_layer_style_and_a_stated_interleaving_past_the_search_limit() -> None:
    """Nemotron-4 (squared-ReLU, LayerNorm1p, RoPE, no biases, untied) is predicted with the GELU-shaped MLP and
    LayerNorm: the same GEMMs and weights, so 15B comes out at its name's size; 340B's stated 12 chunks per stage
    (one layer each) lie past the search's limit of 8, so the published layout is searched with the limit raised
    to 12 and the run still has a prediction."""
    small = build_model(_case("dgxc2024_h100_bf16_nemotron4-15b_16gpu"))
    assert (small.mlp, small.norm, small.position, small.tied_embeddings, small.linear_bias) == ("gelu", "layernorm", "rope", False, False)
    assert 15.0e9 < small.num_params() < 16.5e9
    big = _case("dgxc2024_h100_bf16_nemotron4-340b_128gpu")
    model = build_model(big)
    assert 335e9 < model.num_params() < 345e9
    pins = published_runs._pins(big)
    assert published_runs._chunk_limit(big, model, published_runs.workload(big), pins) == {"max_virtual_stages": 12}
    assert published_runs._chunk_limit(_case("dgxc2024_h100_bf16_llama3.1-70b_64gpu"), model, published_runs.workload(big),
                                       published_runs._pins(_case("dgxc2024_h100_bf16_llama3.1-70b_64gpu"))) == {}


def test_per_op_selective_ac_rows_pin_op_and_only_torchtitan_runs_it() -> None:
    """Rows whose source states TorchTitan's per-op selective AC ('selective op', per-op SAC) pin recompute "op" and
    carry no recompute gap for it; the pick searches "op" only inside TorchTitan's frameworks."""
    per_op = [c for c in load_runs().cases if "per-op SAC" in str(c.recompute.setting) or "'selective op'" in str(c.recompute.setting)]
    assert len(per_op) == 11
    for case in per_op:
        assert case.recompute.policy == "op" and case.framework.startswith("torchtitan"), case.id
        assert not [g for g in case.gaps if g.kind == "recompute"], case.id
    for name in FRAMEWORKS:
        assert ("op" in published_runs.framework_features(name)["recompute"]) == name.startswith("torchtitan"), name
