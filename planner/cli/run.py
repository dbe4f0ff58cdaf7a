"""`meshplan run [PLAN.json]`: execute a plan with torchrun, then show measured next to predicted.

    meshplan run                                  # plan the tiny model on this machine (4 gloo ranks), run it
    meshplan run plan.json --steps 50 --smoke     # any plan's layout at toy size (world size must match)
    meshplan run plan.json --nnodes 2 --node-rank 0 --rdzv-endpoint host0:29500   # on every host

Starts `python -m torch.distributed.run ... -m executor PLAN.json` as a subprocess (this module never
imports torch): c10d rendezvous on 127.0.0.1 at a free port unless --rdzv-endpoint names a host, with
MASTER_ADDR=127.0.0.1, OMP_NUM_THREADS=1 and TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (restarts on gloo reuse
stale store addresses without it: PyTorch issue 135712). Progress streams to stderr; the final table
(median step time, tokens/s, MFU, deviation; measured vs predicted) goes to stdout, or one JSON document to
--json. A plan/world mismatch the executor finds is reported as its one-line error (exit 2).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import typer
from pydantic import BaseModel, ConfigDict, Field

from planner.cli.app import abort, app, err, out, write_json_output
from planner.errors import UserError

DEFAULT_RANKS = 4
"""Gloo ranks of the no-argument run: 4 processes exercise 2-D layouts and finish in seconds on 2 cores."""
DEFAULT_WORKLOAD = {"global_batch": 8, "seq_len": 64, "dtype": "fp32"}
"""Workload of the no-argument run: the tiny model's full context, fp32 as the executor runs on CPU."""
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class RunSummary(BaseModel):
    """Measured vs predicted over a run (medians over steps, the first step left out as warm-up when
    there are more)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plan: str = Field(description="Plan file that was run.")
    layout: str = Field(description="Layout, as `Layout.describe()`.")
    steps: int = Field(description="Steps summarised (count).")
    smoke: bool = Field(description="Toy-size model: predictions are for the full-size model.")
    median_step_time_s: float = Field(description="Measured median step time (s).")
    predicted_step_time_s: float = Field(description="Cost model's step time (s).")
    median_tokens_per_s: float = Field(description="Measured median throughput (tokens/s).")
    predicted_tokens_per_s: float = Field(description="Cost model's throughput (tokens/s).")
    median_mfu: float | None = Field(description="Measured median MFU (fraction); null if the peak is unknown.")
    predicted_mfu: float = Field(description="Cost model's MFU (fraction).")
    deviation: float | None = Field(description="median_step_time_s / predicted_step_time_s - 1 (fraction).")
    peak_memory_bytes: int | None = Field(description="Largest measured peak over steps and ranks (bytes); null on CPU.")
    predicted_peak_memory_bytes: float = Field(description="Cost model's peak memory, max over pipeline stages (bytes).")
    final_loss: float = Field(description="Loss of the last step.")
    metrics: str = Field(description="JSON-lines metrics file of the run.")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _default_plan(nproc: int):
    """The best plan for the tiny model on `nproc` local gloo ranks (the lead's planner.search)."""
    import hardware_profiles as hp
    from planner import search
    from planner.model import preset
    from planner.workload import Workload

    plans = search(preset("tiny"), hp.cluster("local-cpu", gpus=nproc), Workload(**DEFAULT_WORKLOAD), top=1)
    return plans[0]


def _torchrun_cmd(plan_path: Path, run_dir: Path, metrics: Path, args: dict, endpoint: str, rdzv_id: str) -> list[str]:
    host = endpoint.rsplit(":", 1)[0]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(args["nnodes"]),
           "--nproc-per-node", str(args["nproc"]), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
           "--rdzv-id", rdzv_id]
    if host in LOOPBACK:
        cmd += ["--local-addr", "127.0.0.1"]  # workers' MASTER_ADDR: loopback, not the host name
    if args["nnodes"] > 1:
        cmd += ["--node-rank", str(args["node_rank"]), "--rdzv-conf", f"is_host={int(args['node_rank'] == 0)}"]
    cmd += ["-m", "executor", str(plan_path), "--steps", str(args["steps"]), "--run-dir", str(run_dir),
            "--metrics", str(metrics)]
    if args["smoke"]:
        cmd.append("--smoke")
    for flag in ("data", "checkpoint_dir"):
        if args[flag] is not None:
            cmd += [f"--{flag.replace('_', '-')}", str(args[flag])]
    if args["checkpoint_every"]:
        cmd += ["--checkpoint-every", str(args["checkpoint_every"])]
    if args["resume"]:
        cmd.append("--resume")
    return cmd


