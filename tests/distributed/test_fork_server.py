"""The fork server behind dist_launch.forked (fork_launch.py --serve) launches as a fresh launcher would: each
launch in its own folder and environment, from the same freshly imported state (nothing one launch changes
reaches the next), with the first failing rank's exit status; a launch past its timeout raises
subprocess.TimeoutExpired and leaves no rank running. A private server, so the shared one stays up."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from dist_launch import _ForkServer, cpu_env

pytestmark = pytest.mark.distributed

RANK = """
import os, sys, time
from pathlib import Path
import torch
line = " ".join(map(str, ("rank", os.environ["RANK"], "of", os.environ["WORLD_SIZE"], "in", os.getcwd(),
                           os.environ.get("MARK"), getattr(torch, "_left_by_a_launch", None))))
os.write(1, (line + "\\n").encode())  # one write: the ranks share the output file, and print writes piece by piece
torch._left_by_a_launch = "changed"  # a later launch must not see it
Path(f"pid{os.environ['RANK']}").write_text(str(os.getpid()))
if sys.argv[1] == "sleep":
    time.sleep(120)
sys.exit(int(sys.argv[1]) if os.environ["RANK"] == "1" else 0)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


@pytest.mark.timeout(120)
def test_launches_are_isolated_and_a_timeout_stops_the_ranks(tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    server = _ForkServer()
    try:
        for n, (mark, code) in enumerate([("first", "0"), ("second", "3")]):
            cwd = tmp_path / mark
            cwd.mkdir()
            env = {**cpu_env(), "MASTER_PORT": "1", "MARK": mark}
            proc = server.launch(2, [str(script), code], env, timeout_s=60, cwd=cwd)
            assert proc.returncode == int(code), proc.stderr[-2000:]
            assert sorted(proc.stdout.splitlines()) == [f"rank {r} of 2 in {cwd} {mark} None" for r in (0, 1)]
            if n == 0:
                first_server = server.proc.pid
        assert server.proc.pid == first_server  # one server for both launches

        cwd = tmp_path / "hung"
        cwd.mkdir()
        with pytest.raises(subprocess.TimeoutExpired):
            server.launch(2, [str(script), "sleep"], {**cpu_env(), "MASTER_PORT": "1"}, timeout_s=8, cwd=cwd)
        assert server.proc is None
        pids = [int((cwd / f"pid{r}").read_text()) for r in (0, 1)]
        for _ in range(50):
            if not any(_alive(p) for p in pids):
                break
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids), "a rank outlived its launch's timeout"
    finally:
        server.stop()
