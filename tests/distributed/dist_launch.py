"""Launch helpers for the multi-process tests: torchrun on 127.0.0.1 with a free port, or the same ranks forked from
one process that imported torch once (fork_launch.py, run as a fork server per test process); CPU/gloo settings."""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loopback_ports import free_port, retrying_port, run_retrying_port

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
    once (fork_launch.py): for tests of what the ranks compute, not of the launcher. Same port-race retry.

    The launches of one test process go through one fork server (`fork_launch.py --serve`), which imports
    torch and the executor once for all of them instead of once per launch; each launch still starts from
    that freshly imported state. A launch past `timeout_s` raises subprocess.TimeoutExpired, as
    subprocess.run does, and takes the server (and with it the launch) down; the next launch starts another."""
    return retrying_port(lambda: _SERVER.launch(nproc, args, {**cpu_env(), "MASTER_PORT": str(free_port())},
                                                timeout_s=timeout_s, cwd=cwd))


class _ForkServer:
    """The client side of `fork_launch.py --serve`: started on first use, one request at a time."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.cmd = [sys.executable, str(Path(__file__).with_name("fork_launch.py")), "--serve"]

    def launch(self, nproc: int, args: list[str], env: dict[str, str], *, timeout_s: float,
               cwd: Path) -> subprocess.CompletedProcess:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(self.cmd, cwd=REPO, env=cpu_env(), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE)
        with tempfile.TemporaryDirectory(prefix="fork-launch-") as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            request = {"nproc": nproc, "target": list(args), "env": env, "cwd": str(cwd), "stdout": str(out),
                       "stderr": str(err)}
            try:
                self.proc.stdin.write((json.dumps(request) + "\n").encode())
                self.proc.stdin.flush()
                rc = self._answer(timeout_s)
            except TimeoutError:
                self.stop()
                raise subprocess.TimeoutExpired(self.cmd, timeout_s, output=_read(out), stderr=_read(err)) from None
            except BaseException:  # a test interrupted: no answer may be left for the next launch
                self.stop()
                raise
            return subprocess.CompletedProcess([*self.cmd, str(nproc), *args], rc, _read(out), _read(err))

    def _answer(self, timeout_s: float) -> int:
        """The server's answer for the launch in flight, its exit status (any other line the server printed,
        such as an imported module's notice, is passed over)."""
        fd, buf, deadline = self.proc.stdout.fileno(), b"", time.monotonic() + timeout_s
        while True:
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.startswith(b'{"rc": '):
                    return int(json.loads(line)["rc"])
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(f"launch still running after {timeout_s} s")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"the fork server ended (exit {self.proc.wait()}) before answering")
            buf += chunk

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


_SERVER = _ForkServer()
atexit.register(_SERVER.stop)


def tail(proc: subprocess.CompletedProcess, chars: int = 4000) -> str:
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout[-chars:]}\n--- stderr ---\n{proc.stderr[-chars:]}"
