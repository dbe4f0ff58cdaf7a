"""Cross-validation of cost-model constants on published runs: fit on one part, judge on the other.

    .venv/bin/python benchmarks/validation.py            # the worked example below, on every eligible case

A constant fitted to the very rows it is judged on proves nothing. So the published runs are split BY SOURCE into a
FIT part and a HELD-OUT part (`SPLIT`; no source is in both, so a source's shared quirks cannot leak across), a
constant is fitted on the FIT part only (`fit_constants`: scipy.optimize.least_squares on log(predicted/published)),
and the errors on the HELD-OUT part are reported beside the fitted ones (`cross_validate`). `leave_one_source_out`
repeats the fit once per source with that source held out. Only cases meshplan represents exactly are used
(`eligible`: no gaps, not the 2021 DeepSpeed ZeRO-3 baselines, which the team decided not to fit).

A constant to fit is a `Predictor`: any callable (case, params) -> predicted step time in seconds. The forms compared
(`FORMS`, each per GPU family, without changing the committed profiles): `SustainedFractionPredictor` refits the GPU
profile's `sustained_fraction` (the share of their isolated plateau that GEMMs and attention sustain inside a training
step; committed: A100 0.811 from Korthikanti et al. 2022 Table 4, H100 0.848 from an H200 layer measurement), a
multiplicative constant; `AdditiveOverheadPredictor` adds a fixed time per step, or per layer and micro-batch on the
critical pipeline rank, which the committed model does not have (0).

The split (the why of each side):
- FIT: the Megatron-LM 2021 tables (Narayanan et al., 17 PTD-P runs), Korthikanti et al. 2022 (the A100 layer and
  end-to-end source the A100 constant already comes from), the Megatron-Core 2024 H100 README (9 dense runs) and
  TorchTitan (the PyTorch runtime meshplan's executor shares; every row currently has gaps, so it serves the runtime
  constants to come). Both GPU families and both runtimes are on this side.
- HELD-OUT: the places the search likes to go and no FIT source covers: zero-bubble and 1F1B pipelines at small
  per-GPU work (Qi et al. 2024), 175B/530B at up to 12,288 GPUs (MegaScale's Megatron-LM baseline), a different
  runtime (BLOOM's Megatron-DeepSpeed), MoE with EP and CP on H100 (MoE Parallel Folding), 4D parallelism at 16K H100
  (Llama 3), the 2021 GPT-3 reference run, OPT and DeepSeek-V3, and NVIDIA's NeMo 24.09 BF16 recipes on DGX H100
  (DGX Cloud Benchmarking: Llama 3.1 8B-405B with CP, Nemotron-4 15B/340B, 8 to 2,304 GPUs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import pandas as pd
from published_cases import PublishedRun, build_cluster, build_model, framework_name, load_runs, source_key
from published_step_times import step_time_s
from scipy.optimize import least_squares

from planner.api import evaluate, plans_from_result, search_result

FIT, HELD_OUT = "fit", "held-out"
SPLIT: dict[str, str] = {
    "narayanan2021": FIT, "korthikanti2022": FIT, "megatron_core_2024": FIT, "torchtitan2024": FIT,
    "torchtitan2025_asynctp": FIT,
    "megatron_gpt3_2021": HELD_OUT, "qi2024_zb": HELD_OUT, "megascale2024": HELD_OUT, "bigscience2022_bloom": HELD_OUT,
    "bigscience2022_tr11_prequel": HELD_OUT, "smith2022_mtnlg": HELD_OUT,
    "liu2025_moe_folding": HELD_OUT, "llama3_2024": HELD_OUT, "opt2022": HELD_OUT, "deepseek_v3_2024": HELD_OUT,
    "mosaicml_llmfoundry_mpt": HELD_OUT,
    "ibm_fms_fsdp_2024": HELD_OUT, "torchtitan_a100_2024": HELD_OUT,
    "nemo_automodel_perf": HELD_OUT,
    "dgxc_benchmarking_2024": HELD_OUT,
}
NOT_FITTED_FRAMEWORKS = frozenset({"deepspeed-2021-zero3"})  # a 2021 runtime meshplan does not model (issue decision)

Predictor = Callable[[PublishedRun, np.ndarray], float]


def part_of(case: PublishedRun) -> str:
    key = source_key(case)
    if key not in SPLIT:
        raise KeyError(f"source {key!r} of case {case.id} is in neither part: add it to validation.SPLIT")
    return SPLIT[key]


def eligible(case: PublishedRun) -> bool:
    """Cases a constant may be fitted or judged on: represented exactly, in a runtime meshplan models."""
    return not case.gaps and framework_name(case) not in NOT_FITTED_FRAMEWORKS


def split(cases: list[PublishedRun]) -> tuple[list[PublishedRun], list[PublishedRun]]:
    cases = [c for c in cases if eligible(c)]
    return [c for c in cases if part_of(c) == FIT], [c for c in cases if part_of(c) == HELD_OUT]


def leave_one_source_out(cases: list[PublishedRun]) -> Iterator[tuple[str, list[PublishedRun], list[PublishedRun]]]:
    """(held-out source, the other sources' cases, that source's cases) for every source with eligible cases."""
    cases = [c for c in cases if eligible(c)]
    for key in sorted({source_key(c) for c in cases}):
        yield key, [c for c in cases if source_key(c) != key], [c for c in cases if source_key(c) == key]


def published_s(case: PublishedRun) -> float:
    return step_time_s(case, build_model(case))[0]


def errors_pct(cases: list[PublishedRun], predictor: Predictor, params: np.ndarray) -> np.ndarray:
    """Signed error of each prediction against the published step time, % (NaN where nothing is predicted)."""
    return np.array([100.0 * (predictor(c, params) / published_s(c) - 1.0) for c in cases])


@dataclass
class FitResult:
    params: np.ndarray
    success: bool
    message: str
    cases: int
    evaluations: int


def fit_constants(cases: list[PublishedRun], predictor: Predictor, x0: np.ndarray,
                  bounds: tuple[np.ndarray | float, np.ndarray | float] = (-np.inf, np.inf)) -> FitResult:
    """Least-squares fit of the predictor's constants to the cases' published step times.

    Residual per case: log(predicted / published), symmetric in over- and under-prediction. Cases predicted as
    NaN at x0 (no layout) are left out of the fit."""
    x0 = np.asarray(x0, dtype=float)
    usable = [c for c in cases if np.isfinite(predictor(c, x0))]
    truth = np.array([published_s(c) for c in usable])
    if not usable:
        return FitResult(x0, False, "no case with a prediction", 0, 0)

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.log(np.array([predictor(c, x) for c in usable]) / truth)

    res = least_squares(residuals, x0, bounds=bounds, xtol=1e-4, ftol=1e-6, diff_step=1e-3)
    return FitResult(res.x, bool(res.success), str(res.message), len(usable), int(res.nfev))


def error_stats(err: np.ndarray) -> dict[str, float]:
    err = err[np.isfinite(err)]
    if len(err) == 0:
        return {"n": 0, "mean_abs_pct": np.nan, "max_abs_pct": np.nan, "signed_mean_pct": np.nan}
    return {"n": len(err), "mean_abs_pct": float(np.abs(err).mean()), "max_abs_pct": float(np.abs(err).max()),
            "signed_mean_pct": float(err.mean())}


def cross_validate(cases: list[PublishedRun], predictor: Predictor, committed: np.ndarray,
                   bounds: tuple = (-np.inf, np.inf), start: np.ndarray | None = None) -> tuple[FitResult, pd.DataFrame]:
    """Fit on the FIT part (from `start`, default the committed constants); report both parts' errors at the
    committed and at the fitted constants."""
    fit_cases, held = split(cases)
    result = fit_constants(fit_cases, predictor, committed if start is None else start, bounds)
    rows = []
    for part, part_cases in ((FIT, fit_cases), (HELD_OUT, held)):
        for label, params in (("committed", np.asarray(committed, dtype=float)), ("fitted on FIT", result.params)):
            rows.append({"part": part, "constants": label, **error_stats(errors_pct(part_cases, predictor, params))})
    return result, pd.DataFrame(rows)


def leave_one_source_out_report(cases: list[PublishedRun], predictor: Predictor, committed: np.ndarray,
                                bounds: tuple = (-np.inf, np.inf), start: np.ndarray | None = None) -> pd.DataFrame:
    rows = []
    for key, rest, held in leave_one_source_out(cases):
        result = fit_constants(rest, predictor, committed if start is None else start, bounds)
        at_committed = error_stats(errors_pct(held, predictor, np.asarray(committed, dtype=float)))
        refit = error_stats(errors_pct(held, predictor, result.params))
        rows.append({"held-out source": key, "cases": at_committed["n"], "fitted": ", ".join(f"{p:.3f}" for p in result.params),
                     "mean_abs_committed": at_committed["mean_abs_pct"], "mean_abs_refit": refit["mean_abs_pct"],
                     "signed_committed": at_committed["signed_mean_pct"], "signed_refit": refit["signed_mean_pct"]})
    return pd.DataFrame(rows)


# -- worked example: refit the GPU profile's sustained_fraction ----------------------------------------------------
@dataclass
class SustainedFractionPredictor:
    """Step time of a case's published layout with `sustained_fraction` of its GPU profile set to params[0].

    The unstated knobs (micro-batch, interleaving, ...) are fixed at their best under the committed constants, so each
    evaluation costs one cost-model evaluation of a fixed layout; only cases on `gpu_profile` are predicted (NaN else)."""

    gpu_profile: str  # e.g. "a100-80gb", "h100-sxm"
    _fixed: dict[str, FixedLayoutCost | None] = field(default_factory=dict, repr=False)

    def committed(self) -> float:
        """The value the cost model uses today: the profile's, else the A100 default (planner/cost/efficiency.py)."""
        from hardware_profiles import gpu
        from planner.cost.efficiency import SUSTAINED_FRACTION_OF_ISOLATED

        return float(gpu(self.gpu_profile).sustained_fraction or SUSTAINED_FRACTION_OF_ISOLATED)

    def covers(self, case: PublishedRun) -> bool:
        return self.gpu_profile in build_cluster(case).gpus

    def __call__(self, case: PublishedRun, params: np.ndarray) -> float:
        if not self.covers(case):
            return float("nan")
        if case.id not in self._fixed:
            self._fixed[case.id] = published_layout_cost(case)
        fixed = self._fixed[case.id]
        if fixed is None:
            return float("nan")
        cluster = fixed.cluster
        profile = cluster.gpus[self.gpu_profile].model_copy(update={"sustained_fraction": float(params[0])})
        return fixed.step_time_s(cluster.model_copy(update={"gpus": {**cluster.gpus, self.gpu_profile: profile}}))


