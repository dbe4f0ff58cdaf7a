"""Loopback ports for test launches: a free port, and one retry of a launch whose port was taken meanwhile.

A free port is only free when it is picked: the launched process binds it a second or two later, after importing
torch, so a process started beside it (the other test worker's launch) can take it first, and the launch then
fails with EADDRINUSE. That race is the test harness's, not the code under test: such a launch is retried once,
on a new port; any other failure is returned as it is."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

PORT_TAKEN = "Address already in use"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def retrying_port(attempt: Callable[[], subprocess.CompletedProcess]) -> subprocess.CompletedProcess:
    """`attempt()` (which takes a fresh port each time); once more if the launched process found its port taken."""
    proc = attempt()
    if proc.returncode != 0 and PORT_TAKEN in proc.stderr:
        proc = attempt()
    return proc


def run_retrying_port(command: Callable[[], tuple[list[str], dict[str, str]]], *, timeout_s: float,
                      cwd: Path) -> subprocess.CompletedProcess:
    """Runs `command()` (a fresh argv and environment per attempt, so a fresh port); once more if the launched
    process found its port taken."""

    def attempt() -> subprocess.CompletedProcess:
        cmd, env = command()
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)

    return retrying_port(attempt)