_AGENT_LOG = re.compile(r"^[DIWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ torch/distributed/")
"""A log line of the torchrun agent itself (glog style: level, date, time, pid, source file)."""


def _held_back(line: str, in_report: bool) -> tuple[bool, bool]:
    """(hold this line?, inside torchrun's failure report from now on?).

    Held: torchrun's own logging and its failure report (an unprefixed traceback; workers' lines carry
    [rankN]:), and the executor's `error:` line, which the CLI repeats itself.
    """
    if in_report or line.startswith("Traceback (most recent call last)"):
        return True, True
    return bool(_AGENT_LOG.match(line)) or line.startswith("error: "), False


def _launch(cmd: list[str], env: dict[str, str], log_path: Path) -> tuple[int, list[str]]:
    """Run torchrun, streaming its output (progress lines, warnings) to our stderr and to `log_path`.

    torchrun's own logging and failure report are held back and returned (see `_held_back`): shown only
    when the failure is not a user error the executor already put in one line.
    """
    held: list[str] = []
    state = {"in_report": False}
    lock = threading.Lock()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)

    def pump(stream, log) -> None:
        for line in stream:
            with lock:
                log.write(line)
                hold, state["in_report"] = _held_back(line, state["in_report"])
                if hold:
                    held.append(line)
                else:
                    sys.stderr.write(line)
                    sys.stderr.flush()

    with open(log_path, "a", encoding="utf-8") as log:
        threads = [threading.Thread(target=pump, args=(s, log), daemon=True) for s in (proc.stdout, proc.stderr)]
        for t in threads:
            t.start()
        rc = proc.wait()
        for t in threads:
            t.join(timeout=10)
    return rc, held


def _summarise(plan, plan_path: Path, metrics: Path, smoke: bool) -> RunSummary:
    rows = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not rows:
        raise UserError("no steps were recorded", where=str(metrics))
    body = rows[1:] if len(rows) > 1 else rows  # the first step pays one-off setup (warm-up)
    step_s = statistics.median(r["step_time_s"] for r in body)
    mfus = [r["mfu"] for r in body if r["mfu"] is not None]
    peaks = [r["peak_memory_bytes"] for r in rows if r.get("peak_memory_bytes") is not None]
    pred = plan.prediction
    return RunSummary(
        plan=str(plan_path), layout=plan.layout.describe(), steps=len(body), smoke=smoke,
        median_step_time_s=step_s, predicted_step_time_s=pred.step_time_s,
        median_tokens_per_s=statistics.median(r["tokens_per_s"] for r in body),
        predicted_tokens_per_s=pred.tokens_per_s,
        median_mfu=statistics.median(mfus) if mfus else None, predicted_mfu=pred.mfu,
        deviation=step_s / pred.step_time_s - 1.0 if pred.step_time_s > 0 else None,
        peak_memory_bytes=max(peaks) if peaks else None, predicted_peak_memory_bytes=pred.peak_memory_bytes,
        final_loss=rows[-1]["loss"], metrics=str(metrics),
    )


def _render(s: RunSummary) -> None:
    from rich.table import Table

    def pct(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.2%}"

    table = Table(title=f"{s.layout}: measured vs predicted ({s.steps} steps{', smoke' if s.smoke else ''})")
    for col in ("", "measured", "predicted"):
        table.add_column(col, justify="right" if col else "left")
    table.add_row("median step time", f"{s.median_step_time_s * 1e3:.2f} ms", f"{s.predicted_step_time_s * 1e3:.2f} ms")
    table.add_row("tokens/s", f"{s.median_tokens_per_s:,.0f}", f"{s.predicted_tokens_per_s:,.0f}")
    table.add_row("MFU", pct(s.median_mfu), pct(s.predicted_mfu))
    gib = 2**30
    measured_mem = "n/a (CPU)" if s.peak_memory_bytes is None else f"{s.peak_memory_bytes / gib:.2f} GiB"
    table.add_row("peak memory", measured_mem, f"{s.predicted_peak_memory_bytes / gib:.2f} GiB")
    table.add_row("deviation (step time)", "n/a" if s.deviation is None else f"{s.deviation:+.1%}", "")
    table.add_row("final loss", f"{s.final_loss:.4f}", "")
    out.print(table)
    if s.smoke:
        err.print("note: --smoke ran a toy-size model; the predictions are for the full-size one", markup=False)


