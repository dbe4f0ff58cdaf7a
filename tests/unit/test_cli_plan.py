"""`meshplan plan`: the CLI gives the Python API's answer, tables on stdout, one JSON document, one-line errors."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

import hardware_profiles
from planner.api import search
from planner.cli.app import app
from planner.cli.main import _register_commands, _user_error_message
from planner.layout import Workload
from planner.model import load_model
from planner.plan import Plan

_register_commands()
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
SMALL = ["--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "2", "--global-batch", "64"]


def run(*args: str):  # noqa: ANN201
    return CliRunner().invoke(app, list(args), env=ENV)


@pytest.fixture(scope="module")
def small_best() -> list[Plan]:
    """The Python API's top 3 for SMALL (llama3-8b, 2 x DGX H100, 64 x 8192 tokens)."""
    return search(load_model("llama3-8b"), hardware_profiles.cluster("dgx-h100", nodes=2),
                  Workload(global_batch=64, seq_len=8192), top=3)


def test_json_stdout_is_the_python_api_plan(small_best: list[Plan]) -> None:
    result = run("plan", *SMALL, "--json", "-")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    plan = Plan.model_validate_json(result.stdout)  # exactly one JSON document, nothing else on stdout
    assert plan == small_best[0]
    assert plan.proven_optimal


def test_tables(small_best: list[Plan]) -> None:
    result = run("plan", *SMALL, "--top", "3")
    assert result.exit_code == 0, result.stderr
    text = result.stdout
    best = small_best[0]
    pred = best.prediction
    for needle in ("plan: llama3-8b on 16 x h100-sxm", best.layout.describe(), "step time breakdown",
                   "memory per pipeline stage", "layouts evaluated", "proven optimal", "top 3",
                   f"{pred.tokens_per_s:,.0f}", f"{pred.mfu * 100:.1f} %", f"{pred.step_time_s:.4g} s"):
        assert needle in text, needle
    for p in small_best:
        assert p.layout.describe() in text
    # Breakdown rows: seconds and % of step for each term, adding up to the step time.
    shares = {}
    for field, label in (("compute_s", "compute (fwd + bwd + recompute)"), ("tp_comm_s", "TP communication"),
                         ("dp_comm_s", "DP/FSDP communication"), ("bubble_s", "pipeline bubble"),
                         ("optimizer_s", "optimizer step")):
        m = re.search(re.escape(label) + r"[^\n]*?\s([0-9.e+-]+)\s+([0-9.]+)\s*\n", text)
        assert m, label
        value = getattr(pred.breakdown, field)
        assert m.group(1) == f"{value:.4g}"
        shares[field] = float(m.group(2))
        assert shares[field] == pytest.approx(100 * value / pred.step_time_s, abs=0.051)
    assert re.search(r"total\s+" + re.escape(f"{pred.step_time_s:.4g}") + r"\s+100\.0", text)
    # Memory: stage 0's total against the capacity in the title.
    s0 = pred.memory_per_stage[0]
    assert f"(capacity {s0.capacity_bytes / 2**30:.1f} GiB)" in text
    assert f"{s0.total_bytes / 2**30:.1f}" in text


def test_pins_are_layout_fields() -> None:
    result = run("plan", *SMALL, "--tp", "2", "--pp", "2", "--recompute", "full", "--schedule", "1f1b",
                 "--mesh-axes", "dp_replicate,dp_shard,pp,cp,tp", "--json", "-")
    assert result.exit_code == 0, result.stderr
    lay = Plan.model_validate_json(result.stdout).layout
    assert (lay.tp, lay.pp, lay.recompute, lay.schedule) == (2, 2, "full", "1f1b")
    assert lay.mesh_axes == ("dp_replicate", "dp_shard", "pp", "cp", "tp")
    assert lay.sequence_parallel  # not pinned: the search always takes SP with tp > 1


