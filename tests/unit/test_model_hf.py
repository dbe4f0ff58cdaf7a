"""Hugging Face config.json import: fixtures written from the published configs, errors, preset agreement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.errors import UserError
from planner.model import from_hf_config, load_model, preset

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"


@pytest.mark.parametrize(
    ("fixture", "preset_name"),
    [
        ("llama3-8b.json", "llama3-8b"),
        ("mixtral-8x7b.json", "mixtral-8x7b"),
        ("deepseek-v3.json", "deepseek-v3"),
    ],
)
def test_import_reproduces_preset_counts(fixture: str, preset_name: str) -> None:
    spec, ref = from_hf_config(FIXTURES / fixture), preset(preset_name)
    assert spec.num_params() == ref.num_params()
    assert spec.num_active_params() == ref.num_active_params()
    assert [spec.layer_params(i) for i in range(spec.num_layers)] == [
        ref.layer_params(i) for i in range(ref.num_layers)
    ]
    s = min(spec.max_seq_len, ref.max_seq_len)
    assert spec.training_flops_per_token(s, "selective") == ref.training_flops_per_token(s, "selective")
    shape = {"max_seq_len", "name", "source"}
    assert spec.model_dump(exclude=shape) == ref.model_dump(exclude=shape)


def test_qwen2_7b() -> None:
    s = from_hf_config(FIXTURES / "qwen2-7b.json")
    assert (s.name, s.qkv_bias, s.linear_bias, s.num_kv_heads, s.head_dim) == (
        "Qwen2-7B",
        True,
        False,
        4,
        128,
    )
    h, f, V = 3584, 18944, 152064
    layer = (
        2 * h * h + 2 * h * 512 + (h + 2 * 512) + 3 * h * f + 2 * h
    )  # q,o; k,v; q/k/v biases; SwiGLU; norms
    assert s.num_params() == 28 * layer + 2 * V * h + h == 7_615_616_512  # model card: 7.62B
    assert "sliding_window" not in s.source  # use_sliding_window is false


def test_gpt2_small() -> None:
    s = from_hf_config(FIXTURES / "gpt2.json")
    assert (s.mlp, s.norm, s.position, s.tied_embeddings, s.linear_bias) == (
        "gelu",
        "layernorm",
        "learned",
        True,
        True,
    )
    assert s.ffn_hidden_size == 4 * 768  # n_inner absent -> 4 * n_embd
    assert s.num_params() == 124_439_808  # sum(p.numel()) of GPT2LMHeadModel('gpt2'), the well-known 124M


def test_pythia_1b() -> None:
    s = from_hf_config(FIXTURES / "pythia-1b.json")
    assert (s.position, s.tied_embeddings, s.linear_bias, s.head_dim) == ("rope", False, True, 256)
    assert s.num_params() == 1_011_781_632  # Pythia paper (Biderman et al. 2023) Table 1 / model card
    assert "rotary_pct=0.25" in s.source


def test_deepseek_excludes_mtp_and_reads_router_bias() -> None:
    s = from_hf_config(FIXTURES / "deepseek-v3.json")
    assert "multi-token-prediction module excluded" in s.source
    assert s.moe is not None and s.moe.router_bias and s.moe.first_k_dense == 3
    assert s.max_seq_len == 163840


def _write(tmp_path: Path, data: dict, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_unsupported_model_type(tmp_path: Path) -> None:
    path = _write(tmp_path, {"model_type": "bert", "hidden_size": 8})
    with pytest.raises(UserError) as info:
        from_hf_config(path)
    msg = str(info.value)
    assert (
        str(path) in msg
        and "model_type='bert'" in msg
        and "llama, mistral, mixtral" in msg
        and "\n" not in msg
    )


def test_missing_required_key(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "llama3-8b.json").read_text())
    del data["intermediate_size"]
    path = _write(tmp_path, data)
    with pytest.raises(UserError, match="required key 'intermediate_size' is missing"):
        from_hf_config(path)


def test_bad_values_become_one_line_user_errors(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "llama3-8b.json").read_text())
    data["num_key_value_heads"] = 5
    with pytest.raises(UserError, match="not divisible by num_kv_heads=5") as info:
        from_hf_config(_write(tmp_path, data))
    assert "\n" not in str(info.value)
    data["num_key_value_heads"], data["hidden_act"] = 8, "relu"
    with pytest.raises(UserError, match="hidden_act='relu' is not supported"):
        from_hf_config(_write(tmp_path, data))
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(UserError, match="invalid JSON"):
        from_hf_config(broken)
    with pytest.raises(UserError, match="No such file"):
        from_hf_config(tmp_path / "absent.json")


def test_mistral_sliding_window_is_noted_and_defaults_apply(tmp_path: Path) -> None:
    # Mistral-7B-v0.1 config.json values; num_key_value_heads/tie default like MistralConfig.
    data = {
        "model_type": "mistral",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "max_position_embeddings": 32768,
        "sliding_window": 4096,
        "hidden_act": "silu",
    }
    s = load_model(_write(tmp_path, data, "mistral.json"))
    assert s.name == "mistral" and "sliding_window=4096 not modelled" in s.source
    assert s.num_params() == 7_241_732_096  # Mistral 7B: 7.24B
