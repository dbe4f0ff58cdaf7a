"""Model shapes and their exact parameter / FLOP counts (pure Python).

    from planner.model import preset, load_model
    spec = preset("llama3-8b")
    spec.num_params()                                   # 8_030_261_248
    spec.training_flops_per_token(8192, "selective")    # TrainingFlops(model_flops=..., hardware_flops=...)

Modules: `spec` (ModelSpec, MoESpec, MLASpec), `params` (parameter counts), `flops` (FLOPs, GEMM shapes),
`presets` (bundled YAML shapes, load_model), `hf_import` (Hugging Face config.json).
"""

from planner.model.flops import LayerFlops, TrainingFlops
from planner.model.hf_import import SUPPORTED_MODEL_TYPES, from_hf_config
from planner.model.presets import list_presets, load_model, load_model_file, preset
from planner.model.spec import MLASpec, ModelSpec, MoESpec, RecomputePolicy

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "LayerFlops",
    "MLASpec",
    "ModelSpec",
    "MoESpec",
    "RecomputePolicy",
    "TrainingFlops",
    "from_hf_config",
    "list_presets",
    "load_model",
    "load_model_file",
    "preset",
]
