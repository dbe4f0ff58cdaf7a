"""Start the measuring processes: `torchrun ... -m executor.calibrate` as a subprocess (no torch import here).

One host, c10d rendezvous on 127.0.0.1 at a free port, OMP_NUM_THREADS=1 per process (how `meshplan run`
starts CPU ranks, so the device measured is the device trained on) and TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
(see planner.cli.run). Rank 0's `@@progress DONE TOTAL LABEL` lines are handed to `on_progress`; everything
else goes to a log whose tail is shown if the measurement fails.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from hardware_profiles.reader import read_json
from planner.errors import UserError

DEFAULT_CPU_PROCESSES = 4
"""Processes measured on a host without GPUs: `meshplan run`'s default gloo world."""


def gpu_count() -> int:
    """NVIDIA GPUs on this host (`nvidia-smi -L`), 0 when there is no driver."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def default_nproc() -> int:
    return gpu_count() or DEFAULT_CPU_PROCESSES


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(nproc: int, quick: bool, on_progress: Callable[[int, int, str], None] | None = None,
            timeout_s: float = 900.0) -> dict:
    """Run `executor.calibrate` on `nproc` local processes; returns its JSON document."""
    if nproc < 2:
        raise UserError(f"--nproc {nproc}: collectives need at least 2 processes", where="--nproc", fix="use --nproc 2 or more")
    with tempfile.TemporaryDirectory(prefix="meshplan-calibrate-") as tmp:
        out = Path(tmp) / "raw.json"
        log_path = Path(tmp) / "calibrate.log"
        # Every listening socket on 127.0.0.1 (planner.rendezvous): the rendezvous store runs in a helper process
        # bound to loopback and torchrun joins it as a client; rank 0 binds the workers' store itself.
        from planner.rendezvous import LoopbackStore, loopback_sockets

        store = LoopbackStore.start(Path(tmp) / "rendezvous.log")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
               "--rdzv-backend", "c10d", "--rdzv-endpoint", store.endpoint, "--rdzv-conf", "is_host=0",
               "--local-addr", "127.0.0.1",
               "-m", "executor.calibrate", "--out", str(out)] + (["--quick"] if quick else [])
        env = dict(os.environ, OMP_NUM_THREADS="1", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1", PYTHONUNBUFFERED="1",
                   MASTER_ADDR="127.0.0.1")
        env.update({k: v for k, v in loopback_sockets().items() if k not in os.environ})
        try:
            with open(log_path, "w", encoding="utf-8") as log:
                proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1)
                assert proc.stdout is not None
                for line in proc.stdout:
                    if line.startswith("@@progress ") and on_progress is not None:
                        _, done, total, label = (line.rstrip("\n").split(" ", 3) + [""])[:4]
                        on_progress(int(done), int(total), label)
                    elif not line.startswith("@@progress "):
                        log.write(line)
                try:
                    rc = proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    raise UserError(f"calibration did not finish in {timeout_s:.0f} s", where="meshplan calibrate",
                                    fix="retry with --quick, or on a less busy machine") from None
        finally:
            store.stop()
        if rc != 0 or not out.is_file():
            tail = " | ".join(line for line in log_path.read_text(encoding="utf-8").splitlines()[-6:] if line.strip())
            raise RuntimeError(f"torchrun -m executor.calibrate exited with status {rc}: {tail[-600:]}")
        return read_json(out, what="calibration result")
