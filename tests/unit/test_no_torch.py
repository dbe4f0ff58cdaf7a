"""planner and hardware_profiles must never import torch (they run where torch is absent or slow to load)."""

from __future__ import annotations

import subprocess
import sys


def test_planner_and_profiles_do_not_import_torch() -> None:
    code = (
        "import sys, planner, planner.api, planner.cli.main, hardware_profiles, planner.topology, planner.model\n"
        "planner.cli.main._register_commands()\n"
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
        "print(','.join(bad))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"torch modules imported: {proc.stdout.strip()} {proc.stderr[-2000:]}"
