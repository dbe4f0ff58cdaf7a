"""Launch helpers for the multi-process tests: torchrun on 127.0.0.1 with a free port, or the same ranks forked from
one process that imported torch once (fork_launch.py); CPU/gloo settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from loopback_ports import free_port, run_retrying_port

REPO = Path(__file__).resolve().parents[2]


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


def torchrun(nproc: int, args: list[str], *, timeout_s: float, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """`torchrun --nproc-per-node nproc ARGS` (one node, c10d rendezvous on 127.0.0.1:free port).

    torchrun picks the workers' store port the way `free_port` does and rank 0 binds it after importing torch:
    a launch whose port was taken meanwhile is retried once, on new ports (`loopback_ports`)."""

    def command() -> tuple[list[str], dict[str, str]]:
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--local-addr",
                "127.0.0.1", *args], cpu_env()

    return run_retrying_port(command, timeout_s=timeout_s, cwd=cwd)


def forked(nproc: int, args: list[str], *, timeout_s: float, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """The same ranks as `torchrun(nproc, args)`, forked from one process that imported torch and the executor
    once (fork_launch.py): for tests of what the ranks compute, not of the launcher. Same port-race retry."""

    def command() -> tuple[list[str], dict[str, str]]:
        return [sys.executable, str(Path(__file__).with_name("fork_launch.py")), str(nproc), *args], {
            **cpu_env(), "MASTER_PORT": str(free_port())}

    return run_retrying_port(command, timeout_s=timeout_s, cwd=cwd)


def tail(proc: subprocess.CompletedProcess, chars: int = 4000) -> str:
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout[-chars:]}\n--- stderr ---\n{proc.stderr[-chars:]}"
