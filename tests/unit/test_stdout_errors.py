"""stdout and stderr failures are the user's condition, not meshplan bugs (planner.cli._streams).

Run as real processes, since the behaviour is about file descriptors and interpreter shutdown:
- `> /dev/full` (ENOSPC on write or flush), for tables, `--json -`, `--csv -` and `--help`: exactly one line
  naming stdout and the OS error, exit 2, no traceback and no "Exception ignored" at shutdown;
- `| head -1` (the reader closes the pipe): exit 141 (128 + SIGPIPE) with nothing on stderr;
- an output that is a device failing (`--json /dev/full`): one line naming it, exit 2;
- `--json /dev/stdout`: the JSON document is the only thing on stdout (it is stdout).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TINY = ["--model", "tiny", "--cluster", "local-cpu", "--gpus", "4", "--seq-len", "64", "--global-batch", "8"]
FULL = [["plan", *TINY], ["plan", *TINY, "--json", "-"], ["compare", *TINY, "--top", "2", "--csv", "-"],
        ["schema"], ["profiles"], ["plan", "--help"]]


def meshplan(args: list[str], stdout, cwd: Path) -> subprocess.CompletedProcess:  # noqa: ANN001
    return subprocess.run([sys.executable, "-m", "planner.cli.main", *args], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, cwd=cwd, timeout=120, env={**os.environ, "COLUMNS": "80"})


@pytest.mark.parametrize("args", FULL, ids=lambda a: " ".join(a[:1] + a[-2:]))
def test_a_full_stdout_is_one_line_exit_2(tmp_path: Path, args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        proc = meshplan(args, full, tmp_path)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr
    assert lines == ["error: stdout: cannot write (No space left on device); fix: free space on the device "
                     "stdout goes to, or redirect it elsewhere"], proc.stderr


@pytest.mark.parametrize("args", [["plan", *TINY], ["profiles"], ["plan", "--help"], ["schema"]],
                         ids=lambda a: a[0] + (" --help" if "--help" in a else ""))
def test_a_closed_pipe_exits_quietly(tmp_path: Path, args: list[str]) -> None:
    """Like `meshplan plan | head -1`: the reader goes away (here before the first line: whatever the output's
    size, the first write meets the closed pipe)."""
    proc = subprocess.Popen([sys.executable, "-m", "planner.cli.main", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=tmp_path, env={**os.environ, "COLUMNS": "80"})
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert err == "", err


def test_a_failing_device_output_is_one_line(tmp_path: Path) -> None:
    proc = meshplan(["plan", *TINY, "--json", "/dev/full"], subprocess.DEVNULL, tmp_path)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: /dev/full: cannot write (No space left on device)"), lines


def test_json_to_dev_stdout_is_the_only_output(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    with open(out, "w") as fh:
        proc = meshplan(["plan", *TINY, "--json", "/dev/stdout"], fh, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["layout"]["dp"] >= 1  # nothing but the document
