"""DeepSpeed JSON config for a plan.

Batch identity (DeepSpeed checks it at start-up): train_batch_size = train_micro_batch_size_per_gpu x
gradient_accumulation_steps x DP, with DP = world / (TP x PP) as DeepSpeed's model-parallel unit sees it.
zero_optimization.stage is the plan's ZeRO stage; HSDP (ZeRO-3 over groups smaller than DP) is MiCS
(mics_shard_size = the sharding group). TP and PP are applied by the model code (Megatron-DeepSpeed,
PipelineModule), not by this file: the warnings say which degrees to set there.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from planner.export import ExportResult

if TYPE_CHECKING:
    from planner.plan import Plan


def config(plan: Plan) -> tuple[dict[str, Any], list[str]]:
    lay, w = plan.layout, plan.inputs.workload
    warnings: list[str] = []
    cfg: dict[str, Any] = {
        "train_batch_size": lay.global_batch,
        "train_micro_batch_size_per_gpu": lay.micro_batch,
        "gradient_accumulation_steps": lay.num_microbatches,
        "zero_optimization": {"stage": lay.zero},
    }
    if w.dtype in ("bf16", "fp8"):
        cfg["bf16"] = {"enabled": True}
    elif w.dtype == "fp16":
        cfg["fp16"] = {"enabled": True}
    if lay.hsdp:
        cfg["zero_optimization"].update({"mics_shard_size": lay.dp_shard, "mics_hierarchical_params_gather": False})
    if lay.recompute != "none":
        cfg["activation_checkpointing"] = {
            "partition_activations": lay.tp > 1,
            "contiguous_memory_optimization": False,
            "cpu_checkpointing": False,
        }
        what = "every transformer layer" if lay.recompute == "full" else "the attention core of every layer"
        warnings.append(f"recompute={lay.recompute}: wrap {what} with deepspeed.checkpointing.checkpoint")
    if lay.tp > 1 or lay.pp > 1:
        warnings.append(f"DeepSpeed applies TP/PP in the model code: use tensor parallel {lay.tp} and pipeline "
                        f"stages {lay.pp} (e.g. Megatron-DeepSpeed --tensor-model-parallel-size {lay.tp} "
                        f"--pipeline-model-parallel-size {lay.pp})")
    if lay.pp > 1 and lay.zero >= 2:
        warnings.append(f"DeepSpeed's pipeline engine supports ZeRO stage 0 or 1 only, not {lay.zero}")
    if lay.cp > 1:
        warnings.append(f"DeepSpeed has no ring context parallelism (cp={lay.cp}); DeepSpeed-Ulysses is a "
                        "different algorithm with its own cost")
    if lay.ep > 1:
        warnings.append(f"set ep_size={lay.ep} on the deepspeed.moe.layer.MoE layers")
    return cfg, warnings


def export(plan: Plan, **_: Any) -> ExportResult:
    cfg, warnings = config(plan)
    return ExportResult("deepspeed", json.dumps(cfg, indent=2) + "\n", tuple(warnings))
