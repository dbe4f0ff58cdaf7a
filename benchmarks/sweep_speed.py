"""Whole-process time of a 100-point `meshplan sweep`: 5 clusters x 20 sizes of Llama 3 70B (target < 30 s).

    .venv/bin/python benchmarks/sweep_speed.py
    .venv/bin/python benchmarks/sweep_speed.py --sizes 10      # 5 x 10 points

The sweep runs as a user types it, three times: with the collective-coefficient disk cache off, with it on
in an empty folder (a machine that has never planned for these clusters), and again with the folder that run
filled (every later sweep on these clusters). Each line gives wall and CPU seconds of the whole process (user +
sys of the child, `resource.getrusage(RUSAGE_CHILDREN)`), the points that have a plan, and the median and
slowest per-point search time the sweep itself recorded. The load average is printed before and after: say
when the machine was shared.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_speed import load_note, meshplan_command, run_timed  # noqa: E402

CLUSTERS = ("dgx-h100", "gb200-nvl72", "dgx-a100", "hgx-h200", "dgx-h100-oversub")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, default=20, help="GPU counts per cluster: 64, 128, ..., 64 x SIZES")
    args = parser.parse_args()
    gpus = ",".join(str(64 * k) for k in range(1, args.sizes + 1))
    print(f"# {load_note()}; other jobs may share the machine: compare CPU columns, not only wall")
    print(f"# llama3-70b, 4 Mi tokens of 8192 per step, on {', '.join(CLUSTERS)} x --gpus {gpus}")
    print(f"{'run':34s} {'points':>6s} {'ok':>4s} {'wall s':>7s} {'CPU s':>6s} {'median point s':>15s} {'slowest s':>9s}")
    with tempfile.TemporaryDirectory() as tmp:
        cache = str(Path(tmp) / "cache")
        for label, folder in (("disk cache off", "off"), ("disk cache on, empty", cache),
                              ("disk cache on, filled", cache)):
            csv = Path(tmp) / "sweep.csv"
            cmd = [*meshplan_command(), "sweep", "--cluster", ",".join(CLUSTERS), "--gpus", gpus,
                   "--tokens", "15e12", "--csv", str(csv), "--force"]
            _, wall, cpu = run_timed(cmd, cwd=tmp, env=dict(os.environ, MESHPLAN_CACHE_DIR=folder, COLUMNS="200"))
            frame = pd.read_csv(csv)
            print(f"{label:34s} {len(frame):6d} {int((frame['status'] == 'ok').sum()):4d} {wall:7.2f} {cpu:6.2f} "
                  f"{frame['search_s'].median():15.3f} {frame['search_s'].max():9.3f}", flush=True)
    print(f"# {load_note()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
