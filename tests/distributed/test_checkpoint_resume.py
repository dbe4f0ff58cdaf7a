"""DCP checkpoints: save on one mesh, resume on another, continue exactly (real `python -m executor` runs, their
ranks forked by dist_launch.forked: the launcher is not what these check; `meshplan run` under torchrun resumes
in test_faults.py and test_lost_gpus.py).

Run A (dp=2 x tp=2, ZeRO-3) trains 3 steps and checkpoints at step 2. Run B (dp=2, ZeRO-3, on 2 ranks: the
2-D shards are re-cut into 1-D ones as they would be over 4) and run C (pp=2 x tp=2, 1F1B) each resume from that checkpoint and train step 3: their step-3 loss must equal run A's
step-3 loss, which A computed without a restart. Tolerance: relative 1e-6 in fp32. Step 3's loss depends on
every weight and on AdamW's moments and step count after two steps, all resharded by DCP (FSDP shards of
2-D DTensors -> 1-D shards, or -> pipeline stages); a missing or misplaced tensor moves it by far more
(the loss changes by ~1e-3 per step here), while reordered fp32 sums move it by ~1e-7.

A tied model (GPT-style) saved with one stage also resumes on two stages (the head copy is filled from
the embedding), at the same tolerance.

Atomicity: a half-written save (`.tmp-step-...`) and a folder without the completion marker are placed
in the checkpoint folder before B runs; B must ignore both and resume from step 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dist_launch import forked, tail
from dist_plans import TINY_GPT, make_plan

from planner.layout import Layout

pytestmark = pytest.mark.distributed

LOSS_RTOL = 1e-6
LR = 3e-3
"""10x the default, so two steps move the loss well clear of the tolerance (checked below)."""


def _metrics(path: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, path.read_text().splitlines())}


def _run(tmp: Path, layout: Layout, name: str, extra: list[str], model: str | dict = "tiny") -> Path:
    plan = tmp / f"{name}.json"
    plan.write_text(make_plan(model, layout).to_json())
    run_dir = tmp / name
    proc = forked(
        layout.world_size,
        ["-m", "executor", str(plan), "--run-dir", str(run_dir), "--checkpoint-dir", str(tmp / "ckpt"),
         "--lr", str(LR), *extra],
        timeout_s=180,
        cwd=tmp,
    )
    assert proc.returncode == 0, tail(proc)
    return run_dir / "metrics.jsonl"


@pytest.mark.timeout(600)
def test_resume_on_another_mesh_continues_exactly(tmp_path: Path) -> None:
    a = _run(
        tmp_path,
        Layout(dp=2, tp=2, zero=3, dp_shard=2, micro_batch=2, num_microbatches=2),
        "a_dp2_tp2",
        ["--steps", "3", "--checkpoint-every", "2"],
    )
    ckpt = tmp_path / "ckpt"
    assert sorted(p.name for p in ckpt.iterdir()) == ["step-00000002"]
    assert json.loads((ckpt / "step-00000002" / "meshplan.json").read_text())["step"] == 2
    # An interrupted later save, and a later folder without the completion marker: both must be ignored.
    (ckpt / ".tmp-step-00000004").mkdir()
    (ckpt / ".tmp-step-00000004" / "__0_0.distcp").write_bytes(b"partial")
    (ckpt / "step-00000005").mkdir()

    b = _run(
        tmp_path,
        Layout(dp=2, zero=3, dp_shard=2, micro_batch=2, num_microbatches=2),
        "b_dp2",
        ["--steps", "3", "--resume"],
    )
    c = _run(
        tmp_path,
        Layout(pp=2, tp=2, schedule="1f1b", micro_batch=2, num_microbatches=4),
        "c_pp2_tp2",
        ["--steps", "3", "--resume"],
    )
    losses_a, losses_b, losses_c = _metrics(a), _metrics(b), _metrics(c)
    assert sorted(losses_a) == [1, 2, 3]
    assert sorted(losses_b) == [3] and sorted(losses_c) == [3], "a resumed run starts after the checkpoint's step"
    for resumed in (losses_b, losses_c):
        assert abs(resumed[3] - losses_a[3]) <= LOSS_RTOL * abs(losses_a[3]), (losses_a, resumed)
    # Sensitivity: the untrained model's loss on step 3's batch (what a resume that restored nothing would
    # report) is far outside the tolerance; and run A's first step is the untrained model's loss on step 1.
    assert abs(_untrained_loss(3) - losses_a[3]) > 100 * LOSS_RTOL * abs(losses_a[3])
    assert abs(_untrained_loss(1) - losses_a[1]) <= LOSS_RTOL * abs(losses_a[1])


@pytest.mark.timeout(300)
def test_tied_model_resumes_from_one_stage_onto_two(tmp_path: Path) -> None:
    """A tied model saved without pipeline stages (one embedding tensor) resumes on pp=2, where the last
    stage's LM head is a second copy: it is filled from the embedding's weights and optimizer state."""
    a = _run(tmp_path, Layout(dp=2, zero=3, dp_shard=2, micro_batch=4), "a_gpt_dp2",
             ["--steps", "3", "--checkpoint-every", "2"], model=TINY_GPT)
    b = _run(tmp_path, Layout(pp=2, schedule="1f1b", micro_batch=2, num_microbatches=4), "b_gpt_pp2",
             ["--steps", "3", "--resume"], model=TINY_GPT)
    losses_a, losses_b = _metrics(a), _metrics(b)
    assert sorted(losses_b) == [3]
    assert abs(losses_b[3] - losses_a[3]) <= LOSS_RTOL * abs(losses_a[3]), (losses_a, losses_b)


@pytest.mark.timeout(300)
def test_expert_parallel_checkpoint_resumes_without_ep(tmp_path: Path) -> None:
    """tiny-moe saved under ep=2 (each rank holds 2 of the 4 experts of every layer, keyed by global index)
    resumes on one rank with every expert (ep=1), weights and AdamW moments of all experts restored."""
    a = _run(tmp_path, Layout(dp=2, ep=2, zero=1, dp_shard=2, micro_batch=4), "a_moe_ep2",
             ["--steps", "3", "--checkpoint-every", "2"], model="tiny-moe")
    b = _run(tmp_path, Layout(micro_batch=4, num_microbatches=2), "b_moe_one_rank", ["--steps", "3", "--resume"],
             model="tiny-moe")
    losses_a, losses_b = _metrics(a), _metrics(b)
    assert sorted(losses_b) == [3]
    assert abs(losses_b[3] - losses_a[3]) <= LOSS_RTOL * abs(losses_a[3]), (losses_a, losses_b)
    assert abs(losses_a[3] - losses_a[1]) > 100 * LOSS_RTOL * abs(losses_a[1])  # the steps moved the loss


def _untrained_loss(step: int) -> float:
    """Single-process loss of the freshly initialised tiny model (executor's seed 0) on step `step`'s batch."""
    import torch

    from executor.data import SyntheticTokens
    from executor.init import materialize
    from executor.model import Transformer, loss_fn
    from executor.model_args import from_spec
    from planner.model import preset

    args = from_spec(preset("tiny"))
    with torch.device("meta"):
        model = Transformer(args, range(args.num_layers), first=True, last=True)
    materialize(model, torch.device("cpu"), num_layers=args.num_layers, seed=0)
    model.set_positions(torch.arange(64))
    tokens = SyntheticTokens(vocab_size=args.vocab_size, seq_len=64, seed=0).rows(step, 0, 8, 8)
    with torch.no_grad():
        return loss_fn(model(tokens[:, :-1]), tokens[:, 1:]).item()
