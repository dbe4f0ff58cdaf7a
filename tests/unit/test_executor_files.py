"""Files the executor writes: checkpoint folder selection and the metrics JSON lines."""

from __future__ import annotations

import json

import pytest

from executor.checkpoint import MARKER, latest_checkpoint
from executor.metrics import MetricsLog


def test_latest_checkpoint_ignores_partial_saves(tmp_path) -> None:
    assert latest_checkpoint(tmp_path / "none") is None
    for step, complete in ((2, True), (4, True), (6, False)):
        folder = tmp_path / f"step-{step:08d}"
        folder.mkdir()
        if complete:
            (folder / MARKER).write_text("{}")
    (tmp_path / ".tmp-step-00000008").mkdir()
    (tmp_path / ".tmp-step-00000008" / MARKER).write_text("{}")  # a save that was never renamed
    (tmp_path / "step-10").mkdir()  # not our name pattern
    assert latest_checkpoint(tmp_path) == (4, tmp_path / "step-00000004")


def _log(path, append=False, **kw) -> MetricsLog:
    args = dict(
        predicted_step_time_s=0.5, predicted_tokens_per_s=2048.0, predicted_mfu=0.4, tokens_per_step=1024,
        flops_per_token=1e6, peak_flops_total=1e10, total_steps=3, smoke=False,
        printer=lambda line: None, append=append,
    )
    args.update(kw)
    return MetricsLog(path, **args)


def test_metrics_by_hand(tmp_path) -> None:
    path = tmp_path / "m.jsonl"
    log = _log(path)
    row = log.record(1, 5.5, 2.0, peak_memory_bytes=None)
    log.close()
    # 1024 tokens in 2 s = 512 tok/s; 512 * 1e6 FLOP / 1e10 FLOP/s = 0.0512; deviation 2.0/0.5 - 1 = 3.
    assert row["tokens_per_s"] == 512.0 and row["mfu"] == pytest.approx(0.0512) and row["deviation"] == 3.0
    assert row["peak_memory_bytes"] is None
    assert json.loads(path.read_text()) == row
    keys = {"step", "loss", "step_time_s", "predicted_step_time_s", "tokens_per_s", "mfu", "peak_memory_bytes",
            "deviation"}
    assert keys <= set(row)


def test_metrics_restart_and_append(tmp_path) -> None:
    path = tmp_path / "m.jsonl"
    log = _log(path)
    log.record(1, 5.0, 1.0)
    log.close()
    log = _log(path, append=True)  # a resumed run continues the file
    log.record(2, 4.0, 1.0)
    log.close()
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [1, 2]
    log = _log(path, peak_flops_total=None, predicted_step_time_s=0.0)  # a fresh run starts it over
    row = log.record(1, 5.0, 1.0)
    log.close()
    assert len(path.read_text().splitlines()) == 1 and row["mfu"] is None and row["deviation"] is None
