"""The stage outputs a pipeline runtime keeps after sending them (memory.sent_output_bytes, runtime.py cites the code):
torch.distributed.pipelining and Megatron-LM 2021 keep the local output of every in-flight micro-batch, DeepSpeed's
pipeline engine its 1/tp slice, Megatron since 2022 frees it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import hardware_profiles as hp
from planner import evaluate
from planner.layout import Layout, Workload
from planner.model import preset

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from published_runs import FRAMEWORKS  # noqa: E402

SEQ = 4096


def _stages(layout: Layout, runtime: str = "megatron", **workload) -> list:
    spec = preset("llama3-8b")
    gpus = layout.dp * layout.cp * layout.tp * layout.pp
    work = Workload(global_batch=layout.global_batch, seq_len=SEQ, runtime=runtime, **workload)
    plan = evaluate(spec, hp.cluster("dgx-h100", gpus=gpus), work, layout, allow_oom=True, framework="any")
    return plan.prediction.memory_per_stage


def _output_bytes(layout: Layout) -> float:
    return SEQ / layout.cp * layout.micro_batch * preset("llama3-8b").hidden_size * 2  # bf16 activations


def _delta(layout: Layout, kept: str, runtime: str = "megatron") -> list[float]:
    with_, without = _stages(layout, runtime, sent_stage_outputs=kept), _stages(layout, runtime, sent_stage_outputs="freed")
    for a, b in zip(with_, without, strict=True):
        assert a.total_bytes - b.total_bytes == pytest.approx(a.activations_bytes - b.activations_bytes, rel=1e-12)
    return [a.activations_bytes - b.activations_bytes for a, b in zip(with_, without, strict=True)]


def test_1f1b_keeps_one_output_per_in_flight_micro_batch() -> None:
    """1F1B: rank r of p holds p - r micro-batches; every rank but the last sends its output (the last one's is
    the logits)."""
    layout = Layout(tp=2, pp=4, dp=1, micro_batch=2, num_microbatches=8, schedule="1f1b")
    out = _output_bytes(layout)
    assert _delta(layout, "kept") == pytest.approx([4 * out, 3 * out, 2 * out, 0.0], rel=1e-12)


def test_sequence_parallel_and_deepspeed_keep_a_tp_slice() -> None:
    """Under sequence parallelism the local output is 1/tp of the sequence; DeepSpeed keeps 1/tp with or without."""
    sp = Layout(tp=4, pp=2, dp=1, micro_batch=1, num_microbatches=4, schedule="1f1b", sequence_parallel=True)
    no_sp = sp.model_copy(update={"sequence_parallel": False})
    out = _output_bytes(sp)
    assert _delta(sp, "kept") == pytest.approx([2 * out / 4, 0.0], rel=1e-12)
    assert _delta(no_sp, "kept") == pytest.approx([2 * out, 0.0], rel=1e-12)
    assert _delta(no_sp, "kept-tp-shard") == pytest.approx([2 * out / 4, 0.0], rel=1e-12)


def test_interleaved_keeps_one_per_in_flight_micro_batch_and_chunk() -> None:
    """Interleaved with v chunks: rank r holds (p - r - 1) * 2 + (v - 1) * p + 1 (micro-batch, chunk) pairs; on the
    last rank the model's last chunk (one in flight) sends nothing."""
    p, v = 4, 2
    layout = Layout(tp=1, pp=p, dp=1, micro_batch=1, num_microbatches=8, schedule="interleaved", virtual_stages=v)
    out = _output_bytes(layout)
    pairs = [(p - r - 1) * 2 + (v - 1) * p + 1 for r in range(p)]
    pairs[-1] -= 1
    assert _delta(layout, "kept") == pytest.approx([n * out for n in pairs], rel=1e-12)


def test_no_pipeline_keeps_nothing() -> None:
    layout = Layout(tp=2, pp=1, dp=4, micro_batch=2, num_microbatches=4)
    assert _delta(layout, "kept") == [0.0]


@pytest.mark.parametrize(("runtime", "keeps"), [("pytorch", True), ("pytorch-compile", True), ("megatron", False)])
def test_runtime_defaults(runtime, keeps) -> None:
    """torch.distributed.pipelining keeps the forward cache's outputs; Megatron frees them after the send."""
    layout = Layout(tp=2, pp=2, dp=1, micro_batch=1, num_microbatches=4, schedule="1f1b")
    default = _stages(layout, runtime)
    freed = _stages(layout, runtime, sent_stage_outputs="freed")
    assert default[0].activations_bytes - freed[0].activations_bytes == pytest.approx(
        2 * _output_bytes(layout) if keeps else 0.0, rel=1e-12)


def test_megatron_lm_2021_framework_keeps_them() -> None:
    """The 2021 release keeps them (published_runs.FRAMEWORKS); today's Megatron runtime does not."""
    assert FRAMEWORKS["megatron-lm-2021"]["workload"]["sent_stage_outputs"] == "kept"
    assert FRAMEWORKS["megatron-lm-2022"]["workload"].get("sent_stage_outputs") is None
    assert FRAMEWORKS["megatron-deepspeed-2022"]["workload"]["sent_stage_outputs"] == "kept-tp-shard"
