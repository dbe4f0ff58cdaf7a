"""MESHPLAN_FAULT parsing and firing (in-process: `os._exit` and the hang's sleep are replaced by exceptions),
and the run options of faults, timeouts and resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from executor import faults
from planner.errors import UserError
from planner.plan.run_options import parse_args


class Exited(Exception):
    pass


@pytest.fixture
def no_exit(monkeypatch):
    """`os._exit(code)` raises Exited(code); a hang's sleep raises Exited('hang') at once."""

    def _exit(code: int) -> None:
        raise Exited(code)

    def _sleep(seconds: float) -> None:
        raise Exited("hang")

    monkeypatch.setattr(faults.os, "_exit", _exit)
    monkeypatch.setattr(faults.time, "sleep", _sleep)
    yield
    faults._armed = None


def test_parse_accepts_the_documented_form() -> None:
    assert faults.parse("rank=1,step=4,kind=exit") == faults.Fault(rank=1, step=4, kind="exit")
    assert faults.parse("kind=exit-during-save,step=2,rank=0") == faults.Fault(rank=0, step=2, kind="exit-during-save")
    assert faults.parse("rank=3,step=1,kind=hang").kind == "hang"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "is not key=value"),
        ("rank=1,step=4", "missing kind"),
        ("rank=1,step=4,kind=crash", "kind='crash' is not one of exit, hang, exit-during-save"),
        ("rank=1,step=0,kind=exit", "step must be >= 1"),
        ("rank=-1,step=2,kind=exit", "rank='-1' is not a non-negative integer"),
        ("rank=1,step=2,kind=exit,rank=2", "rank given twice"),
        ("rank=1, step=2,kind=exit", "' step=2' is not key=value"),
        ("rank=1,step=2,kind=exit,when=now", "'when=now' is not key=value"),
        ("rank=1;step=2;kind=exit", "is not key=value"),
    ],
)
def test_parse_rejects_bad_values_in_one_line(text: str, why: str) -> None:
    with pytest.raises(UserError) as info:
        faults.parse(text)
    msg = str(info.value)
    assert "MESHPLAN_FAULT" in msg and faults.FORM in msg and why in msg and "\n" not in msg, msg