def test_grad_reduce_dtype_is_a_workload_flag() -> None:
    """--grad-reduce-dtype bf16 reaches the plan's workload (the API's Workload field) and halves the gradient
    bytes the DP term moves, so the same pinned layout predicts less DP time; it is never searched."""
    pinned = ["--dp", "16", "--zero", "3", "--dp-shard", "16", "--no-dp-overlap", "--json", "-"]
    fp32, bf16 = (run("plan", *SMALL, *pinned, *extra) for extra in ([], ["--grad-reduce-dtype", "bf16"]))
    assert fp32.exit_code == 0 and bf16.exit_code == 0, bf16.stderr
    p32, p16 = Plan.model_validate_json(fp32.stdout), Plan.model_validate_json(bf16.stdout)
    assert (p32.inputs.workload.grad_reduce_dtype, p16.inputs.workload.grad_reduce_dtype) == ("fp32", "bf16")
    assert p16.prediction.breakdown.dp_comm_s < p32.prediction.breakdown.dp_comm_s
    bad = run("plan", *SMALL, "--grad-reduce-dtype", "fp16")
    assert bad.exit_code == 2 and "--grad-reduce-dtype" in bad.stderr


def test_json_file_refuses_overwrite_without_force(tmp_path) -> None:
    target = tmp_path / "plan.json"
    tiny = ["--model", "tiny", "--cluster", "local-cpu", "--gpus", "4", "--seq-len", "64", "--global-batch", "8"]
    first = run("plan", *tiny, "--json", str(target))
    assert first.exit_code == 0, first.stderr
    assert f"wrote {target}" in first.stderr
    assert "step time breakdown" in first.stdout  # tables still go to stdout when the JSON goes to a file
    plan = Plan.load(target)
    assert plan.world_size <= 4 and plan.inputs.model.name == "tiny"
    again = run("plan", *tiny, "--json", str(target))
    assert again.exit_code == 2
    assert again.stderr.count("\n") == 1 and "file exists" in again.stderr and "--force" in again.stderr
    forced = run("plan", *tiny, "--json", str(target), "--force")
    assert forced.exit_code == 0, forced.stderr
    assert Plan.load(target) == plan


def test_no_arguments_plans_the_builtin_example() -> None:
    result = run("plan", "--top", "1", "--json", "-")
    assert result.exit_code == 0, result.stderr
    plan = Plan.model_validate_json(result.stdout)
    w = plan.inputs.workload
    assert plan.inputs.model.name == "llama3-70b"
    assert (w.batch, w.seq_len, w.tokens_per_step) == (512, 8192, 4_194_304)
    assert plan.world_size + plan.prediction.idle_gpus == 64
    tables = run("plan")
    assert tables.exit_code == 0, tables.stderr
    assert "plan: llama3-70b on 64 x h100-sxm" in tables.stdout
    assert plan.layout.describe() in tables.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "no-such-model"], "unknown model 'no-such-model'"),
        (["--cluster", "no-such-cluster"], "no-such-cluster"),
        (["--nodes", "2", "--gpus", "8"], "--nodes or --gpus"),
        (["--model", "llama3-8b", "--global-batch-tokens", "1000"], "not a multiple of seq_len"),
        (["--model", "tiny", "--cluster", "local-cpu", "--gpus", "2", "--seq-len", "128"], "max_seq_len=64"),
        (["--model", "llama3-8b", "--nodes", "2", "--mesh-axes", "tp,pp"], "--mesh-axes"),
        (["--model", "llama3-70b", "--nodes", "1", "--global-batch", "8"], "fits nowhere on 8 x h100-sxm: its model states alone"),
        (["--model", "llama3-70b", "--nodes", "2", "--global-batch", "16", "--recompute", "none"], "GiB over the"),
        (["--model", "llama3-8b", "--nodes", "2", "--global-batch", "64", "--tp", "3"], "no valid layout"),
    ],
)
def test_user_errors_are_one_line_exit_2(args: list[str], needle: str) -> None:
    result = run("plan", *args)
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert needle in result.stderr


def test_usage_error_exit_2() -> None:
    result = run("plan", "--schedule", "bogus")
    assert result.exit_code == 2
    assert "bogus" in result.stderr


def test_main_treats_profile_and_validation_errors_as_user_errors() -> None:
    from pydantic import ValidationError

    assert _user_error_message(hardware_profiles.ProfileError("bad", where="x.yaml")) == "x.yaml: bad"
    with pytest.raises(ValidationError) as info:
        Workload(seq_len=0)
    message = _user_error_message(info.value)
    assert message is not None and "seq_len" in message and "\n" not in message
    assert _user_error_message(RuntimeError("bug")) is None
