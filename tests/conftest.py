"""Shared pytest settings: hypothesis profiles sized for the 2-core CI machine."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], derandomize=True
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# The collective-coefficient disk cache (planner.cost.comm_cache) goes to a fresh folder per test session,
# never the developer's own cache; commands the tests start as processes inherit it.
if "MESHPLAN_CACHE_DIR" not in os.environ:
    os.environ["MESHPLAN_CACHE_DIR"] = tempfile.mkdtemp(prefix="meshplan-test-cache-")
    atexit.register(shutil.rmtree, os.environ["MESHPLAN_CACHE_DIR"], ignore_errors=True)