def test_arm_checks_the_fault_against_the_run(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(faults.ENV, "rank=4,step=2,kind=exit")
    with pytest.raises(UserError, match="rank=4 but the run has 4 ranks"):
        faults.arm(tmp_path, rank=0, world_size=4, steps=6, checkpoint_every=2)
    monkeypatch.setenv(faults.ENV, "rank=1,step=7,kind=exit")
    with pytest.raises(UserError, match="after the last step"):
        faults.arm(tmp_path, rank=0, world_size=4, steps=6, checkpoint_every=2)
    monkeypatch.setenv(faults.ENV, "rank=1,step=3,kind=exit-during-save")
    with pytest.raises(UserError, match="writes no checkpoint"):
        faults.arm(tmp_path, rank=0, world_size=4, steps=6, checkpoint_every=2)
    monkeypatch.setenv(faults.ENV, "rank=1,step=4,kind=exit")
    assert faults.arm(tmp_path, rank=0, world_size=4, steps=6, checkpoint_every=2) is None  # another rank's
    assert faults.arm(tmp_path, rank=1, world_size=4, steps=6, checkpoint_every=2) == faults.parse("rank=1,step=4,kind=exit")
    monkeypatch.delenv(faults.ENV)
    assert faults.arm(tmp_path, rank=1, world_size=4, steps=6, checkpoint_every=2) is None
    faults.before_step(4)  # disarmed: nothing happens


@pytest.mark.parametrize("kind", ["exit", "hang"])
def test_fires_once_per_run_directory(tmp_path, monkeypatch, no_exit, kind: str) -> None:
    monkeypatch.setenv(faults.ENV, f"rank=1,step=3,kind={kind}")
    assert faults.arm(tmp_path, rank=1, world_size=2, steps=5, checkpoint_every=0) is not None
    faults.before_step(2)  # not yet
    assert not (tmp_path / faults.FIRED).exists()
    with pytest.raises(Exited) as info:
        faults.before_step(3)
    assert info.value.args[0] == (1 if kind == "exit" else "hang")
    record = json.loads((tmp_path / faults.FIRED).read_text())
    assert (record["rank"], record["step"], record["kind"]) == (1, 3, kind)
    # The restarted process of the same run directory finds the marker and runs clean.
    assert faults.arm(tmp_path, rank=1, world_size=2, steps=5, checkpoint_every=0) is None
    faults.before_step(3)
    # Another run directory fires again.
    assert faults.arm(tmp_path / "other", rank=1, world_size=2, steps=5, checkpoint_every=0) is not None


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_exit_during_save_dies_after_writing_shards(tmp_path, monkeypatch, no_exit) -> None:
    """The crashing DCP writer (one process, no process group): shard written, no .metadata, marker says so."""
    import torch
    import torch.distributed.checkpoint as dcp

    monkeypatch.setenv(faults.ENV, "rank=0,step=2,kind=exit-during-save")
    faults.arm(tmp_path / "run", rank=0, world_size=1, steps=4, checkpoint_every=2)
    folder = tmp_path / ".tmp-step-00000002"
    folder.mkdir()
    assert faults.storage_writer(folder, 4) is None  # another step: DCP's own writer
    writer = faults.storage_writer(folder, 2)
    assert writer is not None
    with pytest.raises(BaseException) as info:  # DCP wraps it in a CheckpointException (a BaseException)
        dcp.save({"w": torch.arange(1000.0)}, checkpoint_id=folder, storage_writer=writer)
    assert "Exited: 1" in str(info.value), str(info.value)
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["__0_0.distcp"], names
    record = json.loads((tmp_path / "run" / faults.FIRED).read_text())
    assert record["files_written"] == ["__0_0.distcp"] and record["kind"] == "exit-during-save"
    assert faults.storage_writer(folder, 2) is None  # fired: disarmed


def test_run_options_for_faults(tmp_path) -> None:
    opts = parse_args(["p.json", "--collective-timeout", "7.5"])
    assert opts.collective_timeout_s == 7.5 and opts.resume is None
    assert parse_args(["p.json"]).collective_timeout_s is None  # the device's default (executor.timeouts)
    assert parse_args(["p.json", "--timeout-s", "9"]).collective_timeout_s == 9.0  # the older spelling
    with pytest.raises(UserError, match="--collective-timeout"):
        parse_args(["p.json", "--collective-timeout", "0"])
    # --resume DIR: new checkpoints go to DIR's root unless --checkpoint-dir says otherwise.
    opts = parse_args(["p.json", "--resume", "ck/step-00000004", "--checkpoint-every", "2"])
    assert opts.resume == Path("ck/step-00000004") and opts.checkpoint_dir == Path("ck")
    opts = parse_args(["p.json", "--resume", "ck", "--checkpoint-every", "2"])
    assert opts.resume == Path("ck") and opts.checkpoint_dir == Path("ck")
    opts = parse_args(["p.json", "--resume", "old", "--checkpoint-dir", "new"])
    assert opts.resume == Path("old") and opts.checkpoint_dir == Path("new")
    opts = parse_args(["p.json", "--checkpoint-dir", "ck", "--resume"])  # bare: the run's own folder
    assert opts.resume == Path("ck")
    with pytest.raises(UserError, match="--checkpoint-dir"):
        parse_args(["p.json", "--checkpoint-every", "2"])


def test_meshplan_run_passes_restarts_timeout_and_resume() -> None:
    from planner.cli import run as run_cli

    args = dict(nnodes=1, nproc=4, node_rank=0, steps=6, smoke=False, data=None, checkpoint_dir=Path("ck"),
                checkpoint_every=2, resume=Path("old"), max_restarts=2, collective_timeout=5.0)
    cmd = run_cli._torchrun_cmd(Path("p.json"), Path("rd"), Path("rd/m.jsonl"), args, "127.0.0.1:29500", "rid")
    line = " ".join(cmd)
    launcher, worker = line.split(" -m executor ")
    assert "--max-restarts 2" in launcher  # torchrun's option, before the executor's
    assert worker.endswith("--checkpoint-dir ck --checkpoint-every 2 --resume old --collective-timeout 5.0")
    plain = " ".join(run_cli._torchrun_cmd(Path("p.json"), Path("rd"), Path("m"), {**args, "max_restarts": 0,
                     "resume": None, "collective_timeout": None}, "127.0.0.1:29500", "rid"))
    assert "--max-restarts" not in plain and "--resume" not in plain and "--collective-timeout" not in plain
