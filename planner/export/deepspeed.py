"""DeepSpeed 0.19.8 config for a plan (hjson, as `deepspeed.runtime.config.DeepSpeedConfig` reads a file).

Batch identity (DeepSpeed checks it at start-up): train_batch_size = train_micro_batch_size_per_gpu x
gradient_accumulation_steps x the data-parallel size DeepSpeed sees. Without an mpu that is every rank;
with an mpu (TP or PP in the model code, e.g. Megatron-DeepSpeed) it is world / (TP x PP), which counts CP
ranks as data-parallel too: the export computes it that way (DeepSpeed's own count), and the framework rules
keep cp = 1 (DeepSpeed has no ring or all-gather context parallelism). zero_optimization.stage is the plan's
ZeRO stage over all data-parallel ranks (MiCS, the only sub-group sharding, was removed in 0.19.7; HSDP plans
are refused by the rules). Gradient communication overlaps with the backward (overlap_comm), as costed, in the
plan's `Workload.grad_reduce_dtype` (communication_data_type "fp32" or "bf16": runtime/config.py
get_communication_data_type; the engine casts each bucket to it before the all-reduce, and the ZeRO optimizers
reduce-scatter in it). Optimizer state without a master and with bf16 moments (`Workload.master_weights` none,
`Workload.optimizer_state_dtype` bf16): bf16.bf16_master_weights_and_grads and bf16.bf16_optimizer_states (since
0.18.3).

The file starts with `#` comment lines naming the release and plan; DeepSpeed reads them (hjson). Tools that
parse the config with the strict `json` module (e.g. a Hugging Face Trainer) need them removed.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from planner.export import ExportResult, header
from planner.frameworks.deepspeed import PROFILE
from planner.layout.names import RECOMPUTE_EVERY, ordinal

if TYPE_CHECKING:
    from planner.plan import Plan


def data_parallel_size(plan: Plan) -> int:
    """The data-parallel size DeepSpeed counts: world / (TP x PP) (CP ranks count as data-parallel)."""
    lay = plan.layout
    return plan.world_size // (lay.tp * lay.pp)


def config(plan: Plan) -> tuple[dict[str, Any], list[str]]:
    lay, w = plan.layout, plan.inputs.workload
    warnings: list[str] = []
    dp = data_parallel_size(plan)
    cfg: dict[str, Any] = {
        "train_batch_size": lay.micro_batch * lay.num_microbatches * dp,
        "train_micro_batch_size_per_gpu": lay.micro_batch,
        "gradient_accumulation_steps": lay.num_microbatches,
        "zero_optimization": {"stage": lay.zero},
    }
    if lay.zero >= 1:
        cfg["zero_optimization"].update({"overlap_comm": w.overlap_dp_comm, "contiguous_gradients": True})
    # Always stated: left unset, DeepSpeed reduces in the training dtype (engine.communication_data_type returns
    # bf16 for a bf16 run), not in the precision the plan was costed with (`Workload.grad_reduce_dtype`).
    cfg["communication_data_type"] = w.grad_reduce_dtype
    if w.dtype in ("bf16", "fp8"):
        cfg["bf16"] = {"enabled": True}
        if w.master_weights == "none":  # the rule deepspeed.optimizer-precision admits none + bf16 moments only
            # bf16 weights updated in place, bf16 moments (bf16 config, runtime/precision_config.py lines 63-70)
            cfg["bf16"].update({"bf16_master_weights_and_grads": True, "bf16_optimizer_states": True})
    elif w.dtype == "fp16":
        cfg["fp16"] = {"enabled": True}
    if lay.recompute == "full" or lay.recompute in RECOMPUTE_EVERY:
        cfg["activation_checkpointing"] = {"partition_activations": lay.tp > 1, "contiguous_memory_optimization": False,
                                           "cpu_checkpointing": False}
        k = RECOMPUTE_EVERY.get(lay.recompute, 1)
        which = ("every transformer layer" if k == 1 else
                 f"every {ordinal(k)} transformer layer (the {ordinal(k)}, {ordinal(2 * k)}, ...; the others not)")
        warnings.append(f"recompute={lay.recompute}: wrap {which} with deepspeed.checkpointing.checkpoint "
                        "(the activation_checkpointing section configures it)")
    if lay.tp > 1 or lay.pp > 1:
        warnings.append(f"TP={lay.tp} / PP={lay.pp} need an mpu: DeepSpeed applies them only through the model code "
                        f"(e.g. Megatron-DeepSpeed --tensor-model-parallel-size {lay.tp} --pipeline-model-parallel-size "
                        f"{lay.pp}, or deepspeed.pipe.PipelineModule with num_stages={lay.pp}) and "
                        f"deepspeed.initialize(..., mpu=...); train_batch_size counts {dp} data-parallel ranks")
    if lay.ep > 1:
        warnings.append(f"set ep_size={lay.ep} on the deepspeed.moe.layer.MoE layers"
                        + (f" and enable_expert_tensor_parallelism=True (experts split by TP={lay.tp})" if lay.tp > 1 else ""))
    return cfg, warnings


def export(plan: Plan, **_: Any) -> ExportResult:
    cfg, warnings = config(plan)
    return ExportResult("deepspeed", header(plan, PROFILE) + json.dumps(cfg, indent=2) + "\n", tuple(warnings))
