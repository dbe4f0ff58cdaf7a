"""Megatron's model-state and logits memory, counted from Megatron-Core's code (runtime.py cites the lines).

The distributed optimizer shards over the data-parallel x context-parallel ranks, as FSDP does for the PyTorch runtimes
(meshplan run's FSDP2 over dp_shard x cp, TorchTitan's dp_shard_cp mesh); the gradient buffer is fp32 for bf16 runs
unless they reduce in bf16; the loss holds 16-bit logits plus one fp32 copy (6 B per logit). Eager PyTorch keeps
the 8 B per logit it is validated with.
"""

from __future__ import annotations

import numpy as np
import pytest

import hardware_profiles as hp
from planner import evaluate
from planner.api import make_context
from planner.cost.memory import logits_bytes
from planner.layout import Layout, Workload
from planner.model import preset


def _stage(runtime: str, layout: Layout, model: str = "llama3-8b", seq_len: int = 8192, **workload):
    spec = preset(model)
    plan = evaluate(spec, hp.cluster("dgx-h100", gpus=layout.dp * layout.cp * layout.tp * layout.pp),
                    Workload(global_batch=layout.dp, seq_len=seq_len, runtime=runtime, **workload), layout,
                    allow_oom=True, framework="any")
    (stage,) = plan.prediction.memory_per_stage
    return spec, stage


def _params(spec) -> float:
    layers = range(spec.num_layers)
    return (sum(spec.layer_dense_params(i) + spec.layer_expert_params(i) for i in layers) + spec.embedding_params()
            + spec.output_params())


@pytest.mark.parametrize(("grad_reduce_dtype", "grad_bytes", "optimizer_bytes"), [("fp32", 4, 12), ("bf16", 2, 16)])
def test_megatron_distributed_optimizer_shards_over_dp_times_cp(grad_reduce_dtype, grad_bytes, optimizer_bytes) -> None:
    """NVIDIA's Llama 3.1 8B recipe layout (TP1 PP1 CP2 DP4, distributed optimizer): the 12 B of fp32 main
    parameters and Adam moments (16 B with a bf16 gradient buffer: the optimizer's fp32 gradient copy) divide by
    dp x cp = 8; the bf16 weights and the whole gradient buffer stay unsharded (ZeRO-1)."""
    layout = Layout(dp=4, cp=2, zero=1, dp_shard=4, micro_batch=1)
    spec, stage = _stage("megatron", layout, grad_reduce_dtype=grad_reduce_dtype)
    params = _params(spec)
    assert stage.optimizer_bytes == pytest.approx(optimizer_bytes * params / 8, rel=1e-12)
    assert stage.gradients_bytes == pytest.approx(grad_bytes * params, rel=1e-12)
    assert stage.weights_bytes == pytest.approx(2 * params, rel=1e-12)


@pytest.mark.parametrize("runtime", ["pytorch", "pytorch-compile", "megatron"])
def test_every_runtime_shards_states_over_dp_shard_times_cp(runtime) -> None:
    """FSDP2 over dp_shard x cp (meshplan run, TorchTitan) and Megatron's dp x cp distributed optimizer alike:
    the 8B recipe layout (DP4 x CP2, ZeRO-1) divides the optimizer state by 8."""
    layout = Layout(dp=4, cp=2, zero=1, dp_shard=4, micro_batch=1)
    spec, stage = _stage(runtime, layout)
    assert stage.optimizer_bytes == pytest.approx(12 * _params(spec) / 8, rel=1e-12)


@pytest.mark.parametrize("runtime", ["pytorch", "megatron"])
def test_cp2_halves_the_per_gpu_states_of_the_sharding_group(runtime) -> None:
    """With the CP ranks in the sharding group, a cp2 plan holds half the optimizer state of the same dp_shard
    without CP (what it held when the CP ranks replicated), and under ZeRO-3 half the weights and gradients too.
    The 8B recipe: 12 GB of optimizer state at DP4 x CP2, not 24 GB."""
    _, cp2 = _stage(runtime, Layout(dp=4, cp=2, zero=1, dp_shard=4, micro_batch=1))
    _, cp1 = _stage(runtime, Layout(dp=4, cp=1, zero=1, dp_shard=4, micro_batch=1))
    assert cp2.optimizer_bytes == pytest.approx(cp1.optimizer_bytes / 2, rel=1e-12)
    if runtime == "pytorch":
        assert cp2.optimizer_bytes == pytest.approx(12 * 8.03e9 / 8, rel=0.01)
        _, z3cp2 = _stage(runtime, Layout(dp=4, cp=2, zero=3, dp_shard=4, micro_batch=1))
        _, z3cp1 = _stage(runtime, Layout(dp=4, cp=1, zero=3, dp_shard=4, micro_batch=1))
        for part in ("weights_bytes", "gradients_bytes", "optimizer_bytes"):
            assert getattr(z3cp2, part) == pytest.approx(getattr(z3cp1, part) / 2, rel=1e-12), part


@pytest.mark.parametrize(("runtime", "ep", "expert_ranks"),
                         [("megatron", 1, 8), ("megatron", 2, 4), ("pytorch", 1, 8), ("pytorch", 2, 4)])
def test_expert_states_shard_over_dp_times_cp_over_ep(runtime, ep, expert_ranks) -> None:
    """Megatron-Core's expert optimizer shards over the expert-data-parallel group with CP: dp x cp / ep ranks
    (dp4 x cp2 / ep = 8 or 4); FSDP2's expert mesh the dp_shard x cp ranks outside the EP group, the same count
    (EP takes the CP ranks first); the dense states over dp x cp = 8."""
    layout = Layout(dp=4, cp=2, ep=ep, zero=1, dp_shard=4, micro_batch=1)
    spec, stage = _stage(runtime, layout, model="tiny-moe", seq_len=64)
    layers = range(spec.num_layers)
    dense = sum(spec.layer_dense_params(i) for i in layers) + spec.embedding_params() + spec.output_params()
    experts = sum(spec.layer_expert_params(i) for i in layers)
    expected = 12 * (dense / 8 + experts / ep / expert_ranks)
    assert stage.optimizer_bytes == pytest.approx(expected, rel=1e-12)


def test_megatron_logits_hold_six_bytes_per_logit_eager_eight() -> None:
    """Megatron: 16-bit logits + their fp32 copy in forward, fp32 softmax + bf16 gradient in backward (6 B);
    eager PyTorch keeps the fp32 logits and fp32 gradient count (8 B)."""
    spec = preset("llama3-8b")
    b, tp, cp = np.array([1]), np.array([1]), np.array([2])
    per_logit = 8192 / 2 * spec.vocab_size
    for runtime, expected in (("megatron", 6), ("pytorch", 8), ("pytorch-compile", 8)):
        ctx = make_context(spec, hp.cluster("dgx-h100", gpus=8),
                           Workload(global_batch=8, seq_len=8192, runtime=runtime), framework="any")
        assert logits_bytes(ctx, b, tp, cp)[0] == pytest.approx(expected * per_logit, rel=1e-12)
