"""Framework overhead: host time per layer and micro-batch that FLOPs and bytes do not explain.

An eager training stack spends host time on every op it runs (Python, the dispatcher, autograd
bookkeeping, DTensor sharding propagation under tensor parallelism), whatever the op's size. For large
GPU layers this hides behind the device's work; for small layers, and always on CPU processes (where the
host is the device), it is a large share of the step. Measured per decoder layer and micro-batch by
`meshplan calibrate` (the residual of the reference layer's measured forward/backward time over this cost
model's compute and TP-communication terms, planner.calibration.overhead) and stored in the GPU profile's
`framework_overhead`, with its source there; absent (datasheet profiles) it is 0.

How it combines with the compute time of the same layer:
  synchronous devices (CPU processes, vendor "cpu"): the host does both in turn, so they add;
  accelerators: the host issues kernels asynchronously and runs ahead, so a layer takes the longer of
  the two (the host-bound regime of small models, Dao et al. 2022's "overhead-bound" discussion of
  launch-bound kernels; PyTorch performance tuning guide, "CPU overhead").
"""

from __future__ import annotations

import numpy as np

from planner.cost.context import CostContext


def layer_overhead_s(ctx: CostContext, tokens: np.ndarray, tp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) framework seconds of one decoder layer and micro-batch of `tokens`, per row:

        fixed + [tp > 1] * tp_fixed + per_element * tokens * hidden / tp
    """
    zeros = np.zeros(np.shape(tp), dtype=float)
    o = getattr(ctx.gpu, "framework_overhead", None)
    if o is None:
        return zeros, zeros
    tp = np.asarray(tp)
    elements = np.asarray(tokens, dtype=float) * ctx.model.hidden_size / tp
    fwd = o.layer_forward_s + np.where(tp > 1, o.tp_layer_forward_s, 0.0) + o.forward_s_per_element * elements
    bwd = o.layer_backward_s + np.where(tp > 1, o.tp_layer_backward_s, 0.0) + o.backward_s_per_element * elements
    return zeros + fwd, zeros + bwd


def with_overhead(ctx: CostContext, compute_s: np.ndarray, overhead_s: np.ndarray) -> np.ndarray:
    """A layer's time from its device work and its host overhead (see the module docstring)."""
    if ctx.gpu_kind_is_cpu:
        return compute_s + overhead_s
    return np.maximum(compute_s, overhead_s)


def dp_unit_overhead_s(ctx: CostContext, table: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) extra seconds per layer and micro-batch when layers are data-parallel units
    (gradients reduced over dp x cp > 1 ranks: FSDP/DDP hooks around every layer)."""
    zeros = np.zeros(len(table["dp"]), dtype=float)
    o = getattr(ctx.gpu, "framework_overhead", None)
    if o is None:
        return zeros, zeros
    on = (table["dp"] * table["cp"]) > 1
    return np.where(on, o.dp_layer_forward_s, 0.0), np.where(on, o.dp_layer_backward_s, 0.0)


def optimizer_s(ctx: CostContext, params: np.ndarray) -> np.ndarray | None:
    """Measured optimizer-step seconds for `params` local parameters (None when not calibrated)."""
    o = getattr(ctx.gpu, "framework_overhead", None)
    if o is None or not o.optimizer_s_per_param:
        return None
    return np.asarray(params, dtype=float) * o.optimizer_s_per_param


def pp_transfer_s(ctx: CostContext) -> float:
    """Pipeline machinery per stage-boundary transfer of a micro-batch (measured; 0 uncalibrated)."""
    o = getattr(ctx.gpu, "framework_overhead", None)
    return float(o.pp_transfer_s) if o is not None else 0.0
