"""TorchTitan 0.2.x job config (TOML) for a plan (`meshplan export --to torchtitan --torchtitan-version 0.2`).

TorchTitan 0.3 reads no TOML (`planner.export.torchtitan` writes its command line); 0.2.x does, with
`--job.config_file FILE`. Field names follow torchtitan 0.2.2's `JobConfig` (torchtitan/config/job_config.py): `[parallelism]`
data_parallel_replicate_degree, data_parallel_shard_degree, tensor_parallel_degree, pipeline_parallel_degree,
context_parallel_degree, expert_parallel_degree, pipeline_parallel_schedule (PyTorch schedule class name
without "Schedule": GPipe, 1F1B, Interleaved1F1B, InterleavedZeroBubble), pipeline_parallel_microbatch_size,
module_fqns_per_model_part (the exact layer partition, chunk c on rank c % pp); `[training]` local_batch_size
(per DP rank), global_batch_size, seq_len; `[activation_checkpoint]` mode (and selective_ac_option "op" for
recompute op). TorchTitan builds its mesh as
pp, dp_replicate, dp_shard, cp, tp (the planner's default order) and always pairs TP with sequence parallelism.

Gradient accumulation: with pp == 1, local_batch_size is one micro-batch and global_batch_size = dp x micro x
micro-batches makes TorchTitan accumulate over the micro-batches; with pp > 1 the local batch is split into
pipeline micro-batches of pipeline_parallel_microbatch_size.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from planner.export import ExportResult, header
from planner.export.torchtitan import chunk_modules
from planner.frameworks.torchtitan import PROFILE as TITAN_0_3
from planner.layout.schedules import SCHEDULES

if TYPE_CHECKING:
    from planner.plan import Plan

PROFILE = replace(TITAN_0_3, release="0.2.2", pip="pip install torchtitan==0.2.2")
"""TorchTitan 0.2.2: 0.3.0's rules, with expert_tensor_parallel_degree (experts split by TP) still available."""
FLAVORS = {"llama3-8b": ("llama3", "8B"), "llama3-70b": ("llama3", "70B"), "llama3-405b": ("llama3", "405B")}
"""meshplan presets that are TorchTitan model flavors (torchtitan/models/llama3)."""


def _toml(value: Any) -> str:
    """A TOML value: ints, bools, strings and (nested) lists of strings, which JSON spells the same way."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def export(plan: Plan, **_: Any) -> ExportResult:
    lay, model, w = plan.layout, plan.inputs.model, plan.inputs.workload
    warnings: list[str] = []
    if lay.tp > 1 and not lay.sequence_parallel:
        warnings.append("TorchTitan always uses sequence parallelism with TP; the plan has it off")
    if lay.zero in (1, 2):
        warnings.append(f"TorchTitan has no ZeRO-{lay.zero}: exported as FSDP over {lay.dp_shard} ranks with "
                        "fsdp_reshard_after_forward = 'never' (parameters stay gathered between forward and backward)")
    if model.name not in FLAVORS:
        warnings.append(f"{model.name} is not a TorchTitan flavor: set [model] name/flavor to a model of this shape")
    name, flavor = FLAVORS.get(model.name, ("llama3", model.name))
    shard = lay.dp_shard if lay.zero > 0 else 1
    local = lay.micro_batch * lay.num_microbatches if lay.pp > 1 else lay.micro_batch
    sections: dict[str, dict[str, Any]] = {
        "job": {"description": f"meshplan: {model.name} {lay.describe()}"},
        "model": {"name": name, "flavor": flavor},
        "training": {"local_batch_size": local, "global_batch_size": lay.global_batch, "seq_len": w.seq_len,
                     "mixed_precision_param": "bfloat16" if w.dtype != "fp32" else "float32"},
        "parallelism": {
            "data_parallel_replicate_degree": lay.dp // shard,
            "data_parallel_shard_degree": shard,
            "tensor_parallel_degree": lay.tp,
            "pipeline_parallel_degree": lay.pp,
            "context_parallel_degree": lay.cp,
            "expert_parallel_degree": lay.ep,
            # 0.2.2 job_config: ETP = TP keeps the plan's experts split by TP ("[partial dp -> ep] etp = tp").
            "expert_tensor_parallel_degree": lay.tp if lay.ep > 1 else 1,
        },
        # 0.2.2 ActivationCheckpoint: mode "selective" with selective_ac_option "op" is per-op SAC.
        "activation_checkpoint": ({"mode": "selective", "selective_ac_option": "op"} if lay.recompute == "op"
                                  else {"mode": lay.recompute}),
    }
    par = sections["parallelism"]
    if lay.zero in (1, 2):
        par["fsdp_reshard_after_forward"] = "never"
    if lay.pp > 1:
        par["pipeline_parallel_schedule"] = SCHEDULES[lay.schedule].torchtitan  # the same names in 0.2
        par["pipeline_parallel_microbatch_size"] = lay.micro_batch
        par["module_fqns_per_model_part"] = chunk_modules(model.num_layers, lay.partition(model.num_layers), head="output")
    text = header(plan, PROFILE)
    for section, fields in sections.items():
        text += f"\n[{section}]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in fields.items())
    return ExportResult("torchtitan", text, tuple(warnings))
