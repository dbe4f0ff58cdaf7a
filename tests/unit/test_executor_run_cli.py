"""`meshplan run` without launching anything: argument checks, the torchrun line, output filtering, summary."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "distributed"))

from dist_plans import make_plan  # noqa: E402

from planner.cli import run as run_cli  # noqa: E402
from planner.cli.main import main  # noqa: E402
from planner.layout import Layout  # noqa: E402


def _plan(tmp_path: Path) -> Path:
    path = tmp_path / "p.json"
    path.write_text(make_plan("tiny", Layout(dp=2, tp=2, zero=3, dp_shard=2, micro_batch=2, num_microbatches=2)).to_json())
    return path


def test_argument_errors_exit_2_without_launching(tmp_path, capsys) -> None:
    plan = _plan(tmp_path)
    assert main(["run", str(plan), "--nnodes", "2"]) == 2
    assert "--nnodes > 1 needs --rdzv-endpoint" in capsys.readouterr().err
    assert main(["run", str(plan), "--nproc", "3", "--run-dir", str(tmp_path / "r")]) == 2
    assert "needs 4 ranks but --nnodes 1 x --nproc 3 = 3" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "missing.json")]) == 2
    assert "cannot read plan" in capsys.readouterr().err
    assert main(["run", str(plan), "--rdzv-endpoint", "hostonly"]) == 2
    assert "expected HOST:PORT" in capsys.readouterr().err


def test_torchrun_line(tmp_path) -> None:
    args = dict(nnodes=2, nproc=2, node_rank=1, steps=5, smoke=True, data=None, checkpoint_dir=Path("ck"),
                checkpoint_every=3, resume=False)
    cmd = run_cli._torchrun_cmd(Path("p.json"), Path("rd"), Path("rd/m.jsonl"), args, "127.0.0.1:29500", "rid")
    line = " ".join(cmd)
    assert cmd[1:3] == ["-m", "torch.distributed.run"]
    assert "--nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:29500" in line
    assert "--local-addr 127.0.0.1" in line and "--rdzv-conf is_host=0" in line
    assert line.endswith("-m executor p.json --steps 5 --run-dir rd --metrics rd/m.jsonl --smoke "
                         "--checkpoint-dir ck --checkpoint-every 3")
    remote = run_cli._torchrun_cmd(Path("p.json"), Path("rd"), Path("m"), {**args, "nnodes": 1}, "node0:29500", "r")
    assert "--local-addr" not in remote and "--rdzv-conf" not in remote


def test_output_filter() -> None:
    agent = "W1130 13:08:33.344000 29476 torch/distributed/elastic/multiprocessing/api.py:1028] Sending SIGTERM"
    assert run_cli._held_back(agent, False) == (True, False)
    assert run_cli._held_back("error: p.json: bad", False) == (True, False)
    assert run_cli._held_back("step 1/3  loss 5.5", False) == (False, False)
    assert run_cli._held_back("[rank1]: Traceback (most recent call last):", False) == (False, False)
    assert run_cli._held_back("Traceback (most recent call last):", False) == (True, True)
    assert run_cli._held_back("step 2/3", True) == (True, True)


def test_summary_by_hand(tmp_path) -> None:
    plan = make_plan("tiny", Layout(dp=2, micro_batch=4))
    metrics = tmp_path / "m.jsonl"
    rows = [(1, 9.0, 0.9, 100.0, None), (2, 5.0, 0.2, 400.0, 0.1), (3, 4.0, 0.4, 200.0, 0.3), (4, 3.0, 0.3, 300.0, 0.2)]
    metrics.write_text("".join(
        json.dumps({"step": s, "loss": loss, "step_time_s": t, "tokens_per_s": tps, "mfu": mfu}) + "\n"
        for s, loss, t, tps, mfu in rows
    ))
    s = run_cli._summarise(plan, Path("p.json"), metrics, smoke=False)
    # Step 1 is warm-up; medians of steps 2-4.
    assert (s.steps, s.median_step_time_s, s.median_tokens_per_s, s.median_mfu, s.final_loss) == (3, 0.3, 300.0, 0.2, 3.0)
    if plan.prediction.step_time_s > 0:
        assert abs(s.deviation - (0.3 / plan.prediction.step_time_s - 1)) < 1e-12
