"""Shared pytest settings: hypothesis profiles sized for the 2-core CI machine, the built-in local-cpu
profile for every test, and the order tests run in.

Order: the fast CPU unit tests (tests/unit) first, then the other single-process tests (notebooks), then the
multi-process tests (`distributed` marker: torchrun launches, tens of seconds each). A broken unit test then
fails the run in its first minutes instead of after a quarter of an hour of launches; within each tier the
collection order (file by file) is kept, so module-scoped fixtures are still set up once.

Workers: the suite runs on two pytest-xdist workers (`-n 2 --dist loadfile` in pyproject.toml), which take whole
files in this order. A unit test is one process on one core, and a launch waits on its ranks' start-up and
rendezvous: one worker alone leaves a core idle for much of the run. `-n 0` runs everything in one process.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], derandomize=True
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
# The suite is the same run everywhere (derandomized: the README's test command, CI, a contributor's machine);
# MESHPLAN_FUZZ_RANDOM=1 draws fresh inputs on each run, for hunting (with MESHPLAN_FUZZ_SCALE for more of them).
settings.load_profile("dev" if os.environ.get("MESHPLAN_FUZZ_RANDOM") else "ci")

# A suite started in the background (`cmd &` in a non-interactive shell, nohup) inherits SIGINT ignored, and so would
# every process it starts; the tests that send a terminal's Ctrl-C need it as a terminal leaves it.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The collective-coefficient disk cache (planner.cost.comm_cache) goes to a fresh folder per test session,
# never the developer's own cache; commands the tests start as processes inherit it.
if "MESHPLAN_CACHE_DIR" not in os.environ:
    os.environ["MESHPLAN_CACHE_DIR"] = tempfile.mkdtemp(prefix="meshplan-test-cache-")
    atexit.register(shutil.rmtree, os.environ["MESHPLAN_CACHE_DIR"], ignore_errors=True)

UNIT = Path(__file__).resolve().parent / "unit"

# The CLI's `local-cpu` is this machine as measured (planner.calibration.local_cache): tests use the built-in
# profile instead, so their plans do not depend on the machine's speed (subprocesses inherit it).
os.environ["MESHPLAN_LOCAL_CPU"] = "builtin"


def tier(item: pytest.Item) -> int:
    """0: unit tests, 1: other single-process tests, 2: distributed (multi-process) tests."""
    if item.get_closest_marker("distributed") is not None:
        return 2
    return 0 if UNIT in Path(str(item.path)).resolve().parents else 1


LONGEST_FIRST = ("test_faults.py", "test_run_replan.py", "test_equivalence.py", "test_run_cli.py")
"""The distributed files of one to three minutes each (several launches), longest first (measured on the CI machine
with the whole suite): handed to the workers first, so that the run does not end with one worker on a long file
while the other has nothing left. The shorter ones (under a minute) fill in after them (test_checkpoint_resume.py
among them since its seven launches share one fork server: about 30 s)."""


def order(item: pytest.Item) -> tuple[int, int]:
    """(tier, the file's place among the longest multi-process files; the others after them, in file order)."""
    name = Path(str(item.path)).name
    rank = LONGEST_FIRST.index(name) if tier(item) == 2 and name in LONGEST_FIRST else len(LONGEST_FIRST)
    return tier(item), rank


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=order)  # stable: file order within a tier
