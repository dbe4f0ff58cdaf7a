"""`planner.sweep` and `meshplan sweep`: every row is the point's own `planner.search` answer, rows where
nothing fits say why, the budget and price columns follow from the plan, outputs are one document each.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from typer.testing import CliRunner

import hardware_profiles
import planner
from planner.api import search
from planner.cli.app import app
from planner.cli.main import _register_commands
from planner.errors import UserError
from planner.layout import Workload
from planner.model import load_model
from planner.sweep import COLUMNS
from tests.unit.cli_inputs import check_refusal, invoke

_register_commands()
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
SMALL = ["--model", "llama3-8b", "--cluster", "dgx-h100", "--global-batch", "64", "--seq-len", "4096"]


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return planner.sweep(["llama3-8b", "llama3-70b"], ["dgx-h100", "dgx-a100"], nodes=[1, 2], global_batch=64,
                         seq_len=4096, tokens=1e12, price_per_gpu_hour=2.0)


def test_every_row_is_the_points_own_search(frame: pd.DataFrame) -> None:
    assert list(frame.columns) == list(COLUMNS) and len(frame) == 8
    assert list(frame["model"]) == ["llama3-8b"] * 4 + ["llama3-70b"] * 4  # input order, models outermost
    for row in frame.itertuples():
        cluster = hardware_profiles.cluster(row.cluster, nodes=int(row.nodes))
        workload = Workload(global_batch=64, seq_len=4096)
        try:
            best = search(load_model(row.model), cluster, workload)[0]
        except UserError:
            assert row.status != "ok" and row.layout == "" and math.isnan(row.step_time_s)
            continue
        assert row.status == "ok"
        assert row.layout == best.layout.describe()
        assert row.step_time_s == best.prediction.step_time_s
        assert row.tokens_per_s == best.prediction.tokens_per_s
        assert row.mfu == best.prediction.mfu
        assert row.peak_memory_gib == best.prediction.peak_memory_bytes / 2**30
        assert row.gpus == cluster.num_gpus and row.gpus_used == best.layout.world_size


def test_rows_where_nothing_fits_say_why(frame: pd.DataFrame) -> None:
    small = frame[(frame["model"] == "llama3-70b") & (frame["nodes"] == 1)]
    assert len(small) == 2
    for status in small["status"]:
        assert status.startswith("too few GPUs: model states") and "GiB" in status and len(status) < 60


def test_budget_and_price_columns(frame: pd.DataFrame) -> None:
    ok = frame[frame["status"] == "ok"]
    assert len(ok) >= 5
    for row in ok.itertuples():
        assert row.train_time_s == pytest.approx(1e12 / row.tokens_per_s, rel=1e-12)
        assert row.gpu_hours == pytest.approx(row.gpus * row.train_time_s / 3600, rel=1e-12)
        assert row.cost == pytest.approx(row.gpu_hours * 2.0, rel=1e-12)
        assert row.cost_per_million_tokens == pytest.approx(row.cost / 1e6, rel=1e-12)  # 1e12 tokens


def test_without_budget_or_price_those_columns_are_empty() -> None:
    df = planner.sweep("llama3-8b", "dgx-h100", nodes=1, global_batch=32, seq_len=4096)
    assert df.loc[0, "status"] == "ok"
    assert df[["tokens", "train_time_s", "gpu_hours", "cost", "cost_per_million_tokens"]].isna().all().all()


def test_combinations_that_do_not_go_together_become_rows() -> None:
    df = planner.sweep("llama3-8b", "dgx-h100", gpus=[8, 9], global_batch=32, seq_len=[4096, 16384])
    assert len(df) == 4
    status = dict(zip(zip(df["gpus"], df["seq_len"]), df["status"]))
    assert status[(8, 4096)] == "ok"
    assert "max_seq_len" in status[(8, 16384)]
    assert all("does not fill" in s for (g, _), s in status.items() if g == 9)


def test_pins_apply_to_every_point() -> None:
    df = planner.sweep("llama3-8b", "dgx-h100", nodes=[1, 2], global_batch=32, seq_len=4096, tp=2)
    assert (df["tp"] == 2).all()


@pytest.mark.parametrize("kwargs", [dict(tokens=0), dict(price_per_gpu_hour=-1.0), dict(nodes=1, gpus=8),
                                    dict(nodes=[])])
def test_bad_arguments_raise_user_errors(kwargs) -> None:
    with pytest.raises(UserError):
        planner.sweep("llama3-8b", "dgx-h100", **({"global_batch": 32, "seq_len": 4096} | kwargs))


# ---- CLI ---------------------------------------------------------------------------------------------------
def test_cli_table_and_json_document() -> None:
    result = CliRunner().invoke(app, ["sweep", *SMALL, "--nodes", "1,2", "--tokens", "1e12", "--json", "-"], env=ENV)
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)  # one document, nothing else on stdout
    assert set(doc) == {"tokens", "price_per_gpu_hour", "columns", "rows"}
    assert doc["tokens"] == 1e12 and doc["price_per_gpu_hour"] is None and doc["columns"] == list(COLUMNS)
    assert [r["nodes"] for r in doc["rows"]] == [1, 2]
    expected = planner.sweep("llama3-8b", "dgx-h100", nodes=[1, 2], global_batch=64, seq_len=4096, tokens=1e12)
    for got, want in zip(doc["rows"], expected.itertuples()):
        assert got["layout"] == want.layout and got["step_time_s"] == want.step_time_s
        assert got["cost"] is None  # NaN written as null

    table = CliRunner().invoke(app, ["sweep", *SMALL, "--nodes", "1,2"], env=ENV)
    assert table.exit_code == 0, table.stderr
    for row in expected.itertuples():
        assert row.layout in table.stdout and f"{row.tokens_per_s:,.0f}" in table.stdout
    assert "model llama3-8b" in table.stdout  # constant inputs go to the title


def test_cli_csv_and_figures(tmp_path) -> None:
    csv_path, figs = tmp_path / "s.csv", tmp_path / "figs"
    code, out, err = invoke(["sweep", *SMALL, "--cluster", "dgx-h100,dgx-a100", "--nodes", "1,2",
                             "--price-per-gpu-hour", "3", "--csv", csv_path, "--figures", figs])
    assert code == 0, err
    df = pd.read_csv(csv_path)
    assert list(df.columns) == list(COLUMNS) and len(df) == 4 and (df["status"] == "ok").all()
    assert (figs / "sweep_scaling.png").read_bytes().startswith(b"\x89PNG")
    assert b"<svg" in (figs / "sweep_scaling.svg").read_bytes()
    code, _, err = invoke(["sweep", *SMALL, "--nodes", "1", "--csv", csv_path])  # never overwritten silently
    assert code == 2 and "file exists" in check_refusal(code, err)


def test_scaling_figure_draws_one_line_per_cluster() -> None:
    from planner.figures.scaling import draw_scaling

    df = planner.sweep("llama3-8b", ["dgx-h100", "dgx-a100"], nodes=[1, 2, 4], global_batch=64, seq_len=4096,
                       price_per_gpu_hour=2.0)
    _, data = draw_scaling(df)
    assert data["priced"] and set(data["lines"]) == {"dgx-h100", "dgx-a100"}
    for name, line in data["lines"].items():
        rows = df[df["cluster"] == name].sort_values("gpus")
        assert line["gpus"] == rows["gpus"].tolist() and line["tokens_per_s"] == rows["tokens_per_s"].tolist()
        assert line["per_million_tokens"] == rows["cost_per_million_tokens"].tolist()


@pytest.mark.parametrize("args,flag", [
    (["--nodes", "8,x"], "--nodes"),
    (["--nodes", "8,0"], "--nodes"),
    (["--gpus", "8,,16"], "--gpus"),
    (["--seq-len", "4096;8192"], "--seq-len"),
    (["--global-batch-tokens", "-4"], "--global-batch-tokens"),
    (["--model", "llama3-8b,"], "--model"),
    (["--cluster", "dgx-h100,no-such-cluster"], "--cluster"),
    (["--model", "llama3-8b,no-such-model"], "--model"),
    (["--tokens", "0"], "--tokens"),
    (["--price-per-gpu-hour", "-2"], "--price-per-gpu-hour"),
    (["--nodes", "2", "--gpus", "16"], "--gpus"),
])
def test_cli_bad_list_values_are_one_line_errors_naming_the_flag(args: list[str], flag: str) -> None:
    code, out, err = invoke(["sweep", *args])
    line = check_refusal(code, err)
    assert flag in line and out == ""
