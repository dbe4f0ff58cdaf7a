"""`planner.layout.numeric.first_match` gives exactly what `np.select` gives (values, dtype, shape), and the command
line pauses the cyclic collector only in its own process, then resumes it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from planner.layout.numeric import first_match, sorted_unique


def _cases(n: int):
    rng = np.random.default_rng(n)
    z = rng.integers(0, 4, n)
    a, b = rng.random(n), rng.random(n).astype(np.float32)
    c = rng.integers(0, 9, n)
    nan = np.where(z == 3, np.nan, -0.0)
    yield [z == 0, z == 1, z == 2], [a, b, c], 0.0  # mixed dtypes: promoted all at once
    yield [z == 0], [1.0], 2.0 * a  # a scalar choice, an array default
    yield [z == 2, z == 1], [b, b], 0.0  # float32 stays float32 beside a Python 0.0
    yield [z <= 1, z <= 2, z == 3], [0.0, np.where(z > 0, 1.0, a), 1.0], 2 * c  # overlapping conditions
    yield [z == 1], [c], 0  # integers stay integers
    yield [z == 1, z == 2], [1.0, 2.0], 0.0  # scalars only: the conditions' shape
    yield [z == 0, z >= 0], [nan, a], np.inf  # NaN and -0.0 kept bit for bit


@pytest.mark.parametrize("n", [1, 7, 1000])
def test_first_match_equals_np_select(n: int) -> None:
    for conditions, choices, default in _cases(n):
        want = np.select(conditions, choices, default)
        got = first_match(conditions, choices, default)
        assert (got.dtype, got.shape) == (want.dtype, want.shape)
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("n", [0, 1, 2, 7, 1000])
def test_sorted_unique_equals_np_unique(n: int) -> None:
    rng = np.random.default_rng(n)
    for values in (rng.integers(-5, 5, n), rng.integers(0, 1 << 62, n) >> rng.integers(0, 62, n),
                   rng.integers(0, 3, (n, 2)).astype(np.int8), rng.random(n) < 0.5, np.round(rng.random(n), 1)):
        want, got = np.unique(values), sorted_unique(values)
        assert (got.dtype, got.shape) == (want.dtype, want.shape)
        assert got.tobytes() == want.tobytes()


def test_first_match_needs_a_choice_per_condition() -> None:
    with pytest.raises(ValueError, match="one choice per condition"):
        first_match([np.array([True])], [], 0.0)


def test_the_command_line_pauses_the_collector_in_its_own_process_only() -> None:
    code = (
        "import gc, time\n"
        "from planner.cli import main as m\n"
        "m._pause_gc(0.2)\n"
        "assert not gc.isenabled()\n"
        "time.sleep(0.6)\n"
        "assert gc.isenabled()\n"
        "gc.disable(); m._pause_gc(0.05); time.sleep(0.3)\n"
        "assert not gc.isenabled()  # a state someone else chose is left alone\n"
        "gc.enable()\n"
        "m.main(['--help'])\n"
        "assert gc.isenabled()  # called with argv: the caller's collector is untouched\n"
        "assert gc.get_freeze_count() == 0  # nor are the caller's objects frozen\n"
    )
    _run_python(code)


def test_the_console_script_leaves_its_objects_to_the_exit_without_a_last_collection() -> None:
    """`main()` as the console script runs it (no argv) freezes what it built once the command is done, so the
    interpreter's exit does not walk it again; the command's output and exit code are unchanged."""
    code = (
        "import gc, sys\n"
        "from planner.cli import main as m\n"
        "sys.argv = ['meshplan', 'profiles']\n"
        "assert gc.get_freeze_count() == 0\n"
        "code = m.main()\n"
        "assert code == 0, code\n"
        "assert gc.get_freeze_count() > 10_000, gc.get_freeze_count()\n"
        "print('frozen', file=sys.stderr)\n"
    )
    proc = _run_python(code)
    assert "frozen" in proc.stderr and "dgx-h100" in proc.stdout


def _run_python(code: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter (the collector's state is per process); it must succeed."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc
