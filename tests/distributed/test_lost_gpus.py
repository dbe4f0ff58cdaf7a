"""Lost GPUs: a job checkpointed on 4 ranks continues on 2 after a re-plan (`meshplan run NEW.json --resume CKPT`).

The old job, dp2 x pp2 (1F1B, ZeRO-3) on 4 CPU ranks, trains 4 steps and checkpoints at 2 and 4. Half
the "GPUs" are then lost: the planner searches the best layout for the same model and workload (same global
batch) on 2 devices, and `meshplan run` resumes it from step 2's checkpoint, which DCP reshards (pipeline
stages merged, FSDP shards re-cut) onto whatever layout the planner chose (resharding across TP meshes is
covered by test_checkpoint_resume.py). Steps 3 and 4 of the resumed run must equal the 4-rank run's to fp32
tolerance (1e-6 relative): the world size changes the reduction
order, so not bit for bit. A resume that restored nothing would report the untrained model's loss, far
outside the tolerance (checked).

Two launches: 4 ranks forked by dist_launch.forked (`python -m executor`, as torchrun would start it), 2 ranks by
`meshplan run` under torchrun (half the processes of an 8 -> 4 version, on the 2-core CI machine, through the
same code paths).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from dist_launch import cpu_env, forked, tail
from dist_plans import make_plan
from test_checkpoint_resume import _untrained_loss

import hardware_profiles as hp
from planner import search
from planner.layout import Layout
from planner.plan import Plan

pytestmark = pytest.mark.distributed

LOSS_RTOL = 1e-6
LR = 3e-3
"""10x the default, so two steps move the loss well clear of the tolerance (checked below); the resumed run
keeps it: AdamW's hyperparameters are part of the checkpointed optimizer state."""


def replan(old: Plan, gpus: int) -> Plan:
    """What `meshplan replan OLD.json --gpus N` does: the best plan for the same model and workload on N
    devices of the same kind (here the local-cpu profile)."""
    (plan,) = search(old.inputs.model, hp.cluster("local-cpu", gpus=gpus), old.inputs.workload, top=1)
    return plan


def _losses(metrics: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, metrics.read_text().splitlines())}


@pytest.mark.timeout(400)
def test_resume_on_half_the_gpus_after_a_replan(tmp_path: Path) -> None:
    old = make_plan("tiny", Layout(dp=2, pp=2, zero=3, dp_shard=2, schedule="1f1b", micro_batch=1,
                                   num_microbatches=4))
    assert old.world_size == 4
    old_path, ckpt = tmp_path / "old.json", tmp_path / "ckpt"
    old_path.write_text(old.to_json())
    proc = forked(4, ["-m", "executor", str(old_path), "--steps", "4", "--run-dir", str(tmp_path / "old"),
                        "--checkpoint-dir", str(ckpt), "--checkpoint-every", "2", "--lr", str(LR)], timeout_s=300, cwd=tmp_path)
    assert proc.returncode == 0, tail(proc)
    before = _losses(tmp_path / "old" / "metrics.jsonl")
    assert sorted(before) == [1, 2, 3, 4]

    new = replan(old, gpus=2)
    assert new.world_size == 2 and new.layout.global_batch == old.layout.global_batch
    new_path = tmp_path / "new.json"
    new_path.write_text(new.to_json())
    run = subprocess.run(
        [sys.executable, "-m", "planner.cli.main", "run", str(new_path), "--steps", "4", "--run-dir",
         str(tmp_path / "new"), "--resume", str(ckpt / "step-00000002"), "--json", "-"],
        cwd=tmp_path, env=cpu_env(), capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-5000:]
    assert f"resumed from {ckpt / 'step-00000002'} (step 2) on layout {new.layout.describe()}" in run.stderr
    after = _losses(tmp_path / "new" / "metrics.jsonl")
    assert sorted(after) == [3, 4], "the resumed run starts after the checkpoint's step"
    for step in (3, 4):
        assert abs(after[step] - before[step]) <= LOSS_RTOL * abs(before[step]), (new.layout.describe(), before, after)
    assert abs(_untrained_loss(3) - before[3]) > 100 * LOSS_RTOL * abs(before[3])
    print(f"4 ranks {old.layout.describe()} -> 2 ranks {new.layout.describe()}: step 3 loss {before[3]!r} vs "
          f"{after[3]!r}, step 4 {before[4]!r} vs {after[4]!r}")