@dataclass
class AdditiveOverheadPredictor:
    """Committed step time of a case's published layout plus params[0] of a fixed cost per unit of `per`:

    - "step": one per optimizer step, in seconds (host-side work no GPU term counts: data loading, logging,
      the synchronisations around the optimizer);
    - "microbatch_layer": one per layer and micro-batch on the critical pipeline rank, in milliseconds (launch
      and host-synchronisation gaps per layer that grow with the number of micro-batches, the form of the
      issue's observation that the error is worst where work per GPU is small). The critical rank runs
      (m + (pp - 1) / v) micro-batch slots of its layers (the 1F1B bubble in slot units), each forward and backward.

    The committed profiles carry no such term (0); only cases on `gpu_profile` are predicted (NaN else)."""

    gpu_profile: str
    per: str  # "step" | "microbatch_layer"
    _base: dict[str, tuple[float, float] | None] = field(default_factory=dict, repr=False)

    def committed(self) -> float:
        return 0.0

    def covers(self, case: PublishedRun) -> bool:
        return self.gpu_profile in build_cluster(case).gpus

    def _units(self, fixed: FixedLayoutCost) -> float:
        if self.per == "step":
            return 1.0
        layout = fixed.layout
        slots = layout.num_microbatches + (layout.pp - 1) / layout.virtual_stages
        return slots * max(fixed.rank_layers) / 1e3  # params[0] in milliseconds

    def __call__(self, case: PublishedRun, params: np.ndarray) -> float:
        if not self.covers(case):
            return float("nan")
        if case.id not in self._base:
            fixed = published_layout_cost(case)
            self._base[case.id] = None if fixed is None else (fixed.step_time_s(fixed.cluster), self._units(fixed))
        base = self._base[case.id]
        return float("nan") if base is None else base[0] + float(params[0]) * base[1]


