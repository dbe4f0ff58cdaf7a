"""Test plans for the executor: a `Plan` from a model, a layout and a small workload on the local-cpu cluster.

Uses the lead's `planner.evaluate` (it returns a Plan with the cost model's prediction). If evaluate fails
(the cost model is not what these tests check) the plan gets a placeholder prediction and says why in its notes:
the executor only reports predictions, it never acts on them. A plan evaluate returns must keep the
requested layout (its layer partition may differ: the planner picks it and the executor follows it).
"""

from __future__ import annotations

from typing import Any

import hardware_profiles as hp
from planner.layout import Layout, Workload
from planner.model import ModelSpec, preset
from planner.plan import Breakdown, Plan, PlanInputs, Prediction, RankPlacement, StageMemory

TINY_GPT: dict[str, Any] = {
    "name": "tiny-gpt",
    "num_layers": 4,
    "hidden_size": 64,
    "num_heads": 8,
    "num_kv_heads": 8,
    "ffn_hidden_size": 256,
    "vocab_size": 256,
    "max_seq_len": 64,
    "mlp": "gelu",
    "norm": "layernorm",
    "position": "learned",
    "tied_embeddings": True,
    "linear_bias": True,
    "source": "meshplan test model: GPT-2 choices (GELU, LayerNorm, learned positions, biases, tied) at tiny size",
}
"""A GPT-2-style tiny model: exercises every non-Llama branch of the reference model."""

TINY_MOE_STEERED: dict[str, Any] = {
    **preset("tiny-moe").model_dump(mode="json"),
    "name": "tiny-moe-steered",
    "moe": {**preset("tiny-moe").moe.model_dump(mode="json"), "router_bias": True},
    "source": "meshplan test model: tiny-moe with a DeepSeek-V3 selection bias, which the tests set (STEERING)",
}
"""tiny-moe whose routing the tests steer through the selection bias (dropless)."""
TINY_MOE_CAPACITY: dict[str, Any] = {
    **TINY_MOE_STEERED,
    "name": "tiny-moe-capacity",
    "moe": {**TINY_MOE_STEERED["moe"], "capacity_factor": 1.0},
}
"""The same with capacity factor 1: each expert serves at most ceil(64 * 2 / 4) = 32 assignments per sequence."""
STEERING = [1.0, 0.0, 0.0, -1.0e4]
"""Selection bias for the steered models (it chooses experts; weights stay the router's probabilities):
expert 0 is every token's first choice (1 + p beats any probability p < 1), experts 1 and 2 share the second
choices by router probability, and expert 3 is never in a top 2, so it provably receives no token. Under EP
the rank holding experts 0 and 1 receives most rows (ep=4: the rank holding expert 3 receives none). With
capacity 32 per sequence, 32 of each sequence's 128 assignments at least are dropped (expert 0 alone is offered 64)."""


def model_spec(model: str | dict[str, Any]) -> ModelSpec:
    if isinstance(model, dict):
        return ModelSpec.model_validate(model)
    return preset(model)


def _placeholder_prediction(layout: Layout, capacity_bytes: float, tokens_per_step: int) -> Prediction:
    """Zero memory and a 1 s step (the plan schema requires a positive step time): a stand-in, said so in the
    plan's notes, when the cost model cannot cost a test layout."""
    stages = tuple(
        StageMemory(
            stage=s,
            weights_bytes=0.0,
            gradients_bytes=0.0,
            optimizer_bytes=0.0,
            activations_bytes=0.0,
            total_bytes=0.0,
            capacity_bytes=capacity_bytes,
        )
        for s in range(layout.pp)
    )
    return Prediction(
        step_time_s=1.0,
        tokens_per_s=float(tokens_per_step),
        mfu=0.0,
        model_tflops_per_gpu=0.0,
        hardware_tflops_per_gpu=0.0,
        peak_memory_bytes=0.0,
        memory_per_stage=stages,
        breakdown=Breakdown(compute_s=0.0),
    )


def make_plan(
    model: str | dict[str, Any],
    layout: Layout,
    *,
    seq_len: int = 64,
    dtype: str = "fp32",
    cluster_name: str = "local-cpu",
    workload_fields: dict[str, Any] | None = None,
) -> Plan:
    """A plan of `layout` for `model` on `layout.world_size` devices of `cluster_name` (local CPU processes);
    `workload_fields` set further `Workload` fields (e.g. grad_reduce_dtype)."""
    spec = model_spec(model)
    cluster = hp.cluster(cluster_name, gpus=layout.world_size)
    workload = Workload(global_batch=layout.global_batch, seq_len=seq_len, dtype=dtype, **(workload_fields or {}))
    note = ""
    try:
        from planner import evaluate

        plan = evaluate(spec, cluster, workload, layout, allow_oom=True)
    except Exception as exc:  # noqa: BLE001 - the cost model is not under test here; its numbers are only reported
        plan, note = None, f"placeholder prediction: planner.evaluate failed ({type(exc).__name__}: {exc})"[:300]
    if plan is not None:
        got, want = plan.layout, layout
        same = got.model_dump(exclude={"layer_partition"}) == want.model_dump(exclude={"layer_partition"})
        if not same:  # the partition may differ: the planner picks it, the executor follows it
            raise AssertionError(f"planner.evaluate changed the layout: asked {want!r}, got {got!r}")
        return plan
    capacity = float(next(iter(cluster.gpus.values())).memory_bytes)
    return Plan(
        inputs=PlanInputs(model=spec, cluster=cluster.model_dump(mode="json"), workload=workload),
        layout=layout,
        placement=tuple(RankPlacement(rank=r, host=0, gpu=r) for r in range(layout.world_size)),
        prediction=_placeholder_prediction(layout, capacity, layout.global_batch * seq_len),
        notes=(note,) if note else (),
    )
