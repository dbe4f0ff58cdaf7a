"""`meshplan evaluate`: exactly the layout asked for, documented defaults, one-line reasons when invalid or OOM."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import hardware_profiles
from planner.api import evaluate, search
from planner.cli.app import app
from planner.cli.main import _register_commands
from planner.layout import Layout, Workload
from planner.model import load_model
from planner.plan import Plan

_register_commands()
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
SMALL = ["--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "2", "--global-batch", "64"]


def run(*args: str):  # noqa: ANN201
    return CliRunner().invoke(app, list(args), env=ENV)


def evaluate_json(*args: str) -> Plan:
    result = run("evaluate", *SMALL, *args, "--json", "-")
    assert result.exit_code == 0, result.stderr
    return Plan.model_validate_json(result.stdout)


def pin_args(lay: Layout) -> list[str]:
    """Every knob of a layout as evaluate options."""
    return ["--dp", str(lay.dp), "--tp", str(lay.tp), "--pp", str(lay.pp), "--cp", str(lay.cp), "--ep", str(lay.ep),
            "--micro-batch", str(lay.micro_batch), "--num-microbatches", str(lay.num_microbatches),
            "--schedule", lay.schedule, "--virtual-stages", str(lay.virtual_stages), "--zero", str(lay.zero),
            "--dp-shard", str(lay.dp_shard), "--recompute", lay.recompute,
            "--sequence-parallel" if lay.sequence_parallel else "--no-sequence-parallel",
            "--mesh-axes", ",".join(lay.mesh_axes)]


@pytest.mark.parametrize("pins", [{}, {"pp": 2, "tp": 2}, {"pp": 4, "schedule": "interleaved"}])
def test_reproduces_the_search_prediction(pins: dict) -> None:
    """Pinning every knob of a searched plan gives back its prediction exactly (same cost model path)."""
    best = search(load_model("llama3-8b"), hardware_profiles.cluster("dgx-h100", nodes=2),
                  Workload(global_batch=64, seq_len=8192), **pins)[0]
    plan = evaluate_json(*pin_args(best.layout))
    assert plan.layout == best.layout
    assert plan.prediction == best.prediction
    assert not plan.proven_optimal  # nothing was searched


def test_matches_the_python_api() -> None:
    lay = Layout(dp=4, tp=2, pp=2, micro_batch=2, num_microbatches=8, schedule="zb-h1", zero=1, dp_shard=4,
                 recompute="full", sequence_parallel=True)
    plan = evaluate_json(*pin_args(lay))
    again = evaluate(load_model("llama3-8b"), hardware_profiles.cluster("dgx-h100", nodes=2),
                     Workload(global_batch=64, seq_len=8192), lay)
    assert plan == again
    assert plan.world_size == 16 and plan.prediction.idle_gpus == 0


def test_documented_defaults() -> None:
    lay = evaluate_json("--tp", "2", "--allow-oom").layout  # (it does not fit; only the layout matters here)
    # dp fills the 16 GPUs, num_microbatches = 64 / (dp * micro_batch); the rest are Layout defaults.
    assert (lay.dp, lay.tp, lay.pp, lay.cp, lay.micro_batch, lay.num_microbatches) == (8, 2, 1, 1, 1, 8)
    assert (lay.schedule, lay.zero, lay.dp_shard, lay.recompute, lay.sequence_parallel) == ("1f1b", 0, 1, "none", False)
    assert lay.mesh_axes == Layout().mesh_axes
    lay = evaluate_json("--tp", "2", "--micro-batch", "2", "--zero", "3", "--allow-oom").layout
    assert (lay.dp, lay.num_microbatches, lay.dp_shard) == (8, 4, 8)  # ZeRO over all of DP unless --dp-shard
    lay = evaluate_json("--tp", "2", "--pp", "2", "--schedule", "interleaved", "--recompute", "full", "--allow-oom").layout
    assert (lay.dp, lay.num_microbatches, lay.virtual_stages) == (4, 16, 2)


def test_tables_on_stdout() -> None:
    result = run("evaluate", *SMALL, "--tp", "4", "--pp", "2", "--recompute", "full")
    assert result.exit_code == 0, result.stderr
    for needle in ("evaluate: llama3-8b on 16 GPUs", "dp2xtp4xpp2 mb1x32 1f1b zero0 rc-full", "step time breakdown",
                   "memory per pipeline stage", "layers per chunk"):
        assert needle in result.stdout, needle
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--tp", "3"], "does not divide the cluster's 16 GPUs"),
        (["--tp", "3", "--dp", "4"], "tp=3: num_heads=32 is not divisible by tp [tp_divides_heads]"),
        (["--dp", "5"], "global batch 64 is not a multiple of dp*micro_batch=5"),
        (["--sequence-parallel"], "sequence_parallel"),
        (["--dp", "4", "--tp", "8"], "exceeds the cluster's 16 GPUs"),
        (["--pp", "2", "--num-microbatches", "1", "--dp", "8", "--micro-batch", "8"], "num_microbatches=1 < pp=2"),
        (["--mesh-axes", "tp,cp,pp"], "--mesh-axes"),
    ],
)
def test_invalid_layout_is_one_line_exit_2(args: list[str], needle: str) -> None:
    result = run("evaluate", *SMALL, *args)
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert needle in result.stderr


def test_out_of_memory_names_stage_and_fix() -> None:
    args = ["evaluate", "--model", "llama3-70b", "--cluster", "dgx-h100", "--nodes", "1", "--global-batch", "8",
            "--tp", "8"]
    result = run(*args)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "does not fit: pipeline stage 0 needs" in result.stderr and "GiB over" in result.stderr
    assert "fix:" in result.stderr
    allowed = run(*args, "--allow-oom")
    assert allowed.exit_code == 0, allowed.stderr
    assert "does not fit" in allowed.stderr
    assert " NO" in allowed.stdout


def test_search_limits_are_ignored_with_a_warning() -> None:
    result = run("evaluate", *SMALL, "--tp", "2", "--recompute", "full", "--max-tp", "4")
    assert result.exit_code == 0
    assert "--max-tp only bound the search" in result.stderr