@dataclass
class FixedLayoutCost:
    """The cost model's step time of one fixed layout, re-evaluated under changed GPU-profile constants.

    The topology and its collective bandwidths do not depend on a GPU's compute constants, so they are built once
    and shared by every evaluation (planner.evaluate would rebuild them, and the rank placement, per call: a
    second per call on 12,288 GPUs). Models with several layer types are costed through planner.evaluate, which
    refines the partition by layer type."""

    case: PublishedRun
    cluster: object
    layout: object
    rank_layers: list[int]
    _bandwidth: object = field(default=None, repr=False)

    @classmethod
    def of_published_layout(cls, case: PublishedRun) -> FixedLayoutCost | None:
        """The published layout at its best unstated settings under the committed constants (None: no layout)."""
        from published_partitions import with_framework_partition
        from published_runs import _chunk_limit, _pins, workload

        cluster, model, work, pins = build_cluster(case), build_model(case), workload(case), _pins(case)
        # A stated interleaving past the search's chunk limit raises the limit to it (Nemotron-4 340B: 12 chunks).
        stated = _chunk_limit(case, model, work, pins) if pins.get("virtual_stages") else {}
        ctx, res = search_result(model, cluster, work, top=1, framework="any", **pins, **stated)
        if not len(res.step_time_s):
            return None
        plan = with_framework_partition(plans_from_result(ctx, res)[0], framework_name(case), ctx.model, cluster,
                                        workload(case))
        parts, pp = plan.layout.partition(ctx.model.num_layers), plan.layout.pp
        return cls(case, cluster, plan.layout, [sum(parts[c] for c in range(r, len(parts), pp)) for r in range(pp)])

    def step_time_s(self, cluster) -> float:
        from published_runs import workload

        from planner.cost.comm import AxisBandwidth
        from planner.cost.context import CostContext, cached_topology
        from planner.cost.evaluate import evaluate_table
        from planner.cost.typed import needs_typed_costing
        from planner.layout import layout_to_row

        model, work = build_model(self.case), workload(self.case)
        topology = cached_topology(self.cluster)  # built from the committed cluster: same hosts and links
        ctx = CostContext(model=model, cluster=cluster, workload=work, topology=topology)
        if needs_typed_costing(ctx):
            return float(evaluate(model, cluster, work, self.layout, allow_oom=True, framework="any").prediction.step_time_s)
        if self._bandwidth is None:
            self._bandwidth = AxisBandwidth(topology)
        res = evaluate_table(ctx, layout_to_row(self.layout), self._bandwidth, rank_layers=np.array([self.rank_layers]))
        return float(res.step_time_s[0])


