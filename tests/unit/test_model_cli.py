"""`meshplan model`: exit codes, stdout/stderr split, --json document.

The command is mounted on a local typer group: while the shared `app` has a single command and no
callback, typer runs it as the root command (`meshplan NAME` instead of `meshplan model NAME`).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from planner.cli.model import model_command
from planner.model import from_hf_config, preset

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def _cli() -> typer.Typer:
    group = typer.Typer(add_completion=False)

    @group.callback()
    def _root() -> None:
        """meshplan (test group)."""

    group.command("model")(model_command)
    return group


def _run(*args: str):  # noqa: ANN202
    return CliRunner().invoke(_cli(), ["model", *args], env=ENV)


def test_table_output() -> None:
    result = _run("llama3-8b")
    assert result.exit_code == 0, result.stderr
    assert "8,030,261,248 (8.03 B)" in result.stdout
    assert "FLOP per token at seq_len 8192" in result.stdout
    fwd = preset("llama3-8b").forward_flops_per_token(8192)
    assert f"{fwd:,}" in result.stdout
    assert result.stderr == ""


def test_json_to_stdout_is_one_document() -> None:
    result = _run("tiny-moe", "--json", "-", "--seq-len", "32")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    spec = preset("tiny-moe")
    assert doc["spec"] == json.loads(spec.model_dump_json())
    assert doc["seq_len"] == 32
    assert doc["params"]["total"] == spec.num_params() == 575_040
    assert doc["params"]["active"] == spec.num_active_params()
    assert doc["params"]["routed_experts"] == 4 * 4 * 3 * 64 * 128
    sel = spec.training_flops_per_token(32, "selective")
    assert doc["flops_causal"]["training"]["selective"] == {
        "model_flops": sel.model_flops,
        "hardware_flops": sel.hardware_flops,
    }
    full = spec.training_flops_per_token(32, "full", causal=False)
    assert doc["flops_full_attention"]["training"]["full"]["hardware_flops"] == full.hardware_flops


def test_json_file_and_hf_path(tmp_path: Path) -> None:
    target = tmp_path / "m.json"
    result = _run(str(FIXTURES / "gpt2.json"), "--json", str(target))
    assert result.exit_code == 0, result.stderr
    assert f"wrote {target}" in result.stderr
    assert "124,439,808" in result.stdout
    doc = json.loads(target.read_text())
    assert doc["params"]["total"] == from_hf_config(FIXTURES / "gpt2.json").num_params()
    again = _run("gpt2", "--json", str(target))  # not a preset name, so also not a file: exit 2
    assert again.exit_code == 2
    exists = _run(str(FIXTURES / "gpt2.json"), "--json", str(target))
    assert exists.exit_code == 2 and "file exists" in exists.stderr
    assert _run(str(FIXTURES / "gpt2.json"), "--json", str(target), "--force").exit_code == 0


def test_unknown_name_exits_2_with_preset_list() -> None:
    result = _run("llama9")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("error: unknown model 'llama9'")
    assert "llama3-8b" in result.stderr and "tiny-moe" in result.stderr


def test_bad_seq_len_exits_2() -> None:
    result = _run("gpt3-175b", "--seq-len", "4096")
    assert result.exit_code == 2
    assert "seq_len=4096 exceeds max_seq_len=2048" in result.stderr
    assert _run("tiny", "--seq-len", "0").exit_code == 2  # typer's min=1: a usage error
