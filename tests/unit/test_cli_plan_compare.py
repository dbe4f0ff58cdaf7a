"""`meshplan compare`: plan files, --layout strings and a search's top K side by side; CSV and JSON rows."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

import hardware_profiles
from planner.api import evaluate, search
from planner.cli.app import app
from planner.cli.main import _register_commands
from planner.cli.options import Inputs, parse_layout_string
from planner.errors import UserError
from planner.layout import Layout, Workload
from planner.model import load_model
from planner.plan import Plan

_register_commands()
ENV = {"COLUMNS": "250", "NO_COLOR": "1"}
SMALL = ["--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "2", "--global-batch", "64"]
COLUMNS = ["source", "layout", "searched", "gpus", "compute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s",
           "dp_comm_s", "bubble_s", "optimizer_s", "step_time_s", "tokens_per_s", "mfu", "peak_memory_gib", "fits",
           "error_band_low", "error_band_high", "extrapolations"]


def run(*args: str):  # noqa: ANN201
    return CliRunner().invoke(app, list(args), env=ENV)


@pytest.fixture(scope="module")
def inputs() -> Inputs:
    return Inputs(model=load_model("llama3-8b"), cluster=hardware_profiles.cluster("dgx-h100", nodes=2),
                  workload=Workload(global_batch=64, seq_len=8192))


def _check_row(row: dict, plan) -> None:  # noqa: ANN001
    pred = plan.prediction
    assert row["layout"] == plan.layout.describe()
    assert row["step_time_s"] == pytest.approx(pred.step_time_s, rel=1e-12)
    assert row["tp_comm_s"] == pytest.approx(pred.breakdown.tp_comm_s, rel=1e-12, abs=1e-15)
    assert row["compute_s"] == pytest.approx(pred.breakdown.compute_s, rel=1e-12)
    assert row["tokens_per_s"] == pytest.approx(pred.tokens_per_s, rel=1e-12)
    assert row["mfu"] == pytest.approx(pred.mfu, rel=1e-12)
    assert row["peak_memory_gib"] == pytest.approx(pred.peak_memory_bytes / 2**30, rel=1e-12)
    assert bool(row["fits"]) == all(s.fits for s in pred.memory_per_stage)


def test_files_layouts_and_search_in_one_table(tmp_path, inputs: Inputs) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    lay_a = Layout(dp=8, tp=2, num_microbatches=8, zero=1, dp_shard=8, recompute="full", sequence_parallel=True)
    plan_a = evaluate(inputs.model, inputs.cluster, inputs.workload, lay_a)
    a.write_text(plan_a.model_dump_json())
    assert run("evaluate", *SMALL, "--tp", "4", "--pp", "2", "--recompute", "full", "--json", str(b)).exit_code == 0
    csv = tmp_path / "cmp.csv"
    result = run("compare", str(a), str(b), *SMALL, "--layout", "tp=8,pp=2,mb=1,rc=full,sp=1",
                 "--layout", "dp=16,zero=0", "--top", "2", "--csv", str(csv))
    assert result.exit_code == 0, result.stderr
    frame = pd.read_csv(csv)
    assert list(frame.columns) == COLUMNS
    assert list(frame["source"]) == [str(a), str(b), "--layout 1", "--layout 2", "search #1", "search #2"]
    rows = frame.to_dict(orient="records")
    _check_row(rows[0], plan_a)
    assert rows[0]["searched"] == "-"  # a plan file is shown as stored
    # --layout 1: the stated knobs held, the others searched (the best plan so constrained).
    (best_1,) = search(inputs.model, inputs.cluster, inputs.workload, tp=8, pp=2, micro_batch=1, recompute="full",
                       sequence_parallel=True)
    _check_row(rows[2], best_1)
    assert rows[2]["searched"] == "dp,cp,ep,m,schedule,v,zero,dp_shard,mesh"
    # --layout 2: dp=16 with ZeRO-0 fits with no setting of the rest: the defaults, listed as not fitting.
    oom = evaluate(inputs.model, inputs.cluster, inputs.workload, Layout(dp=16, num_microbatches=4), allow_oom=True)
    _check_row(rows[3], oom)
    assert not rows[3]["fits"] and rows[3]["searched"] == "none fits: defaults"  # listed, not an error
    for row, plan in zip(rows[4:], search(inputs.model, inputs.cluster, inputs.workload, top=2)):
        _check_row(row, plan)
        assert row["searched"] == "dp,tp,pp,cp,ep,mb,m,schedule,v,zero,dp_shard,rc,sp,mesh"
    assert "some layouts do not fit" in result.stderr
    for needle in ("comparison", "search #2", "--layout 2", "NO"):
        assert needle in result.stdout


def test_json_rows_equal_csv_rows(tmp_path) -> None:
    result = run("compare", *SMALL, "--top", "3", "--json", "-")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["source"] for r in rows] == ["search #1", "search #2", "search #3"]
    assert list(rows[0]) == COLUMNS
    csv = run("compare", *SMALL, "--top", "3", "--csv", "-")
    frame = pd.read_csv(pd.io.common.StringIO(csv.stdout))
    assert frame["step_time_s"].tolist() == pytest.approx([r["step_time_s"] for r in rows], rel=1e-12)
    assert rows[0]["step_time_s"] <= rows[1]["step_time_s"] <= rows[2]["step_time_s"]


def test_layouts_use_the_first_plan_files_inputs(tmp_path) -> None:
    src = tmp_path / "p.json"
    assert run("plan", *SMALL, "--json", str(src)).exit_code == 0
    result = run("compare", str(src), "--layout", "tp=4,zero=1,rc=full", "--json", "-")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["gpus"] for r in rows] == [16, 16]
    plan = Plan.load(src)
    (best,) = search(plan.inputs.model, hardware_profiles.Cluster.model_validate(plan.inputs.cluster),
                     plan.inputs.workload, tp=4, zero=1, recompute="full")
    assert rows[1]["layout"] == best.layout.describe() and "tp4" in rows[1]["layout"]


def test_unstated_knobs_are_searched_not_defaulted() -> None:
    """`--layout dp=16` with the old defaults (ZeRO-0, no recompute) needed 166 GiB per GPU: "does not fit".
    The best ZeRO/recompute/micro-batch setting for dp=16 fits, and the table says those knobs were searched."""
    result = run("compare", *SMALL, "--layout", "dp=16", "--json", "-")
    assert result.exit_code == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert row["fits"] and row["layout"].startswith("dp16xtp1xpp1")
    assert "zero" in row["searched"].split(",") and "dp" not in row["searched"].split(",")
    table = run("compare", *SMALL, "--layout", "dp=16").stdout
    assert "searched" in table and "zero" in table


def test_parse_layout_string_aliases_and_errors() -> None:
    assert parse_layout_string("dp=8, tp=8,pp=2,mb=2,m=4,v=2,schedule=interleaved,zero=3,dp-shard=4,"
                               "rc=selective,sp=on,mesh=dp_replicate/dp_shard/pp/cp/tp") == {
        "dp": 8, "tp": 8, "pp": 2, "micro_batch": 2, "num_microbatches": 4, "virtual_stages": 2,
        "schedule": "interleaved", "zero": 3, "dp_shard": 4, "recompute": "selective", "sequence_parallel": True,
        "mesh_axes": ("dp_replicate", "dp_shard", "pp", "cp", "tp"),
    }
    for bad, needle in (("tp8", "key=value"), ("foo=1", "unknown key"), ("tp=x", "not an integer"),
                        ("sp=maybe", "not a boolean"), ("tp=2,tp=4", "given twice"), ("mesh=pp/tp", "mesh axes")):
        with pytest.raises(UserError, match=needle):
            parse_layout_string(bad)


def test_bad_inputs_exit_2(tmp_path) -> None:
    result = run("compare", *SMALL, "--layout", "tp=3")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    missing = run("compare", str(tmp_path / "none.json"))
    assert missing.exit_code == 2 and "cannot read plan" in missing.stderr


def test_mfu_is_a_percentage_in_the_table_and_a_fraction_in_json() -> None:
    """`plan` showed 40.2 % while `compare` showed 0.402: every human-readable output uses the percentage."""
    tiny = ["--model", "tiny", "--cluster", "local-cpu", "--gpus", "4", "--seq-len", "64", "--global-batch", "8",
            "--top", "1"]
    rows = json.loads(run("compare", *tiny, "--json", "-").stdout)
    table = run("compare", *tiny).stdout
    assert "MFU %" in table and f"{100 * rows[0]['mfu']:.1f}" in table, table
    assert 0 < rows[0]["mfu"] < 1  # JSON (and CSV) keep the plan file's fraction
    plan = run("plan", *tiny).stdout
    assert f"{100 * rows[0]['mfu']:.1f} %" in plan
