"""Ctrl-C during `meshplan run`: exit 130 with one line, no "I/O operation on closed file" thread tracebacks
and none of the workers' KeyboardInterrupt tracebacks on the terminal (they stay in launcher.log).

The terminal sends SIGINT to the whole foreground process group; the test does the same (`os.killpg`) to a
`meshplan run` whose torchrun is replaced by a child that streams lines to both pipes and, like torchrun's
workers, dies with a KeyboardInterrupt traceback (tests/distributed/test_run_cli.py repeats it with the real
torchrun).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cli_inputs import tiny_plan_json, write

CHILD = (
    "import sys, time\n"
    "for i in range(100000):\n"
    "    print(f'step {i}', flush=True)\n"
    "    print(f'[rank0]: progress {i}', file=sys.stderr, flush=True)\n"
    "    time.sleep(0.005)\n"
)
HARNESS = (
    "import sys\n"
    "from planner.cli import run\n"
    "run._torchrun_cmd = lambda *a, **k: [sys.executable, '-c', {child!r}]\n"
    "from planner.cli.main import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def test_ctrl_c_during_a_run_exits_130_quietly(tmp_path: Path) -> None:
    plan = write(tmp_path / "p.json", tiny_plan_json(4))
    proc = subprocess.Popen([sys.executable, "-c", HARNESS.format(child=CHILD), "run", str(plan), "--run-dir",
                             str(tmp_path / "r")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, start_new_session=True)
    log = tmp_path / "r" / "launcher.log"
    deadline = time.monotonic() + 60
    while not (log.is_file() and log.stat().st_size > 2000) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert log.is_file(), "the run never started"
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "closed file" not in err and "Exception" not in err, err[-3000:]
    assert err.rstrip().splitlines()[-1] == "interrupted", err[-500:]
    assert "KeyboardInterrupt" in log.read_text()  # the child's traceback went to the log only