_PUBLISHED_LAYOUTS: dict[str, FixedLayoutCost | None] = {}


def published_layout_cost(case: PublishedRun) -> FixedLayoutCost | None:
    """FixedLayoutCost.of_published_layout, searched once per case and shared by every predictor."""
    if case.id not in _PUBLISHED_LAYOUTS:
        _PUBLISHED_LAYOUTS[case.id] = FixedLayoutCost.of_published_layout(case)
    return _PUBLISHED_LAYOUTS[case.id]


@cache
def _predictor(gpu_profile: str, form: str = "sustained_fraction") -> SustainedFractionPredictor | AdditiveOverheadPredictor:
    if form == "sustained_fraction":
        return SustainedFractionPredictor(gpu_profile)
    return AdditiveOverheadPredictor(gpu_profile, form)


# The constant forms compared: what is refitted, its unit, the range the fit may take and where it starts (inside
# the range: a fit started on a bound does not leave it).
FORMS: dict[str, tuple[str, tuple[float, float], float | None]] = {
    "sustained_fraction": ("share of the isolated GEMM plateau", (0.3, 1.0), None),
    "step": ("seconds per step", (0.0, 60.0), 0.1),
    "microbatch_layer": ("milliseconds per layer and micro-batch", (0.0, 10.0), 0.01),
}


def print_cross_validation(df: pd.DataFrame | None = None, loso: bool = True,
                           forms: tuple[str, ...] = tuple(FORMS)) -> None:
    """Each constant form of FORMS refitted per GPU family on the FIT sources, judged on HELD-OUT ones and
    leave-one-source-out. `df` (the benchmark's table) restricts it to the cases that table covers."""
    cases = [c for c in load_runs().cases if df is None or c.id in set(df["case"])]
    print("\nCross-validation (benchmarks/validation.py): each constant form refitted on the FIT sources only; the "
          "committed profiles are unchanged")
    print("  FIT sources:      " + ", ".join(k for k, v in SPLIT.items() if v == FIT))
    print("  HELD-OUT sources: " + ", ".join(k for k, v in SPLIT.items() if v == HELD_OUT))
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        for form in forms:
            unit, bounds, x0 = FORMS[form]
            start = None if x0 is None else np.array([x0])
            for profile in ("a100-80gb", "h100-sxm"):
                predictor = _predictor(profile, form)
                covered = [c for c in cases if eligible(c) and predictor.covers(c)]
                fit_cases, held = split(covered)
                if not fit_cases:
                    continue
                committed = np.array([predictor.committed()])
                result, table = cross_validate(covered, predictor, committed, bounds=bounds, start=start)
                print(f"\n  {form} ({unit}), {profile}: committed {committed[0]:.3f}, fitted on {result.cases} FIT "
                      f"cases -> {result.params[0]:.3f} ({result.evaluations} evaluations); held-out cases: {len(held)}")
                print(table.to_string(index=False, float_format=lambda x: f"{x:.1f}"))
                if loso:
                    report = leave_one_source_out_report(covered, predictor, committed, bounds=bounds, start=start)
                    n = report["cases"]
                    print(f"\n  leave-one-source-out ({form}, {profile}); case-weighted mean |error| committed "
                          f"{(report['mean_abs_committed'] * n).sum() / n.sum():.1f} %, refit "
                          f"{(report['mean_abs_refit'] * n).sum() / n.sum():.1f} %:")
                    print(report.to_string(index=False, float_format=lambda x: f"{x:.1f}"))


if __name__ == "__main__":
    print_cross_validation()
