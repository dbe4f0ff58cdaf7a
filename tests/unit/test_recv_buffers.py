"""Pipeline receive buffers: torch.distributed.pipelining allocates an activation and a gradient receive buffer for
every micro-batch of the step on each stage and keeps them (planner/cost/runtime.py `step_recv_buffers` cites
torch 2.13's stage.py); Megatron allocates them per transfer. They show in the ranks' buffers."""

from __future__ import annotations

import pytest

import hardware_profiles as hp
from planner import evaluate
from planner.layout import Layout, Workload
from planner.model import preset

SEQ = 4096


def _stages(layout: Layout, runtime: str) -> list:
    spec = preset("llama3-8b")
    gpus = layout.dp * layout.cp * layout.tp * layout.pp
    work = Workload(global_batch=layout.global_batch, seq_len=SEQ, runtime=runtime)
    plan = evaluate(spec, hp.cluster("dgx-h100", gpus=gpus), work, layout, allow_oom=True, framework="any")
    return plan.prediction.memory_per_stage


def _buffer_bytes(layout: Layout) -> float:
    """One buffer: the stage's local input or output, s/cp x b x h bf16 values, / tp under sequence parallelism."""
    tp_shard = layout.tp if layout.sequence_parallel else 1
    return SEQ / layout.cp * layout.micro_batch * preset("llama3-8b").hidden_size * 2 / tp_shard


def _delta(layout: Layout) -> list[float]:
    """Buffers of each pipeline rank under pytorch less those under megatron (no FSDP buffers at ZeRO <= 2)."""
    torch_, megatron = _stages(layout, "pytorch"), _stages(layout, "megatron")
    return [a.buffers_bytes - b.buffers_bytes for a, b in zip(torch_, megatron, strict=True)]


def test_megatron_allocates_per_transfer() -> None:
    layout = Layout(tp=2, pp=4, dp=1, micro_batch=1, num_microbatches=8, schedule="1f1b")
    assert all(s.buffers_bytes == 0 for s in _stages(layout, "megatron"))


@pytest.mark.parametrize("m", [4, 8, 16])
def test_1f1b_holds_every_micro_batch_less_the_in_flight_inputs(m) -> None:
    """1F1B, rank r of p: m activation buffers (none on rank 0), p - r of them the in-flight stage inputs the
    activations count; m gradient buffers (none on the last rank)."""
    p = 4
    layout = Layout(tp=2, pp=p, dp=1, micro_batch=1, num_microbatches=m, schedule="1f1b")
    buf = _buffer_bytes(layout)
    expected = [((m - (p - r)) * (r > 0) + m * (r < p - 1)) * buf for r in range(p)]
    assert _delta(layout) == pytest.approx(expected, rel=1e-12)


def test_scales_with_micro_batches_not_with_layers() -> None:
    """Doubling m adds m buffers of each kind per middle rank."""
    small = Layout(tp=1, pp=4, dp=1, micro_batch=1, num_microbatches=8, schedule="1f1b")
    large = small.model_copy(update={"num_microbatches": 16})
    buf = _buffer_bytes(small)
    grown = [b - a for a, b in zip(_delta(small), _delta(large), strict=True)]
    assert grown == pytest.approx([8 * buf, 16 * buf, 16 * buf, 8 * buf], rel=1e-12)


def test_gpipe_activation_buffers_are_all_in_flight() -> None:
    """GPipe holds all m micro-batches' activations, so only the gradient buffers are extra."""
    layout = Layout(tp=1, pp=2, dp=1, micro_batch=1, num_microbatches=8, schedule="gpipe")
    assert _delta(layout) == pytest.approx([8 * _buffer_bytes(layout), 0.0], rel=1e-12)


def test_sequence_parallel_and_context_parallel_shard_them() -> None:
    sp = Layout(tp=4, pp=2, dp=1, cp=2, micro_batch=1, num_microbatches=4, schedule="1f1b", sequence_parallel=True)
    no_sp = sp.model_copy(update={"sequence_parallel": False})
    whole = SEQ / 2 * preset("llama3-8b").hidden_size * 2
    # rank 0: 4 gradient buffers; rank 1: 4 activation buffers less 1 in flight
    assert _delta(sp) == pytest.approx([4 * whole / 4, 3 * whole / 4], rel=1e-12)
    assert _delta(no_sp) == pytest.approx([4 * whole, 3 * whole], rel=1e-12)


def test_interleaved_counts_per_chunk() -> None:
    """v chunks per rank: m buffers of each kind per chunk, less the model's first chunk's activation buffers
    and last chunk's gradient buffers; in-flight pairs on rank 0's first chunk: 2p - 1."""
    p, v, m = 4, 2, 8
    layout = Layout(tp=1, pp=p, dp=1, micro_batch=1, num_microbatches=m, schedule="interleaved", virtual_stages=v)
    buf = _buffer_bytes(layout)
    pairs = [(p - r - 1) * 2 + (v - 1) * p + 1 for r in range(p)]
    act = [m * v - pairs[r] for r in range(p)]
    act[0] = m * (v - 1) - (pairs[0] - (2 * p - 1))
    grad = [m * v] * (p - 1) + [m * (v - 1)]
    assert _delta(layout) == pytest.approx([(a + g) * buf for a, g in zip(act, grad, strict=True)], rel=1e-12)


def test_no_pipeline_no_buffers() -> None:
    layout = Layout(tp=2, pp=1, dp=4, micro_batch=2, num_microbatches=4)
    assert _delta(layout) == [0.0]
    assert _stages(layout, "pytorch")[0].buffers_bytes == 0
