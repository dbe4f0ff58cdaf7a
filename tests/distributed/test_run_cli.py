"""`meshplan run` end to end: torchrun launched by the CLI, real executor, measured-vs-predicted output.

Each test is one launch of 4 CPU ranks (about 10 s on the 2-core CI machine).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from dist_launch import cpu_env
from dist_plans import make_plan
from loopback_ports import free_port

from planner.layout import Layout

pytestmark = pytest.mark.distributed


def meshplan(args: list[str], cwd: Path, timeout_s: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "planner.cli.main", *args],
        cwd=cwd,
        env=cpu_env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def _gpu_plan(tmp: Path) -> Path:
    """llama3-8b on 2 H100s as pp2 (1F1B): a plan this CPU machine can only run with --smoke. Two ranks show
    the refusal and the smoke run as four would (the smoke batch follows the pipeline: pp micro-batches); TP x PP
    on four ranks is run by test_checkpoint_resume (pp2 x tp2) and the 8-rank equivalence launch."""
    layout = Layout(pp=2, schedule="1f1b", micro_batch=1, num_microbatches=4)
    plan = make_plan("llama3-8b", layout, seq_len=8192, dtype="bf16", cluster_name="dgx-h100")
    path = tmp / "h100.json"
    path.write_text(plan.to_json())
    return path


@pytest.mark.timeout(300)
def test_run_without_arguments_plans_and_runs_here(tmp_path: Path) -> None:
    """No plan: the tiny model is planned for 4 local gloo ranks (planner.search), run for 10 steps, and a
    measured-vs-predicted table goes to stdout. The default workload (512 sequences) is only made smaller here,
    to keep the test short; a plan file fixes its own batch."""
    proc = meshplan(["run", "--global-batch", "8"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "measured vs predicted" in proc.stdout
    for row in ("median step time", "tokens/s", "MFU", "deviation"):
        assert row in proc.stdout, proc.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 11))
    assert all(r["peak_memory_bytes"] is None and r["predicted_step_time_s"] > 0 for r in rows)
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["inputs"]["model"]["name"] == "tiny" and len(plan["placement"]) == 4
    assert plan["inputs"]["workload"]["global_batch"] == 8 and plan["inputs"]["workload"]["seq_len"] == 64
    refused = meshplan(["run", str(run_dir / "plan.json"), "--global-batch", "8"], tmp_path)
    assert refused.returncode == 2 and "--global-batch applies when no plan is given" in refused.stderr
    refused = meshplan(["run", str(run_dir / "plan.json"), "--grad-reduce-dtype", "bf16"], tmp_path)
    assert refused.returncode == 2 and "--grad-reduce-dtype applies when no plan is given" in refused.stderr


@pytest.mark.timeout(300)
def test_planned_tiny_moe_with_expert_parallelism_runs(tmp_path: Path) -> None:
    """The planner's best tiny-moe layout with ep=4 pinned on 4 local ranks (EP borrowing the DP and CP
    ranks) runs under `meshplan run`, and its metrics carry the plan's EP cost."""
    import hardware_profiles as hp
    from planner.api import search
    from planner.model import load_model
    from planner.workload import Workload

    (plan,) = search(load_model("tiny-moe"), hp.cluster("local-cpu", gpus=4),
                     Workload(global_batch=8, seq_len=64, dtype="fp32"), top=1, ep=4)
    assert plan.layout.ep == 4 and plan.prediction.breakdown.ep_comm_s > 0
    path = tmp_path / "moe.json"
    path.write_text(plan.to_json())
    proc = meshplan(["run", str(path), "--steps", "2", "--json", "-"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads(proc.stdout)
    assert summary["steps"] == 1 and "ep4" in summary["layout"]
    assert np.isfinite(summary["median_step_time_s"]) and summary["median_step_time_s"] > 0


@pytest.mark.timeout(300)
def test_gpu_plan_runs_with_smoke_and_is_refused_without(tmp_path: Path) -> None:
    plan = _gpu_plan(tmp_path)
    refused = meshplan(["run", str(plan), "--steps", "2"], tmp_path)
    assert refused.returncode == 2, refused.stderr[-3000:]
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "no CUDA device" in last and "--smoke" in last, refused.stderr[-3000:]
    assert "Traceback" not in refused.stderr

    smoke = meshplan(["run", str(plan), "--steps", "2", "--smoke", "--json", "-"], tmp_path)
    assert smoke.returncode == 0, smoke.stderr[-4000:]
    summary = json.loads(smoke.stdout)
    assert summary["smoke"] is True and summary["steps"] == 1
    assert summary["median_mfu"] is None, "MFU against an H100 peak means nothing for a CPU smoke run"
    assert summary["layout"].startswith("dp1xtp1xpp2")


@pytest.mark.timeout(300)
def test_two_torchrun_agents_on_loopback(tmp_path: Path) -> None:
    """Multi-host path on one machine: two agents (nnodes=2, c10d rendezvous on 127.0.0.1), one rank each (the
    second agent's rank is global rank 1 and local rank 0: the two differ as with more ranks per agent),
    reading a memory-mapped uint16 token file (--data)."""
    layout = Layout(dp=2, zero=3, dp_shard=2, micro_batch=2, num_microbatches=2)
    plan = tmp_path / "plan.json"
    plan.write_text(make_plan("tiny", layout).to_json())
    tokens = tmp_path / "tokens.bin"
    np.random.default_rng(0).integers(0, 256, size=3 * 8 * 65, dtype=np.uint16).tofile(tokens)
    endpoint = f"127.0.0.1:{free_port()}"
    common = ["run", str(plan), "--steps", "3", "--nnodes", "2", "--nproc", "1", "--rdzv-endpoint", endpoint,
              "--run-dir", str(tmp_path / "run"), "--data", str(tokens)]
    agents = [
        subprocess.Popen(
            [sys.executable, "-m", "planner.cli.main", *common, "--node-rank", str(r)],
            cwd=tmp_path, env=cpu_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for r in (0, 1)
    ]
    outputs = [a.communicate(timeout=240) for a in agents]
    for agent, (_, stderr) in zip(agents, outputs, strict=True):
        assert agent.returncode == 0, stderr[-4000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert "measured vs predicted" in outputs[0][0] + outputs[1][0]


@pytest.mark.timeout(120)
def test_ctrl_c_stops_the_real_job_quietly(tmp_path: Path) -> None:
    """SIGINT to the whole process group, as a terminal's Ctrl-C sends it, while torchrun starts its workers:
    exit 130, one line, no traceback (the workers' KeyboardInterrupt reports stay in launcher.log)."""
    import os
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "planner.cli.main", "run", "--run-dir", str(tmp_path / "r")],
                            cwd=tmp_path, env=cpu_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    log = tmp_path / "r" / "launcher.log"
    deadline = time.monotonic() + 90
    while not log.is_file() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2.0)  # torchrun has started its workers
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "closed file" not in err, err[-3000:]
    assert err.rstrip().splitlines()[-1] == "interrupted", err[-1000:]
