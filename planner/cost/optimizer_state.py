"""What the optimizer holds and moves per parameter at the precision the workload keeps it in.

`Workload.master_weights` (fp32 | remainders | none) and `Workload.optimizer_state_dtype` (fp32 | bf16) set the
bytes of Adam's state per parameter it updates (sharded like optimizer state under ZeRO) and the HBM bytes of
its step. The defaults (a full fp32 master, fp32 moments) are the ZeRO paper's K = 12 and the runtimes'
validated step counts (`RuntimeCosts.optimizer_bytes_per_param`); other settings follow the stacks that run them:

- Megatron-Core's precision-aware optimizer (`--use-precision-aware-optimizer`, core_v0.11.0; `--exp-avg-dtype
  bf16`/`--exp-avg-sq-dtype bf16` from core_v0.13.0, commit 9d509a03b4): Transformer Engine's FusedAdam holds the
  master and the moments (megatron/core/optimizer/__init__.py core_v0.19.0 lines 562-584: exp_avg_dtype,
  exp_avg_sq_dtype, master_weight_dtype, store_param_remainders). For bf16 weights with an fp32 master it keeps
  only int16 remainders (OptimizerConfig.store_param_remainders = True, optimizer_config.py line 192, Transformer
  Engine >= 2.1; TE d0067d0 (2026-08) transformer_engine/pytorch/optimizers/fused_adam.py lines 213-214 and 415 `torch.zeros_like(
  param, dtype=torch.int16)`) and reads the gradient buffer's shard as it is (`decoupled_grad`,
  distrib_optimizer.py line 2780: no fp32 gradient copy).
- NeMo's Apex DistributedFusedAdam (NVIDIA's DGX Cloud recipes, NeMo 24.09): megatron_base_model.py lines
  806-815 (branch 24.09-beta) keep no master for optim.dtype == the model's bf16 (`store_params=False`, moments in
  bf16) and int16 remainders for an fp32 optim.dtype (`store_param_remainders=True`; apex b7a4acc1
  apex/contrib/optimizers/distributed_fused_adam.py lines 461-467). It also keeps its reduced gradient shard
  (`grads_shard`, lines 2013-2016) in grad_sync_dtype.

Under a lowered setting the megatron runtime counts the gradient shard the optimizer reads at the reduction
precision (`runtime.grad_reduce_bytes`), Apex's grads_shard: Megatron-Core's precision-aware path reads its
buffer in place, so it holds 2-4 B less per sharded parameter than counted (the larger of the two stacks that
run the setting, so no plan is recommended that does not fit either).
"""

from __future__ import annotations

from planner.cost.runtime import BF16_BYTES, FP32_BYTES, grad_reduce_bytes, runtime_costs

MASTER_WEIGHT_BYTES: dict[str, int] = {"fp32": FP32_BYTES, "remainders": 2, "none": 0}
"""Bytes of the master copy per parameter: fp32 (Micikevicius et al. 2018; ZeRO Sec. 3.1), int16 remainders (TE
fused_adam.py line 415, apex distributed_fused_adam.py line 465: dtype=torch.int16), none."""
MOMENT_BYTES: dict[str, int] = {"fp32": FP32_BYTES, "bf16": BF16_BYTES}
"""Bytes of each Adam moment per parameter (`Workload.optimizer_state_dtype`)."""
ADAM_MOMENTS = 2  # exp_avg, exp_avg_sq

# Fused Adam's HBM traffic per updated parameter in a lowered setting (one kernel, TE multi_tensor_adam /
# Apex DistributedFusedAdam): read the gradient at its stored precision; read and write the master (the bf16
# weight and its remainder, 2 + 2 B each way; the bf16 weight alone without a master); read and write each moment.
_MASTER_STEP_BYTES: dict[str, int] = {"fp32": 2 * FP32_BYTES, "remainders": 2 * (BF16_BYTES + 2), "none": 2 * BF16_BYTES}


def lowered(workload) -> bool:
    """The workload keeps a master or moments below fp32 (workloads without the fields keep both in fp32)."""
    return getattr(workload, "master_weights", "fp32") != "fp32" or getattr(workload, "optimizer_state_dtype", "fp32") != "fp32"


def state_bytes_per_param(workload) -> int:
    """Master copy plus Adam's moments, bytes per parameter the rank updates (12 at the defaults)."""
    return (MASTER_WEIGHT_BYTES[getattr(workload, "master_weights", "fp32")]
            + ADAM_MOMENTS * MOMENT_BYTES[getattr(workload, "optimizer_state_dtype", "fp32")])


def lowered_grad_copy_bytes(ctx) -> int:
    """The gradient shard a lowered-precision optimizer holds beside its state on the megatron runtime (Apex's
    grads_shard at the reduction precision); 0 for the pytorch runtimes, whose optimizer reads the gradients."""
    return grad_reduce_bytes(ctx) if ctx.workload.runtime == "megatron" else 0


def step_bytes_per_param(ctx) -> float:
    """HBM bytes of the optimizer step per updated parameter: the runtime's validated count at the defaults;
    lowered, the fused kernel's reads and writes at the stored precisions, which also writes the bf16 weight
    itself (no separate master-to-model copy, `runtime._MEGATRON_PARAM_COPY`). The eager runtime's foreach AdamW
    makes more passes than that kernel: it keeps its count, less the bytes the lower precision saves in one."""
    rc = runtime_costs(ctx.workload)
    if not lowered(ctx.workload):
        return rc.optimizer_bytes_per_param
    w = ctx.workload
    fused = (grad_reduce_bytes(ctx) + _MASTER_STEP_BYTES[w.master_weights]
             + 2 * ADAM_MOMENTS * MOMENT_BYTES[w.optimizer_state_dtype])
    if rc.eager_elementwise:
        default_fused = FP32_BYTES + _MASTER_STEP_BYTES["fp32"] + 2 * ADAM_MOMENTS * FP32_BYTES
        return rc.optimizer_bytes_per_param - (default_fused - fused)
    return float(fused)
