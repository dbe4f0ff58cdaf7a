"""Named model shapes (YAML files in planner/model/presets/) and the one loader the CLI and planner use.

A preset file is a meshplan model YAML: the `ModelSpec` fields, with `source:` naming the paper table or
published config it comes from. `load_model` accepts a preset name, a Hugging Face config.json or a
meshplan model YAML/JSON path, and always returns a validated `ModelSpec` or raises a one-line UserError.

    from planner.model import load_model, list_presets
    spec = load_model("llama3-8b")
"""

from __future__ import annotations

from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hardware_profiles.reader import InputFileError, parse_yaml, read_json, read_yaml
from planner.errors import UserError, format_validation_error
from planner.model.spec import ModelSpec

SPEC_FIELDS_HINT = "the ModelSpec fields, as `meshplan model tiny --json -` prints them under \"spec\""
"""Where a user finds what a model file holds: a command, since the preset files sit inside the installed package."""


def _preset_dir() -> Any:
    return resources.files("planner.model").joinpath("presets")


@lru_cache(maxsize=1)
def _preset_files() -> dict[str, Any]:
    return {
        entry.name[: -len(".yaml")]: entry
        for entry in _preset_dir().iterdir()
        if entry.name.endswith(".yaml") and entry.is_file()
    }


def list_presets() -> list[str]:
    """Names of the bundled presets, sorted."""
    return sorted(_preset_files())


@cache
def preset(name: str) -> ModelSpec:
    """The bundled preset `name` (see list_presets()); UserError with the list when unknown."""
    files = _preset_files()
    if name not in files:
        raise UserError(
            f"unknown model preset {name!r}",
            fix=f"use one of: {', '.join(list_presets())}, or a config.json / model YAML path",
        )
    return _validate(parse_yaml(files[name].read_text(encoding="utf-8"), where=f"preset {name}"), f"preset {name}")


def _validate(data: Any, where: str) -> ModelSpec:
    if not isinstance(data, dict):
        raise UserError(
            "expected a mapping of ModelSpec fields", where=where, fix=f"write {SPEC_FIELDS_HINT}"
        )
    try:
        return ModelSpec.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(exc, where, ModelSpec)) from None


def load_model_file(path: str | Path) -> ModelSpec:
    """A meshplan model YAML/JSON file, or a Hugging Face config.json (recognised by its `model_type`)."""
    from planner.model.hf_import import looks_like_hf_config, missing_model_type, spec_from_hf_dict

    path = Path(path)
    kind = "JSON" if path.suffix == ".json" else "YAML"
    fix = f"pass a UTF-8 {kind} file: a model YAML ({SPEC_FIELDS_HINT}), or a HF config.json"
    try:
        data = read_json(path, what="model file") if kind == "JSON" else read_yaml(path, what="model file")
    except InputFileError as exc:
        raise UserError(exc.problem, where=exc.where, fix=fix) from None
    if isinstance(data, dict) and "model_type" in data:
        return spec_from_hf_dict(data, path)
    if isinstance(data, dict) and looks_like_hf_config(data):
        raise missing_model_type(data, path)
    return _validate(data, str(path))


def load_model(name_or_path: str | Path) -> ModelSpec:
    """Preset name, Hugging Face config.json path, or meshplan model YAML/JSON path -> ModelSpec."""
    text = str(name_or_path)
    if isinstance(name_or_path, str) and text in _preset_files():
        return preset(text)
    path = Path(text)
    if path.exists():  # folders and special files are refused by name by the reader
        return load_model_file(path)
    raise UserError(
        f"unknown model {text!r}: not a preset and no such file",
        fix=f"use one of: {', '.join(list_presets())}, or a config.json / model YAML path",
    )
