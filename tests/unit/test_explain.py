"""`planner.explain` and `meshplan explain`: each knob's runner-up is the best alternative (brute-force oracle)."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

import hardware_profiles
from planner.api import evaluate, layout_to_row, make_context, search
from planner.cli.app import app
from planner.cli.main import _register_commands
from planner.cost.comm import AxisBandwidth
from planner.cost.evaluate import evaluate_table
from planner.explain import COVARY, NOT_APPLICABLE, Explanation, explain
from planner.layout import COLUMNS, MESH_ORDERS, RECOMPUTE_NAMES, SCHEDULE_NAMES, SCHEDULES, Workload
from planner.model import load_model
from planner.plan import Plan
from planner.solver.exact import brute_force
from planner.solver.space import PIN_FIELDS, Pins, SearchLimits

_register_commands()
ENV = {"COLUMNS": "250", "NO_COLOR": "1"}
GiB = 2**30
MODEL = load_model("llama3-8b")
CLUSTER = hardware_profiles.cluster("dgx-h100", nodes=2)
WORKLOAD = Workload(global_batch=64, seq_len=8192)
COLUMN_OF = {"tp": "tp", "pp": "pp", "dp": "dp", "cp": "cp", "micro_batch": "mb", "schedule": "sched",
             "virtual_stages": "v", "zero": "zero", "dp_shard": "dp_shard", "recompute": "rc", "sequence_parallel": "sp"}
# Every value a knob could take on this setup (16 GPUs, 32 layers, 32 heads, batch 64): the oracle tries them all,
# invalid ones simply give an empty space.
ALL_VALUES = {"tp": range(1, 17), "pp": range(1, 17), "dp": range(1, 17), "cp": range(1, 17),
              "micro_batch": range(1, 65), "schedule": SCHEDULE_NAMES, "virtual_stages": range(1, 9), "zero": range(4),
              "dp_shard": range(1, 17), "recompute": RECOMPUTE_NAMES, "sequence_parallel": (False, True)}


def _code(knob: str, value) -> int:  # noqa: ANN001
    if knob == "schedule":
        return SCHEDULES[value].code
    if knob == "recompute":
        return RECOMPUTE_NAMES.index(value)
    return int(value)


def oracle(plan: Plan, knob: str) -> tuple[float | None, float | None]:
    """(fastest step time that fits, least peak memory) over every layout with `knob` != the plan's value and
    the knobs outside COVARY[knob] at the plan's values, by exhaustive evaluation (no bounds)."""
    ctx = make_context(MODEL, CLUSTER, WORKLOAD)
    lay = plan.layout
    limits = SearchLimits(max_tp=16, max_cp=16, max_micro_batch=64, max_virtual_stages=8)
    fixed = {f: getattr(lay, f) for f in PIN_FIELDS if f != knob and f not in COVARY[knob]}
    best, least = None, None
    for value in ALL_VALUES[knob]:
        if value == getattr(lay, knob):
            continue
        table, res = brute_force(ctx, Pins({**fixed, knob: value}), limits)
        # (the space ignores a sequence_parallel pin where tp == 1: keep only rows that have the value)
        mine = table[COLUMN_OF[knob]] == _code(knob, value)
        if not mine.any():
            continue
        ok = mine & res.fits
        if ok.any():
            t = float(res.step_time_s[ok].min())
            best = t if best is None else min(best, t)
        m = float(res.peak_memory_bytes[mine].min())
        least = m if least is None else min(least, m)
    return best, least


@pytest.fixture(scope="module")
def plans() -> dict[str, Plan]:
    return {
        "best": search(MODEL, CLUSTER, WORKLOAD)[0],
        "tp2pp2": search(MODEL, CLUSTER, WORKLOAD, tp=2, pp=2)[0],
        "tp8pp2": search(MODEL, CLUSTER, WORKLOAD, tp=8, pp=2, micro_batch=2)[0],  # pinned: lower TP fits and wins
        "hsdp": search(MODEL, CLUSTER, WORKLOAD, pp=4, zero=3, dp_shard=2)[0],
    }


