"""Which framework runs which optimizer-state precision (`Workload.master_weights`, `Workload.optimizer_state_dtype`).

One rule per framework condition, read from each release's source (in each rule's `why`); spliced into
`framework_rules.FRAMEWORK_RULES`. Framework "any" (the cost model's whole space) runs every setting, so the DGX
Cloud recipes' Apex DistributedFusedAdam (no master, bf16 moments), which no framework meshplan exports to runs
as its recipes set it, is planned there.
"""

from __future__ import annotations

from planner.layout.rule import Facts, Rule

FP32_STATE = "keep the optimizer state in fp32: --master-weights fp32 --optimizer-state-dtype fp32"


def _lowered(f: Facts) -> bool:
    return (f.master_weights or "fp32") != "fp32" or (f.optimizer_state_dtype or "fp32") != "fp32"


def _setting(f: Facts) -> str:
    return f"master_weights={f.master_weights}, optimizer_state_dtype={f.optimizer_state_dtype}"


OPTIMIZER_RULES: tuple[Rule, ...] = (
    Rule("meshplan.optimizer-precision", (), ("master_weights", "optimizer_state_dtype"),
         lambda c, f: not _lowered(f),
         lambda r, f: f"meshplan run keeps a full fp32 master and fp32 Adam moments ({_setting(f)} asked): its "
         "torch.optim.AdamW updates the fp32 parameters FSDP2 shards and keeps the moments in their dtype",
         FP32_STATE + " (or plan for --framework megatron)", "executor/step.py (torch.optim.AdamW), executor/fsdp.py",
         frozenset({"meshplan"})),
    Rule("torchtitan.optimizer-precision", (), ("master_weights", "optimizer_state_dtype"),
         lambda c, f: not _lowered(f),
         lambda r, f: f"TorchTitan keeps its fp32 parameters as the master ({_setting(f)} asked), and meshplan's "
         "TorchTitan export keeps the fused fp32 Adam moments of its configs",
         FP32_STATE + " (or plan for --framework megatron)",
         "torchtitan 0.3.0 config/configs.py mixed_precision_param (FSDP2 casts the fp32 parameters for compute); "
         "its optimizer.implementation 'fused_opt_states_bf16' (bf16 moments) is not written by the export",
         frozenset({"torchtitan"})),
    Rule("megatron.master-weights-none", (), ("master_weights",), lambda c, f: f.master_weights != "none",
         lambda r, f: "Megatron-Core always keeps a master copy (--main-params-dtype fp32 or fp16); dropping it is "
         "NeMo's Apex DistributedFusedAdam with optim.dtype bf16, which Megatron-LM does not load",
         "plan with --master-weights remainders (--use-precision-aware-optimizer)",
         "megatron/training/arguments.py core_v0.19.0 line 3506 (--main-params-dtype choices fp32, fp16)",
         frozenset({"megatron"})),
    Rule("megatron.precision-aware-remainders", (), ("master_weights", "optimizer_state_dtype"),
         lambda c, f: not (f.master_weights == "fp32" and f.optimizer_state_dtype == "bf16"),
         lambda r, f: "Megatron lowers the moments only with --use-precision-aware-optimizer, which for bf16 weights "
         "keeps int16 remainders instead of a full fp32 master (OptimizerConfig.store_param_remainders, on by "
         "default, no command-line switch)", "plan with --master-weights remainders",
         "megatron/core/optimizer/optimizer_config.py core_v0.19.0 line 192; optimizer/__init__.py lines 562-584",
         frozenset({"megatron"})),
    Rule("megatron.precision-aware-zero", ("zero",), ("master_weights", "optimizer_state_dtype"),
         lambda c, f: (c["zero"] >= 1) | (not _lowered(f)),
         lambda r, f: f"Megatron's --use-precision-aware-optimizer ({_setting(f)}) needs the distributed optimizer; "
         f"zero={r['zero']} is plain DDP", "use zero 1 (--use-distributed-optimizer)",
         "megatron/core/optimizer/optimizer_config.py core_v0.19.0 __post_init__: '--use-precision-aware-optimizer "
         "only supported with distributed optimizer'", frozenset({"megatron"})),
    Rule("deepspeed.optimizer-precision", ("zero",), ("master_weights", "optimizer_state_dtype"),
         lambda c, f: (not _lowered(f)) | ((f.master_weights == "none") & (f.optimizer_state_dtype == "bf16")
                                           & (c["zero"] >= 1)),
         lambda r, f: f"DeepSpeed lowers optimizer state on the GPU only as bf16 weights without a master plus bf16 "
         f"moments under ZeRO 1-3 (bf16_master_weights_and_grads + bf16_optimizer_states); {_setting(f)} at "
         f"zero={r['zero']} is not one of its settings (bf16 master with fp32 moments needs ZeRO-Offload)",
         "plan with --master-weights none --optimizer-state-dtype bf16 and zero >= 1, or " + FP32_STATE,
         "deepspeed runtime/config.py (0.19.6 lines 1041-1049), runtime/base_optimizer.py _configure_master_weights "
         "(lines 503-511); since 0.18.3 (commit 39a682d7)", frozenset({"deepspeed"})),
)
"""The optimizer-state precision rules of every framework (each names its framework)."""

__all__ = ["OPTIMIZER_RULES"]
