"""Presets: the required names exist, each validates and cites a source; load_model resolves names and paths."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.errors import UserError
from planner.model import ModelSpec, list_presets, load_model, preset

REQUIRED = {
    "llama3-8b", "llama3-70b", "llama3-405b", "gpt3-175b",
    "megatron-gpt-1.7b", "megatron-gpt-3.6b", "megatron-gpt-7.5b", "megatron-gpt-18.4b", "megatron-gpt-39.1b",
    "megatron-gpt-76.1b", "megatron-gpt-145.6b", "megatron-gpt-310.1b", "megatron-gpt-529.6b", "megatron-gpt-1t",
    "mixtral-8x7b", "deepseek-v3", "tiny", "tiny-moe",
}  # fmt: skip


def test_required_presets_exist() -> None:
    assert set(list_presets()) >= REQUIRED
    assert list_presets() == sorted(list_presets())


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_preset_is_named_after_its_file_and_cites_a_source(name: str) -> None:
    s = preset(name)
    assert s.name == name
    assert len(s.source) > 40 and s.source != "user-defined"
    assert load_model(name) == s


def test_megatron_gpt_architecture() -> None:
    for name in REQUIRED:
        if name.startswith("megatron-gpt") or name == "gpt3-175b":
            s = preset(name)
            assert (s.mlp, s.norm, s.position, s.tied_embeddings, s.linear_bias) == (
                "gelu",
                "layernorm",
                "learned",
                True,
                True,
            )
            assert (s.vocab_size, s.max_seq_len, s.ffn_hidden_size) == (51200, 2048, 4 * s.hidden_size)


def test_unknown_preset_lists_the_presets() -> None:
    with pytest.raises(UserError, match="unknown model preset 'llama9'.*tiny-moe"):
        preset("llama9")
    with pytest.raises(UserError, match="unknown model 'nope': not a preset and no such file.*llama3-8b"):
        load_model("nope")


def test_load_meshplan_yaml_round_trip(tmp_path: Path) -> None:
    spec = preset("deepseek-v3")
    path = tmp_path / "dsv3.yaml"
    path.write_text(yaml.safe_dump(spec.model_dump()))
    assert load_model(path) == spec
    json_path = tmp_path / "dsv3.json"
    json_path.write_text(spec.model_dump_json())
    assert load_model(str(json_path)) == spec
    assert ModelSpec.model_validate_json(spec.model_dump_json()) == spec


def test_bad_yaml_is_one_line_user_error(tmp_path: Path) -> None:
    data = preset("tiny").model_dump()
    data["num_heads"] = -8
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError) as info:
        load_model(path)
    msg = str(info.value)
    assert str(path) in msg and "field 'num_heads' = -8" in msg and "\n" not in msg
    path.write_text("num_layers: [1,\n")
    with pytest.raises(UserError, match="cannot read YAML"):
        load_model(path)
    path.write_text("- just a list\n")
    with pytest.raises(UserError, match="expected a mapping"):
        load_model(path)
