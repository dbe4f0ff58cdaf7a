"""Plan JSON: the committed JSON Schema is current, plans round-trip exactly, `meshplan schema` prints it."""

from __future__ import annotations

import json

import jsonschema
import pytest
from typer.testing import CliRunner

import hardware_profiles
from planner.api import search
from planner.cli.app import app
from planner.cli.main import _register_commands
from planner.cli.schema import SCHEMA_FILE, schema_text
from planner.errors import UserError
from planner.layout import Workload
from planner.model import load_model
from planner.plan import SCHEMA_VERSION, Plan

_register_commands()


@pytest.fixture(scope="module")
def plans() -> list[Plan]:
    """Plans with a pipeline (per-stage memory, partition), HSDP and MoE, from the search."""
    dense = search(load_model("llama3-8b"), hardware_profiles.cluster("dgx-h100", nodes=2),
                   Workload(global_batch=64, seq_len=8192), top=2, pp=2, schedule="interleaved")
    hsdp = search(load_model("llama3-8b"), hardware_profiles.cluster("dgx-h100", nodes=2),
                  Workload(global_batch=64, seq_len=8192), zero=3, dp_shard=4)
    moe = search(load_model("tiny-moe"), hardware_profiles.cluster("local-cpu", gpus=4),
                 Workload(global_batch=8, seq_len=32))
    return [*dense, *hsdp, *moe]


def test_committed_schema_is_current() -> None:
    """Fails when Plan (or anything it embeds) changes without regenerating the committed schema:
    meshplan schema --out planner/schemas/plan.schema.json --force"""
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text()
    assert json.loads(SCHEMA_FILE.read_text(encoding="utf-8")) == Plan.model_json_schema()


def test_round_trip_is_exact(plans: list[Plan]) -> None:
    for p in plans:
        assert Plan.model_validate_json(p.model_dump_json()) == p
        assert Plan.model_validate_json(p.to_json()) == p
        assert p.schema_version == SCHEMA_VERSION


def test_plans_validate_against_the_schema(plans: list[Plan]) -> None:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    for p in plans:
        jsonschema.validate(json.loads(p.model_dump_json()), schema)
    broken = json.loads(plans[0].model_dump_json())
    broken["layout"]["surprise"] = 1  # extra="forbid" is in the schema too
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_cli_schema(tmp_path) -> None:
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0
    assert result.stdout == schema_text()
    target = tmp_path / "s.json"
    assert CliRunner().invoke(app, ["schema", "--out", str(target)]).exit_code == 0
    assert target.read_text() == schema_text()
    assert CliRunner().invoke(app, ["schema", "--out", str(target)]).exit_code == 2
    assert CliRunner().invoke(app, ["schema", "--json", "-"]).stdout == schema_text()


def test_load_rejects_bad_files_in_one_line(tmp_path, plans: list[Plan]) -> None:
    good = json.loads(plans[0].model_dump_json())
    cases = {
        "truncated": plans[0].model_dump_json()[:-20],
        "newer": json.dumps({**good, "schema_version": SCHEMA_VERSION + 1}),
        "bad field": json.dumps({**good, "layout": {**good["layout"], "tp": 0}}),
    }
    for name, text in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_text(text)
        with pytest.raises(UserError) as info:
            Plan.load(path)
        message = str(info.value)
        assert str(path) in message and "\n" not in message, name
    assert "layout.tp" in str(pytest.raises(UserError, Plan.load, tmp_path / "bad field.json").value)
