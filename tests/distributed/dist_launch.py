"""Launch helpers for the multi-process tests: torchrun on 127.0.0.1 with a free port, or the same ranks forked from
one process that imported torch once (fork_launch.py); CPU/gloo settings."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_env() -> dict[str, str]:
    """Environment of every launch: loopback rendezvous, one thread per rank (2-core machine), fresh store."""
    env = dict(os.environ)
    env.update(
        MASTER_ADDR="127.0.0.1",
        OMP_NUM_THREADS="1",
        TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
        PYTHONUNBUFFERED="1",
    )
    return env


PORT_TAKEN = "Address already in use"


def torchrun(nproc: int, args: list[str], *, timeout_s: float, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """`torchrun --nproc-per-node nproc ARGS` (one node, c10d rendezvous on 127.0.0.1:free port).

    A free port is only free when it is picked: torchrun picks the workers' store port the same way and rank 0
    binds it a second or two later, after importing torch, so a process launched beside it (the other test
    worker's torchrun) can take it first, and rank 0 then fails with EADDRINUSE. That race is the launcher's,
    not the code under test: such a launch is retried once, on new ports; any other failure is returned."""

    def command() -> tuple[list[str], dict[str, str]]:
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--local-addr",
                "127.0.0.1", *args], cpu_env()

    return _launch(command, timeout_s=timeout_s, cwd=cwd)


def forked(nproc: int, args: list[str], *, timeout_s: float, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """The same ranks as `torchrun(nproc, args)`, forked from one process that imported torch and the executor
    once (fork_launch.py): for tests of what the ranks compute, not of the launcher. Same port-race retry."""

    def command() -> tuple[list[str], dict[str, str]]:
        return [sys.executable, str(Path(__file__).with_name("fork_launch.py")), str(nproc), *args], {
            **cpu_env(), "MASTER_PORT": str(free_port())}

    return _launch(command, timeout_s=timeout_s, cwd=cwd)


def _launch(command, *, timeout_s: float, cwd: Path) -> subprocess.CompletedProcess:
    """Runs `command()` (a fresh argv and environment per attempt); once more if rank 0 found its port taken."""
    for attempt in range(2):
        cmd, env = command()
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode == 0 or PORT_TAKEN not in proc.stderr or attempt:
            return proc
    return proc


def tail(proc: subprocess.CompletedProcess, chars: int = 4000) -> str:
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout[-chars:]}\n--- stderr ---\n{proc.stderr[-chars:]}"