@app.command("run")
def run_command(
    plan_file: Path = typer.Argument(None, metavar="[PLAN.json]", help="Plan to run (default: plan the tiny model here)."),
    steps: int = typer.Option(10, "--steps", min=1, help="Training steps."),
    smoke: bool = typer.Option(False, "--smoke", help="Toy-size model with the plan's layout (runs anywhere)."),
    metrics: Path = typer.Option(None, "--metrics", metavar="FILE", help="JSON-lines metrics (default RUN_DIR/metrics.jsonl)."),
    nnodes: int = typer.Option(1, "--nnodes", min=1, help="Hosts (one torchrun agent each)."),
    node_rank: int = typer.Option(0, "--node-rank", min=0, help="This host's index (0 hosts the rendezvous store)."),
    rdzv_endpoint: str = typer.Option(None, "--rdzv-endpoint", metavar="HOST:PORT", help="Rendezvous (default 127.0.0.1:free port)."),
    nproc: int = typer.Option(None, "--nproc", min=1, help="Ranks on this host (default: world size / nnodes)."),
    run_dir: Path = typer.Option(None, "--run-dir", help="Output folder (default runs/<plan>-<time>)."),
    data: Path = typer.Option(None, "--data", help="Flat uint16/uint32 token file (default: synthetic tokens)."),
    checkpoint_dir: Path = typer.Option(None, "--checkpoint-dir", help="DCP checkpoint folder."),
    checkpoint_every: int = typer.Option(0, "--checkpoint-every", min=0, help="Save every K steps (0: never)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the latest checkpoint (any mesh)."),
    json_out: str = typer.Option(None, "--json", metavar="FILE", help="Write the summary as JSON ('-' = stdout)."),
    force: bool = typer.Option(False, "--force", help="Overwrite the --json file if it exists."),
) -> None:
    """Run a plan with torchrun (or plan and run the tiny model here); show measured vs predicted."""
    from planner.plan import Plan

    if nnodes > 1 and rdzv_endpoint is None:
        abort("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (the same on every host)")
    if rdzv_endpoint is not None and (":" not in rdzv_endpoint or not rdzv_endpoint.rsplit(":", 1)[1].isdigit()):
        abort(f"--rdzv-endpoint {rdzv_endpoint!r}: expected HOST:PORT")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if plan_file is None:
        plan = _default_plan(nproc or DEFAULT_RANKS)
        run_dir = run_dir or Path("runs") / f"default-{stamp}"
        run_dir.mkdir(parents=True, exist_ok=True)
        plan_path = run_dir / "plan.json"
        plan_path.write_text(plan.to_json(), encoding="utf-8")
        err.print(f"planned {plan.layout.describe()} for tiny on {plan.world_size} local gloo ranks", markup=False)
    else:
        plan, plan_path = Plan.load(plan_file), plan_file
        tag = stamp if nnodes == 1 else hashlib.sha256(f"{rdzv_endpoint}".encode()).hexdigest()[:8]
        run_dir = run_dir or Path("runs") / f"{plan_file.stem}-{tag}"
    local = nproc if nproc is not None else plan.world_size // nnodes
    if local * nnodes != plan.world_size:
        abort(f"{plan_path}: the plan needs {plan.world_size} ranks but --nnodes {nnodes} x --nproc {local} "
              f"= {local * nnodes}; fix: make nnodes x nproc equal the plan's world size")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "error.txt").unlink(missing_ok=True)
    metrics = metrics or run_dir / "metrics.jsonl"
    endpoint = rdzv_endpoint or f"127.0.0.1:{_free_port()}"
    rdzv_id = "meshplan-" + hashlib.sha256(f"{plan_path}:{endpoint}".encode()).hexdigest()[:12]
    args = dict(nnodes=nnodes, nproc=local, node_rank=node_rank, steps=steps, smoke=smoke, data=data,
                checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every, resume=resume)
    cmd = _torchrun_cmd(plan_path, run_dir, metrics, args, endpoint, rdzv_id)
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1", PYTHONUNBUFFERED="1")
    if endpoint.rsplit(":", 1)[0] in LOOPBACK:
        env["MASTER_ADDR"] = "127.0.0.1"
    err.print(f"launching {local * nnodes} ranks ({nnodes} node(s)); output in {run_dir}", markup=False)
    rc, held = _launch(cmd, env, run_dir / "launcher.log")
    if rc != 0:
        error_file = run_dir / "error.txt"
        if error_file.is_file():
            abort(error_file.read_text(encoding="utf-8").strip())
        sys.stderr.writelines(held)
        abort(f"torchrun exited with status {rc}; full log: {run_dir / 'launcher.log'}", code=1)
    if not metrics.is_file():
        err.print(f"done; metrics are written on the host that ran rank 0 ({metrics})", markup=False)
        return
    try:
        summary = _summarise(plan, plan_path, metrics, smoke)
    except UserError as exc:
        abort(str(exc))
    if json_out is not None:
        try:
            write_json_output(summary.model_dump_json(indent=2), json_out, force=force)
        except UserError as exc:
            abort(str(exc))
        if json_out == "-":
            return
    _render(summary)
