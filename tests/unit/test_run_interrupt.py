"""Ctrl-C during `meshplan run`: exit 130 with one line, no "I/O operation on closed file" thread tracebacks
and none of the job's KeyboardInterrupt tracebacks on the terminal (they stay in launcher.log); SIGTERM and SIGHUP
to meshplan stop the job with the same signal (exit 128 + n, one line).

The terminal sends SIGINT to the whole foreground process group; the test does the same (`os.killpg`) to a
`meshplan run` whose torchrun is replaced by a child that streams lines to both pipes and, like an interrupted
torchrun, dies with a KeyboardInterrupt traceback (tests/distributed/test_run_cli.py repeats it with the real
torchrun). The child writes each stderr line in two parts with a pause between them, so the interrupt almost
always lands mid-line and the traceback arrives glued after a progress line's text, which no content rule can tell
from progress: only the order (stop relaying, then signal the job) keeps it off the terminal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_inputs import tiny_plan_json, write

CHILD = (
    "import os, signal, sys, time\n"
    "from pathlib import Path\n"
    "def stopped(signum, frame):\n"
    "    Path('child_stopped_by').write_text(signal.Signals(signum).name)\n"
    "    sys.exit(1)\n"
    "for sig in (signal.SIGTERM, signal.SIGHUP):\n"
    "    signal.signal(sig, stopped)\n"
    "Path('child_pid').write_text(str(os.getpid()))\n"
    "for i in range(100000):\n"
    "    print(f'step {i}', flush=True)\n"
    "    sys.stderr.write(f'[rank0]: progress {i}'); sys.stderr.flush()\n"
    "    time.sleep(0.005)\n"
    "    sys.stderr.write(' done\\n'); sys.stderr.flush()\n"
)
HARNESS = (
    "import sys\n"
    "from planner.cli import run\n"
    "run._torchrun_cmd = lambda *a, **k: [sys.executable, '-c', {child!r}]\n"
    "from planner.cli.main import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _start_run(tmp_path: Path) -> subprocess.Popen:
    """`meshplan run` with the fake torchrun, in a session of its own (as a terminal's foreground job is a process
    group of its own), once the child has streamed a few KB into launcher.log."""
    plan = write(tmp_path / "p.json", tiny_plan_json(4))
    proc = subprocess.Popen([sys.executable, "-c", HARNESS.format(child=CHILD), "run", str(plan), "--run-dir",
                             str(tmp_path / "r")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, start_new_session=True)
    log = tmp_path / "r" / "launcher.log"
    deadline = time.monotonic() + 60
    while not (log.is_file() and log.stat().st_size > 2000) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert log.is_file(), "the run never started"
    return proc


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_ctrl_c_during_a_run_exits_130_quietly(tmp_path: Path) -> None:
    proc = _start_run(tmp_path)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "closed file" not in err and "Exception" not in err, err[-3000:]
    assert err.rstrip().splitlines()[-1] == "interrupted", err[-500:]
    assert "KeyboardInterrupt" in (tmp_path / "r" / "launcher.log").read_text()  # the job's traceback: log only
    assert _gone(int((tmp_path / "child_pid").read_text()))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_sigterm_and_sighup_stop_the_job_with_the_same_signal(tmp_path: Path, sig: signal.Signals) -> None:
    """A scheduler's SIGTERM (or the terminal closing) reaches meshplan alone, since torchrun runs in a session of
    its own: meshplan forwards it, waits for the job to stop and exits as the signal would (128 + n)."""
    proc = _start_run(tmp_path)
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err[-3000:]
    assert err.rstrip().splitlines()[-1].startswith(f"stopped by {sig.name}; full log: "), err[-500:]
    assert "Traceback" not in err, err[-3000:]
    assert (tmp_path / "child_stopped_by").read_text() == sig.name
    assert _gone(int((tmp_path / "child_pid").read_text()))