@pytest.mark.parametrize("name", ["best", "tp2pp2", "hsdp"])
def test_runner_up_is_the_best_alternative(plans: dict[str, Plan], name: str) -> None:
    plan = plans[name]
    report = explain(plan)
    assert report.step_time_s == plan.prediction.step_time_s  # the plan is reproduced before comparing
    by_knob = {k.knob: k for k in report.knobs}
    assert set(by_knob) == set(COLUMN_OF) | {"mesh_axes"}  # no "ep": llama3-8b is dense
    for knob in COLUMN_OF:
        item = by_knob[knob]
        if item.tried == ():  # not applicable (schedule with pp == 1, SP with tp == 1, ...): nothing to compare
            field, bad, why = NOT_APPLICABLE[knob]
            assert item.verdict == why and (bad is None or getattr(plan.layout, field) == bad)
            continue
        best, least = oracle(plan, knob)
        if best is None:
            assert item.runner_up is None, knob
            if least is not None:
                assert item.no_fit is not None and f"needs {least / GiB:.1f} GiB of 79.6 GiB" in item.no_fit, knob
                assert "does not fit" in item.verdict
        else:
            ru = item.runner_up
            assert ru is not None, knob
            assert ru.step_time_s == pytest.approx(best, rel=1e-9), knob
            assert getattr(ru.layout, knob) != getattr(plan.layout, knob)
            for f in PIN_FIELDS:  # everything outside the knob's co-varying set is the plan's
                if f != knob and f not in COVARY[knob]:
                    assert getattr(ru.layout, f) == getattr(plan.layout, f), (knob, f)
            deltas = ru.term_deltas_s
            assert ru.main_term == max(deltas, key=deltas.get)
            assert sum(deltas.values()) == pytest.approx(ru.step_time_s - plan.prediction.step_time_s, abs=1e-9)
            assert ru.delta_pct == pytest.approx(100 * (best / plan.prediction.step_time_s - 1), rel=1e-9)


def test_search_optimum_has_no_faster_neighbour(plans: dict[str, Plan]) -> None:
    report = explain(plans["best"])
    for item in report.knobs:
        if item.runner_up is not None and item.knob != "mesh_axes":  # the search tries 2 of the 120 orders
            assert item.runner_up.delta_pct >= -1e-9, item.knob
            assert "faster" not in item.verdict.split(";")[0]


def test_mesh_order_runner_up_is_the_best_other_order(plans: dict[str, Plan]) -> None:
    plan = plans["tp2pp2"]
    item = next(k for k in explain(plan).knobs if k.knob == "mesh_axes")
    ctx = make_context(MODEL, CLUSTER, WORKLOAD)
    sizes = plan.layout.axis_sizes()
    own = tuple(a for a in plan.layout.mesh_axes if sizes[a] > 1)
    others = [o for o in MESH_ORDERS if tuple(a for a in o if sizes[a] > 1) != own]
    rows = [layout_to_row(plan.layout.model_copy(update={"mesh_axes": o})) for o in others]
    table = {k: np.concatenate([r[k] for r in rows]) for k in COLUMNS}
    res = evaluate_table(ctx, table, AxisBandwidth(ctx.topology))
    assert item.runner_up is not None
    assert item.runner_up.step_time_s == pytest.approx(float(res.step_time_s[res.fits].min()), rel=1e-9)
    assert len(item.tried) == len({tuple(a for a in o if sizes[a] > 1) for o in others})


