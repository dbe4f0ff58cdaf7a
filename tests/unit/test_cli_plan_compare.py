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
from planner.cli.options import Inputs, layout_from_pins, parse_layout_string
from planner.errors import UserError
from planner.layout import Layout, Workload
from planner.model import load_model

_register_commands()
ENV = {"COLUMNS": "250", "NO_COLOR": "1"}
SMALL = ["--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "2", "--global-batch", "64"]
COLUMNS = ["source", "layout", "gpus", "compute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s", "dp_comm_s",
           "bubble_s", "optimizer_s", "step_time_s", "tokens_per_s", "mfu", "peak_memory_gib", "fits", "error_band_low",
           "error_band_high", "extrapolations"]


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
    lay_1 = layout_from_pins(parse_layout_string("tp=8,pp=2,mb=1,rc=full,sp=1"), inputs)
    assert (lay_1.dp, lay_1.num_microbatches) == (1, 64)
    _check_row(rows[2], evaluate(inputs.model, inputs.cluster, inputs.workload, lay_1))
    oom = evaluate(inputs.model, inputs.cluster, inputs.workload, Layout(dp=16, num_microbatches=4), allow_oom=True)
    _check_row(rows[3], oom)
    assert not rows[3]["fits"]  # listed, not an error
    for row, plan in zip(rows[4:], search(inputs.model, inputs.cluster, inputs.workload, top=2)):
        _check_row(row, plan)
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
    assert rows[1]["layout"] == "dp4xtp4xpp1 mb1x16 zero1 rc-full"


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
