"""Faults during a run, survived: real `meshplan run` launches of 4 CPU ranks (dp2 x tp2, ZeRO-3) with a fault
injected through MESHPLAN_FAULT (executor.faults).

- A rank that crashes (kind=exit, rank 1, step 4) under `--max-restarts 1 --checkpoint-every 2`: torchrun
  restarts the job, the workers resume from step 2's checkpoint by themselves, and every loss from the
  resume on equals the uninterrupted run's bit for bit (same mesh, same data, restored weights, AdamW state
  and RNG: nothing may differ).
- A rank that dies in the middle of step 4's checkpoint (kind=exit-during-save, after the shard files and
  before DCP's `.metadata`): step 2's checkpoint stays intact and the restarted job continues from it, again
  bit for bit.
- A rank that hangs (kind=hang): the others' collective times out after `--collective-timeout 5`; the run
  ends within the timeout plus a margin, exit 1, with one line naming the rank, the step, the phase and the
  collective.
- A damaged checkpoint (one shard altered in place, another truncated) is refused at resume with one line
  naming the folder and the file, exit 2, by every rank alike (the altered file is hashed by rank 1 only).

The crash-while-saving run is module-scoped and doubles as the uninterrupted reference: its first attempt runs
steps 1 to 4 without a fault (the fault fires in the save after step 4's loss is logged), and its restart
leaves complete checkpoints at steps 2 and 4. The crash test's losses are compared with that first attempt's.
The restart tests launch the workers twice each; the hang and damaged-checkpoint tests once each.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dist_launch import cpu_env
from dist_plans import make_plan

from executor import checkpoint_manifest as manifest
from planner.layout import Layout

pytestmark = pytest.mark.distributed

LAYOUT = Layout(dp=2, tp=2, zero=3, dp_shard=2, micro_batch=2, num_microbatches=2)
STEPS, EVERY = 4, 2
"""Step 4 is the fault's step and the last checkpoint: the restart resumes from step 2's checkpoint, and steps 3
and 4 after it (one of them re-doing the failed step, one re-saving the checkpoint) show it continues exactly."""


def meshplan(args: list[str], cwd: Path, fault: str | None = None, timeout_s: float = 240):
    env = cpu_env()
    env.pop("MESHPLAN_FAULT", None)
    if fault is not None:
        env["MESHPLAN_FAULT"] = fault
    return subprocess.run([sys.executable, "-m", "planner.cli.main", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout_s)


def rows(metrics: Path) -> list[dict]:
    return [json.loads(line) for line in metrics.read_text().splitlines()]


@pytest.fixture(scope="module")
def plan(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("plan") / "dp2_tp2.json"
    path.write_text(make_plan("tiny", LAYOUT).to_json())
    return path


def _faulty_run(tmp: Path, plan: Path, fault: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    proc = meshplan(["run", str(plan), "--steps", str(STEPS), "--run-dir", str(tmp / "run"),
                     "--checkpoint-dir", str(tmp / "ckpt"), "--checkpoint-every", str(EVERY),
                     "--max-restarts", "1", "--json", "-"], tmp, fault=fault)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return proc, rows(tmp / "run" / "metrics.jsonl")


@pytest.fixture(scope="module")
def crash_while_saving(tmp_path_factory, plan: Path) -> dict:
    """The run whose rank 1 dies in the middle of step 4's checkpoint. It is also the uninterrupted reference:
    its first attempt logs steps 1 to 4 before the fault fires (in the save after step 4's loss), so no
    separate launch is needed for the reference losses, nor for a complete checkpoint folder (the restart
    re-saves step 4)."""
    tmp = tmp_path_factory.mktemp("crash_while_saving")
    proc, got = _faulty_run(tmp, plan, "rank=1,step=4,kind=exit-during-save")
    first = [r for r in got if r["restart"] == 0]
    assert [r["step"] for r in first] == list(range(1, STEPS + 1)), "the first attempt is uninterrupted to step 4"
    return {"tmp": tmp, "proc": proc, "got": got, "ckpt": tmp / "ckpt", "loss": {r["step"]: r["loss"] for r in first}}


@pytest.fixture(scope="module")
def reference(crash_while_saving: dict) -> dict:
    """The uninterrupted losses of steps 1 to 4 and a complete checkpoint folder (steps 2 and 4)."""
    return crash_while_saving


def _assert_resumed_exactly(proc, got: list[dict], reference: dict, first_attempt_steps: list[int]) -> None:
    first = [r for r in got if r["restart"] == 0]
    second = [r for r in got if r["restart"] == 1]
    assert [r["step"] for r in first] == first_attempt_steps
    assert [r["step"] for r in second] == [3, 4], "the restart resumes after step 2's checkpoint"
    for r in first + second:  # bitwise: == on the floats, no tolerance
        assert r["loss"] == reference["loss"][r["step"]], (r, reference["loss"])
    assert re.search(r"restart 1: resumed from \S*step-00000002 \(step 2\)", proc.stderr), proc.stderr[-3000:]
    assert json.loads(proc.stdout)["final_loss"] == reference["loss"][STEPS]


@pytest.mark.timeout(300)
def test_crashed_rank_restarts_and_resumes_exactly(tmp_path: Path, plan: Path, reference: dict) -> None:
    proc, got = _faulty_run(tmp_path, plan, "rank=1,step=4,kind=exit")
    fired = json.loads((tmp_path / "run" / "fault-fired.json").read_text())
    assert (fired["rank"], fired["step"], fired["kind"]) == (1, 4, "exit")
    _assert_resumed_exactly(proc, got, reference, first_attempt_steps=[1, 2, 3])
    ckpt = tmp_path / "ckpt"
    assert sorted(p.name for p in ckpt.iterdir()) == ["step-00000002", "step-00000004"]


@pytest.mark.timeout(300)
def test_crash_while_saving_keeps_the_previous_checkpoint(crash_while_saving: dict) -> None:
    proc, got, tmp = crash_while_saving["proc"], crash_while_saving["got"], crash_while_saving["tmp"]
    fired = json.loads((tmp / "run" / "fault-fired.json").read_text())
    assert (fired["rank"], fired["step"], fired["kind"]) == (1, 4, "exit-during-save")
    # Died mid-save: its own shard was on disk, DCP's .metadata and the completion marker were not.
    written = fired["files_written"]
    assert "__1_0.distcp" in written and ".metadata" not in written and manifest.MARKER not in written, written
    assert fired["folder"].endswith(".tmp-step-00000004")
    # Step 4's loss was logged before the save began; the restart resumes from step 2, the last complete one.
    _assert_resumed_exactly(proc, got, crash_while_saving, first_attempt_steps=[1, 2, 3, 4])
    ckpt = tmp / "ckpt"
    assert sorted(p.name for p in ckpt.iterdir()) == ["step-00000002", "step-00000004"]
    for folder in ckpt.iterdir():  # the re-saved step 4 and the others check out against their markers
        assert manifest.verify(folder, manifest.read_marker(folder)) is True


TIMEOUT_S = 5
MARGIN_S = 25
"""Time allowed after the timeout: the other ranks' exit and torchrun stopping the hung one (about 2 s
measured), with room for the loaded 2-core CI machine."""


@pytest.mark.timeout(300)
def test_hung_rank_ends_the_run_with_a_named_timeout(tmp_path: Path, plan: Path) -> None:
    proc = meshplan(["run", str(plan), "--steps", "3", "--run-dir", str(tmp_path / "run"),
                     "--collective-timeout", str(TIMEOUT_S)], tmp_path, fault="rank=1,step=2,kind=hang")
    ended = time.time()
    assert proc.returncode == 1, proc.stderr[-5000:]
    fired = json.loads((tmp_path / "run" / "fault-fired.json").read_text())
    assert (fired["rank"], fired["step"], fired["kind"]) == (1, 2, "hang")
    waited = ended - fired["fired_at_unix_s"]
    assert waited <= TIMEOUT_S + MARGIN_S, f"the run ended {waited:.1f} s after the hang"
    print(f"hang at step 2 -> run ended {waited:.1f} s later (timeout {TIMEOUT_S} s)")
    last = proc.stderr.strip().splitlines()[-1]
    pattern = (rf"^error: rank [023]: collective timed out after {TIMEOUT_S} s at step 2 in training step > "
               r"forward/backward: (FSDP all-gather|DTensor \(TP/SP\) collective) \(\w+\) at executor\.\S+; "
               rf"torch: .*Timed out waiting {TIMEOUT_S * 1000}ms")
    assert re.match(pattern, last), last
    assert "Traceback" not in proc.stderr
    # Every rank that timed out left its line; the hung rank never reached a collective.
    lines = (tmp_path / "run" / "failure.txt").read_text().splitlines()
    assert lines and all(line.startswith(("rank 0:", "rank 2:", "rank 3:")) for line in lines), lines


@pytest.mark.timeout(300)
def test_damaged_checkpoint_is_refused_in_one_line(tmp_path: Path, reference: dict) -> None:
    """Resume onto 2 ranks (dp=2; the global batch is the same) from a copy of the reference's checkpoints
    whose latest one has a shard altered in place (same size: found by its SHA-256, which rank 1 computes)
    and another truncated (found by its size)."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(reference["ckpt"], ckpt)
    latest = ckpt / "step-00000004"
    # Sorted files: .metadata, __0_0, __1_0, __2_0, __3_0; with 2 ranks, rank 1 hashes __0_0 and __2_0.
    shard = latest / "__2_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    with open(latest / "__3_0.distcp", "r+b") as fh:
        fh.truncate(100)
    dp2 = tmp_path / "dp2.json"
    dp2.write_text(make_plan("tiny", Layout(dp=2, zero=3, dp_shard=2, micro_batch=4)).to_json())
    proc = meshplan(["run", str(dp2), "--steps", "5", "--run-dir", str(tmp_path / "run"), "--resume", str(ckpt)],
                    tmp_path)
    assert proc.returncode == 2, proc.stderr[-5000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (f"error: {latest}: checkpoint is damaged: __2_0.distcp has the recorded size but a different "
                    f"SHA-256 (the file is damaged) (and 1 more damaged file); fix: restore the file, or move "
                    f"step-00000004 out of the folder to resume from the previous checkpoint"), last
    assert "Traceback" not in proc.stderr and not (tmp_path / "run" / "metrics.jsonl").exists()