def test_memory_blocked_neighbour_is_real(plans: dict[str, Plan]) -> None:
    """'zero=1 would be X % faster but does not fit: stage 0 needs A GiB': check A and X by evaluating it."""
    plan = plans["best"]
    assert plan.layout.zero == 2
    item = next(k for k in explain(plan).knobs if k.knob == "zero")
    assert item.blocked_by_memory is not None and item.blocked_by_memory.startswith("zero=1 would be")
    oom = evaluate(MODEL, CLUSTER, WORKLOAD, plan.layout.model_copy(update={"zero": 1}), allow_oom=True)
    assert oom.prediction.step_time_s < plan.prediction.step_time_s
    pct = 100 * (1 - oom.prediction.step_time_s / plan.prediction.step_time_s)
    assert f"{pct:.1f} % faster" in item.blocked_by_memory or f"{pct:.2f} % faster" in item.blocked_by_memory
    assert f"stage 0 needs {oom.prediction.peak_memory_bytes / GiB:.1f} GiB of 79.6 GiB" in item.blocked_by_memory


def test_pinned_plan_says_it_is_not_optimal(plans: dict[str, Plan]) -> None:
    item = next(k for k in explain(plans["tp8pp2"]).knobs if k.knob == "tp")  # TP 8 is pinned: a lower TP wins
    assert item.runner_up is not None and item.runner_up.delta_pct < 0 and int(item.runner_up.value) < 8
    assert item.verdict.startswith(f"TP={item.runner_up.value}") and "faster" in item.verdict


def test_not_applicable_knobs(plans: dict[str, Plan]) -> None:
    by_knob = {k.knob: k for k in explain(plans["best"]).knobs}  # dp16 tp1 pp1
    assert by_knob["schedule"].verdict == "no pipeline (pp = 1)" and by_knob["schedule"].tried == ()
    assert by_knob["sequence_parallel"].verdict == "needs tp > 1"
    assert "does not matter" in by_knob["mesh_axes"].verdict
    # micro_batch > 1 does not fit on this plan: no runner-up, the least-memory alternative is named instead
    assert by_knob["micro_batch"].runner_up is None
    assert by_knob["micro_batch"].verdict.startswith("every other micro_batch does not fit (least memory: micro_batch=2")


def test_explanation_round_trips_and_cli(tmp_path, plans: dict[str, Plan]) -> None:
    src = tmp_path / "plan.json"
    src.write_text(plans["tp2pp2"].model_dump_json())
    result = CliRunner().invoke(app, ["explain", str(src), "--json", "-"], env=ENV)
    assert result.exit_code == 0, result.stderr
    report = Explanation.model_validate_json(result.stdout)
    assert report == explain(plans["tp2pp2"])
    table = CliRunner().invoke(app, ["explain", str(src)], env=ENV)
    assert table.exit_code == 0, table.stderr
    for item in report.knobs:
        assert item.verdict in table.stdout
    assert table.stderr == ""


def test_cli_warns_when_the_stored_prediction_is_stale(tmp_path, plans: dict[str, Plan]) -> None:
    plan = plans["best"]
    stale = plan.model_copy(update={"prediction": plan.prediction.model_copy(update={"step_time_s": 1.0})})
    src = tmp_path / "stale.json"
    src.write_text(stale.model_dump_json())
    result = CliRunner().invoke(app, ["explain", str(src)], env=ENV)
    assert result.exit_code == 0
    assert "warning: the cost model now predicts" in result.stderr


def test_plan_made_without_flash_attention_is_reproduced() -> None:
    plan = search(MODEL, CLUSTER, WORKLOAD, flash_attention=False, tp=2)[0]
    report = explain(plan, knobs=("recompute",))
    assert report.flash_attention is False
    assert report.step_time_s == plan.prediction.step_time_s
    assert [k.knob for k in report.knobs] == ["recompute"]


def test_cli_bad_plan_file(tmp_path) -> None:
    src = tmp_path / "broken.json"
    src.write_text('{"schema_version": 1, "layout": ')
    result = CliRunner().invoke(app, ["explain", str(src)], env=ENV)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "invalid JSON" in result.stderr


def test_covary_sets_name_layout_fields() -> None:
    for knob, fields in COVARY.items():
        assert knob in PIN_FIELDS and set(fields) <= set(PIN_FIELDS)
    assert set(COVARY) | {"mesh_axes", "ep"} >= {"tp", "pp", "dp", "cp", "micro_batch", "schedule", "zero", "recompute"}
