"""Every JSON/YAML input is read by one bounded reader (`hardware_profiles.reader`), and a plan's numbers are
bounded by its schema.

- Nesting depth: 100,000 `[` then `]` (JSON) or nested flow lists (YAML) is one line, exit 2, in every
  command that reads a file (it was a RecursionError traceback).
- Size: a file larger than the bound, or an endless device (/dev/zero), is refused without reading it all.
- YAML alias bombs are refused instead of expanded.
- Plan files: NaN / Infinity (which Python's json accepts), negative times, MFU above 1 are refused on load,
  so `show`, `replan`, `export` never print "predicted -3 s/step ... MFU 500.0 %".
- One reader: no other module of planner/, hardware_profiles/ or executor/ calls json.load(s),
  yaml.safe_load or model_validate_json (an AST scan).
- An HF config.json without `model_type` is named as such (it was answered with meshplan's own fields).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from cli_inputs import check_refusal, hf_data, invoke, tiny_plan_data, write

from hardware_profiles import reader

ROOT = Path(__file__).resolve().parents[2]
DEEP_JSON = "[" * 100_000 + "]" * 100_000
DEEP_YAML = "name: " + "[" * 5000 + "]" * 5000 + "\n"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
    for i in range(8))
"""A billion-laughs document: 10**9 strings once the aliases are expanded, a few hundred bytes as text."""


@pytest.mark.parametrize("args", [
    ["explain", "deep.json"], ["show", "deep.json", "--figures", "figs"], ["export", "deep.json", "--to", "torchrun"],
    ["replan", "deep.json", "--gpus", "2"], ["compare", "deep.json"], ["model", "deep.json"],
    ["topology", "deep.yaml"], ["model", "deep.yaml"], ["plan", "--cluster", "deep.yaml"],
    ["plan", "--model", "deep.yaml"], ["topology", "bomb.yaml"], ["model", "bomb.yaml"],
])
def test_deeply_nested_inputs_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "deep.json", DEEP_JSON)
    write(tmp_path / "deep.yaml", DEEP_YAML)
    write(tmp_path / "bomb.yaml", BOMB)
    line = check_refusal(*invoke(args)[::2])
    name = next(a for a in args if a.startswith(("deep", "bomb")))
    assert name in line, line
    assert "nested deeper than 64 levels" in line or "more than" in line, line


def test_reader_bounds_size_depth_and_values(tmp_path: Path) -> None:
    big = write(tmp_path / "big.yaml", "x: 1\n" * 20)
    with pytest.raises(reader.InputFileError, match="larger than"):
        reader.read_yaml(big, max_bytes=50)
    with pytest.raises(reader.InputFileError, match="more than 1,000 bytes"):
        reader.read_text("/dev/zero", max_bytes=1000)  # an endless device is read up to the bound only
    assert reader.parse_json("[" * 64 + "]" * 64, where="x") is not None  # exactly the bound
    with pytest.raises(reader.InputFileError, match="nested deeper"):
        reader.parse_json("[" * 65 + "]" * 65, where="x")
    with pytest.raises(reader.InputFileError, match="alias bomb"):
        reader.parse_yaml(BOMB, where="bomb.yaml")
    for text in ("NaN", '{"a": Infinity}', "[-Infinity]"):
        with pytest.raises(reader.InputFileError, match="JSON has no NaN or Infinity"):
            reader.parse_json(text, where="x")
    with pytest.raises(reader.InputFileError, match="is a folder"):
        reader.read_text(tmp_path)


def test_an_oversized_plan_is_refused_before_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "MAX_PLAN_BYTES", 100)
    import planner.plan.schema

    monkeypatch.setattr(planner.plan.schema, "MAX_PLAN_BYTES", 100)
    plan = write(tmp_path / "p.json", tiny_plan_data())
    line = check_refusal(*invoke(["explain", str(plan)])[::2])
    assert "bytes is larger than a plan can be (100 bytes)" in line, line


def _plan_with(tmp: Path, edit) -> Path:  # noqa: ANN001
    data = tiny_plan_data()
    edit(data)
    return write(tmp / "p.json", json.dumps(data))


BAD_NUMBERS = {
    "negative step time": (lambda d: d["prediction"].update(step_time_s=-3.0), "prediction.step_time_s"),
    "MFU above 1": (lambda d: d["prediction"].update(mfu=5.0), "prediction.mfu"),
    "negative memory": (lambda d: d["prediction"]["memory_per_stage"][0].update(weights_bytes=-1.0),
                        "prediction.memory_per_stage.0.weights_bytes"),
    "negative breakdown": (lambda d: d["prediction"]["breakdown"].update(bubble_s=-0.5), "prediction.breakdown.bubble_s"),
    "bubble fraction above 1": (lambda d: d["prediction"].update(bubble_fraction=2.0), "prediction.bubble_fraction"),
}


@pytest.mark.parametrize("command", [["show", "{p}", "--figures", "figs", "--no-compare"],
                                     ["replan", "{p}", "--gpus", "2"], ["export", "{p}", "--to", "megatron"],
                                     ["explain", "{p}"], ["compare", "{p}"]])
@pytest.mark.parametrize("case", sorted(BAD_NUMBERS))
def test_impossible_predictions_are_refused_on_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str,
                                                    command: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    edit, field = BAD_NUMBERS[case]
    path = _plan_with(tmp_path, edit)
    code, out, err = invoke([a.format(p=path) for a in command])
    line = check_refusal(code, err)
    assert str(path) in line and field in line, line
    assert out == ""


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_in_a_plan_file_are_refused(tmp_path: Path, token: str) -> None:
    text = json.dumps(tiny_plan_data()).replace('"step_time_s": ', f'"step_time_s": {token}, "x": ', 1)
    path = write(tmp_path / "p.json", text)
    line = check_refusal(*invoke(["export", str(path), "--to", "torchrun"])[::2])
    assert str(path) in line and token.lstrip("-") in line and "not a JSON number" in line, line


def test_the_schema_states_the_bounds() -> None:
    from planner.plan import Plan

    schema = Plan.model_json_schema()
    pred = schema["$defs"]["Prediction"]["properties"]
    assert pred["mfu"]["minimum"] == 0 and pred["mfu"]["maximum"] == 1
    assert pred["step_time_s"]["exclusiveMinimum"] == 0
    for name, prop in schema["$defs"]["Breakdown"]["properties"].items():
        assert prop.get("minimum") == 0, name
    for name, prop in schema["$defs"]["StageMemory"]["properties"].items():
        assert prop.get("minimum") == 0 or prop.get("exclusiveMinimum") == 0, name


def test_an_hf_config_without_model_type_is_named_as_one(tmp_path: Path) -> None:
    data = hf_data("llama3-8b")
    del data["model_type"]
    path = write(tmp_path / "config.json", data)
    line = check_refusal(*invoke(["model", str(path)])[::2])
    assert "Hugging Face config.json without 'model_type'" in line and '"model_type": "llama"' in line, line
    assert "num_layers" not in line  # meshplan's own field names mean nothing to this user
    data.pop("architectures", None)
    line = check_refusal(*invoke(["model", str(write(tmp_path / "c2.json", data))])[::2])
    assert "without 'model_type'" in line and "llama, mistral" in line, line


READERS = ("planner", "hardware_profiles", "executor")
PARSE_CALLS = {"json.load", "json.loads", "yaml.safe_load", "yaml.load", "yaml.safe_load_all"}


def test_every_json_and_yaml_input_goes_through_the_one_reader() -> None:
    found = []
    for top in READERS:
        for path in sorted((ROOT / top).rglob("*.py")):
            if path == ROOT / "hardware_profiles" / "reader.py" or "checks" in path.relative_to(ROOT).parts:
                continue  # planner/export/checks/ run in the framework's own interpreter, without meshplan
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call):
                    func = node.func
                    name = (f"{getattr(func.value, 'id', '')}.{func.attr}" if isinstance(func, ast.Attribute)
                            else getattr(func, "id", ""))
                    if name in PARSE_CALLS or name.endswith("model_validate_json"):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert found == [], found
