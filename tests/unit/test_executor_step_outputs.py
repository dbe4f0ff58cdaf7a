"""The executor's pipeline step keeps no stage outputs: with `return_outputs` left True torch.distributed.pipelining
keeps every micro-batch's last-stage output (the logits) until the step ends, memory the planner does not count."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B

from executor.parallelize import ParallelModel
from executor.step import forward_backward

MICRO_BATCHES = 4


@pytest.fixture
def one_rank():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _model() -> tuple[ParallelModel, PipelineStage]:
    torch.manual_seed(0)
    stage = PipelineStage(torch.nn.Linear(8, 16), 0, 1, torch.device("cpu"))
    schedule = Schedule1F1B(stage, n_microbatches=MICRO_BATCHES, loss_fn=lambda y, t: (y - t).pow(2).mean())
    layout = SimpleNamespace(pp=1, num_chunks=1)  # one stage: first and last, no tied-embedding exchange
    model = ParallelModel(parts=[stage.submod], stage_ids=[0], schedule=schedule, stages=[stage],
                          meshes=SimpleNamespace(layout=layout))
    return model, stage


def test_schedule_keeps_outputs_by_default(one_rank) -> None:
    """What the executor avoids: the library's default keeps one output per micro-batch."""
    model, stage = _model()
    model.schedule.step(torch.randn(8, 8), target=torch.zeros(8, 16), losses=[])
    assert len(stage.output_chunks) == MICRO_BATCHES


def test_forward_backward_keeps_none(one_rank) -> None:
    model, stage = _model()
    loss = forward_backward(model, torch.randn(8, 8), torch.zeros(8, 16))
    assert loss is not None and torch.isfinite(loss)
    assert stage.output_chunks == []
    assert all(p.grad is not None for p in stage.submod.parameters())
