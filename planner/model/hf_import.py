"""Read a Hugging Face `config.json` into a `ModelSpec` (plain JSON, no transformers dependency).

Supported `model_type`s and what they map to (defaults are those of the transformers config classes):
  llama, mistral, qwen2   SwiGLU, RMSNorm, RoPE, GQA; qwen2 has q/k/v biases (hard-wired in Qwen2Attention)
  mixtral                 as mistral, every layer MoE (num_local_experts, num_experts_per_tok)
  gpt2                    GELU, LayerNorm, learned positions, biases on every linear, tied by default
  gpt_neox                GELU, LayerNorm, (partial) RoPE, biases on every linear, untied by default
  deepseek_v3             MLA + DeepSeekMoE (first_k_dense_replace, n_routed/n_shared experts); the
                          multi-token-prediction module (num_nextn_predict_layers) is not part of the spec
Sliding-window attention, where a config enables it, is not modelled: the spec counts full causal
attention and its `source` says so.

    from planner.model import from_hf_config
    spec = from_hf_config("path/to/config.json")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hardware_profiles.reader import InputFileError, read_json
from planner.errors import UserError, format_validation_error
from planner.model.spec import ModelSpec

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "mixtral", "qwen2", "gpt2", "gpt_neox", "deepseek_v3")

_MISSING = object()


class _Config:
    """Key access that turns a missing key into a one-line UserError naming the file and the key."""

    def __init__(self, data: dict[str, Any], path: Path) -> None:
        self.data, self.path = data, path

    def req(self, key: str) -> int:
        """A required size or count: present and an integer (every required key is one)."""
        value = self.data.get(key, _MISSING)
        if value is _MISSING or value is None:
            raise UserError(
                f"required key '{key}' is missing (model_type={self.data.get('model_type')!r})",
                where=str(self.path),
                fix=f"add '{key}' from the model's published config.json",
            )
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"key '{key}' = {value!r} is not an integer", where=str(self.path),
                            fix=f"write '{key}' as a whole number, as in the model's published config.json")
        return value

    def flag(self, key: str, default: bool) -> bool:
        """An optional true/false key (a string "false" would otherwise read as true)."""
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise UserError(f"key '{key}' = {value!r} is not true/false", where=str(self.path),
                            fix=f"write '{key}' as true or false")
        return value

    def get(self, key: str, default: Any) -> Any:
        value = self.data.get(key)
        return default if value is None else value


def from_hf_config(path: str | Path) -> ModelSpec:
    """Parse a Hugging Face config.json into a ModelSpec; UserError on anything unsupported or missing."""
    path = Path(path)
    try:
        data = read_json(path, what="config.json")
    except InputFileError as exc:
        raise UserError(exc.problem, where=exc.where, fix="pass the path of a valid Hugging Face config.json") from None
    if not isinstance(data, dict):
        raise UserError(
            "top level is not a JSON object", where=str(path), fix="pass a Hugging Face config.json"
        )
    return spec_from_hf_dict(data, path)


HF_ONLY_KEYS = frozenset({"architectures", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                          "max_position_embeddings", "hidden_act", "torch_dtype", "transformers_version",
                          "n_layer", "n_head", "n_embd", "rms_norm_eps", "tie_word_embeddings"})
"""Keys of Hugging Face configs that no meshplan model file has."""
MESHPLAN_ONLY_KEYS = frozenset({"num_layers", "num_heads", "ffn_hidden_size", "mlp", "norm", "position"})
"""ModelSpec fields no Hugging Face config has: a file holding HF keys and none of these is an HF config."""
ARCHITECTURE_TYPES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "MixtralForCausalLM": "mixtral",
                      "Qwen2ForCausalLM": "qwen2", "GPT2LMHeadModel": "gpt2", "GPTNeoXForCausalLM": "gpt_neox",
                      "DeepseekV3ForCausalLM": "deepseek_v3"}
"""transformers class names (config.json `architectures`) of the supported model types."""


def looks_like_hf_config(data: dict[str, Any]) -> bool:
    return bool(HF_ONLY_KEYS & set(data)) and not MESHPLAN_ONLY_KEYS & set(data)


def missing_model_type(data: dict[str, Any], path: Path) -> UserError:
    """The error for an HF config.json without `model_type` (it says which family, from `architectures`)."""
    archs = data.get("architectures")
    names = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    guess = next((ARCHITECTURE_TYPES[a] for a in names if a in ARCHITECTURE_TYPES), None)
    fix = (f'add "model_type": "{guess}" (its architectures say {names[0]})' if guess else
           f'add "model_type" (one of {", ".join(SUPPORTED_MODEL_TYPES)}) as in the model\'s published config.json')
    return UserError("a Hugging Face config.json without 'model_type', so its family (and how to read its keys) "
                     "is unknown", where=str(path), fix=fix)


def spec_from_hf_dict(data: dict[str, Any], path: Path) -> ModelSpec:
    cfg = _Config(data, path)
    model_type = data.get("model_type")
    if model_type is None:
        raise missing_model_type(data, path)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise UserError(
            f"model_type={model_type!r} is not supported",
            where=str(path),
            fix=f"use one of {', '.join(SUPPORTED_MODEL_TYPES)} or write a meshplan model YAML",
        )
    builder = {
        "llama": _llama_like,
        "mistral": _llama_like,
        "qwen2": _llama_like,
        "mixtral": _llama_like,
        "gpt2": _gpt2,
        "gpt_neox": _gpt_neox,
        "deepseek_v3": _deepseek_v3,
    }[model_type]
    fields, notes = builder(cfg)
    fields.setdefault("name", _name(data, path))
    fields["source"] = f"Hugging Face config.json {path} (model_type={model_type})" + "".join(
        f"; {n}" for n in notes
    )
    try:
        return ModelSpec.model_validate(fields)
    except ValidationError as exc:
        raise UserError(format_validation_error(exc, str(path), ModelSpec)) from None


def _name(data: dict[str, Any], path: Path) -> str:
    name = data.get("_name_or_path")
    if isinstance(name, str) and name:
        return name.rstrip("/").split("/")[-1]
    return path.parent.name if path.stem == "config" and path.parent.name else path.stem


def _require_act(cfg: _Config, key: str, allowed: tuple[str, ...], default: str) -> str:
    act = cfg.get(key, default)
    if act not in allowed:
        raise UserError(
            f"{key}={act!r} is not supported for model_type={cfg.data.get('model_type')!r}",
            where=str(cfg.path),
            fix=f"use one of {', '.join(allowed)}",
        )
    return act


def _attention_bias(cfg: _Config) -> tuple[bool, bool]:
    """Llama-family attention_bias/mlp_bias -> (qkv_bias, linear_bias); other combinations are not modelled."""
    attn, mlp = cfg.flag("attention_bias", False), cfg.flag("mlp_bias", False)
    if attn != mlp:
        raise UserError(
            f"attention_bias={attn} with mlp_bias={mlp} is not supported (biases on some linears only)",
            where=str(cfg.path),
            fix="set both to the same value, or describe the model in a meshplan model YAML",
        )
    return attn, attn


def _swiglu_rope_decoder(cfg: _Config) -> dict[str, Any]:
    """The fields Llama-family and DeepSeek configs spell alike: a pre-norm RMSNorm decoder with a SwiGLU MLP and
    RoPE, whose sizes sit under the same Hugging Face keys. One home, so the two importers cannot drift."""
    return {
        "num_layers": cfg.req("num_hidden_layers"),
        "hidden_size": cfg.req("hidden_size"),
        "ffn_hidden_size": cfg.req("intermediate_size"),
        "vocab_size": cfg.req("vocab_size"),
        "max_seq_len": cfg.req("max_position_embeddings"),
        "mlp": "swiglu",
        "norm": "rmsnorm",
        "position": "rope",
        "rope_theta": cfg.get("rope_theta", 10000.0),
        "tied_embeddings": cfg.flag("tie_word_embeddings", False),
    }


def _llama_like(cfg: _Config) -> tuple[dict[str, Any], list[str]]:
    mt = cfg.data["model_type"]
    heads = cfg.req("num_attention_heads")
    _require_act(cfg, "hidden_act", ("silu",), "silu")
    qkv_bias, linear_bias = (True, False) if mt == "qwen2" else _attention_bias(cfg)
    fields: dict[str, Any] = {
        **_swiglu_rope_decoder(cfg),
        "num_heads": heads,
        "num_kv_heads": cfg.get("num_key_value_heads", heads),
        "head_dim": cfg.get("head_dim", None),
        "qkv_bias": qkv_bias,
        "linear_bias": linear_bias,
    }
    notes = []
    window = cfg.get("sliding_window", None)
    if window is not None and (mt != "qwen2" or cfg.get("use_sliding_window", False)):
        notes.append(f"sliding_window={window} not modelled (full causal attention counted)")
    if mt == "mixtral":
        fields["moe"] = {
            "num_experts": cfg.req("num_local_experts"),
            "top_k": cfg.req("num_experts_per_tok"),
            "expert_ffn_hidden_size": cfg.req("intermediate_size"),
        }
    return fields, notes


def _gpt2(cfg: _Config) -> tuple[dict[str, Any], list[str]]:
    h = cfg.req("n_embd")
    _require_act(
        cfg, "activation_function", ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh"), "gelu_new"
    )
    return {
        "num_layers": cfg.req("n_layer"),
        "hidden_size": h,
        "num_heads": cfg.req("n_head"),
        "ffn_hidden_size": cfg.get("n_inner", 4 * h),  # GPT2MLP: n_inner or 4 * n_embd
        "vocab_size": cfg.req("vocab_size"),
        "max_seq_len": cfg.req("n_positions"),
        "mlp": "gelu",
        "norm": "layernorm",
        "position": "learned",
        "tied_embeddings": cfg.flag("tie_word_embeddings", True),
        "linear_bias": True,
    }, []


def _gpt_neox(cfg: _Config) -> tuple[dict[str, Any], list[str]]:
    _require_act(cfg, "hidden_act", ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh"), "gelu")
    if not cfg.get("attention_bias", True):
        raise UserError(
            "attention_bias=false is not supported for gpt_neox (MLP biases would remain)",
            where=str(cfg.path),
            fix="describe the model in a meshplan model YAML",
        )
    notes = []
    if cfg.get("rotary_pct", 1.0) != 1.0:
        notes.append(f"rotary_pct={cfg.get('rotary_pct', 1.0)} (partial RoPE, no parameters)")
    return {
        "num_layers": cfg.req("num_hidden_layers"),
        "hidden_size": cfg.req("hidden_size"),
        "num_heads": cfg.req("num_attention_heads"),
        "ffn_hidden_size": cfg.req("intermediate_size"),
        "vocab_size": cfg.req("vocab_size"),
        "max_seq_len": cfg.req("max_position_embeddings"),
        "mlp": "gelu",
        "norm": "layernorm",
        "position": "rope",
        "rope_theta": cfg.get("rotary_emb_base", 10000.0),
        "tied_embeddings": cfg.flag("tie_word_embeddings", False),
        "linear_bias": True,
    }, notes


def _deepseek_v3(cfg: _Config) -> tuple[dict[str, Any], list[str]]:
    _require_act(cfg, "hidden_act", ("silu",), "silu")
    if cfg.get("attention_bias", False):
        raise UserError(
            "attention_bias=true is not supported with MLA", where=str(cfg.path), fix="set it false"
        )
    heads = cfg.req("num_attention_heads")
    notes = []
    mtp = cfg.get("num_nextn_predict_layers", 0)
    if mtp:
        notes.append(f"num_nextn_predict_layers={mtp} multi-token-prediction module excluded")
    q_lora = cfg.data.get("q_lora_rank")  # null means no query compression (DeepSeek-V2-Lite)
    return {
        **_swiglu_rope_decoder(cfg),
        "num_heads": heads,
        "num_kv_heads": heads,
        "head_dim": cfg.req("qk_nope_head_dim") + cfg.req("qk_rope_head_dim"),
        "attention": "mla",
        "mla": {
            "q_lora_rank": q_lora,
            "kv_lora_rank": cfg.req("kv_lora_rank"),
            "qk_nope_head_dim": cfg.req("qk_nope_head_dim"),
            "qk_rope_head_dim": cfg.req("qk_rope_head_dim"),
            "v_head_dim": cfg.req("v_head_dim"),
        },
        "moe": {
            "num_experts": cfg.req("n_routed_experts"),
            "top_k": cfg.req("num_experts_per_tok"),
            "num_shared_experts": cfg.get("n_shared_experts", 0),
            "expert_ffn_hidden_size": cfg.req("moe_intermediate_size"),
            "moe_layer_freq": cfg.get("moe_layer_freq", 1),
            "first_k_dense": cfg.get("first_k_dense_replace", 0),
            # noaux_tc keeps a per-expert e_score_correction_bias parameter in the gate (modeling_deepseek.py)
            "router_bias": cfg.get("topk_method", "greedy") == "noaux_tc",
        },
    }, notes
