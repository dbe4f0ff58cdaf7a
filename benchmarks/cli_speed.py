"""Whole-process time of the commands a user types: what a user waits for, start-up included.

    .venv/bin/python benchmarks/cli_speed.py
    .venv/bin/python benchmarks/cli_speed.py --runs 9

Each command runs as its own process, once untimed (warm file cache, compiled .pyc files, and the
collective-coefficient disk cache filled in a fresh folder: what a user sees from the second command on a
cluster on; search_speed.py shows the first), then `--runs` times; the table shows the median wall seconds and the median CPU seconds of the child (user + sys, from
`resource.getrusage(RUSAGE_CHILDREN)`), which other jobs on the machine disturb far less than wall time.
The load average is printed before and after: say when the machine was shared.

Commands: `meshplan --help`, `meshplan plan` with no arguments (the built-in example), `plan` for the
largest cases of search_speed.py, `compare --top 5`, `explain` and `export` of a plan written beforehand
(untimed), and a small `sweep`. Targets (issue 15): `--help` < 0.3 s, every `plan` < 1.0 s wall on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_speed import cases, load_note, median_runs, meshplan_command, model_file, run_timed  # noqa: E402

LARGEST = ("llama3-405b on 16,384", "530B on 5,120", "llama3-70b on 65,536")
"""The search_speed.py cases timed here as whole `meshplan plan` commands (the largest clusters)."""


def commands(tmp: Path, env: dict[str, str]) -> list[tuple[str, list[str]]]:
    """(label, arguments after `meshplan`) for every timed command; writes the plan file they read."""
    plan_file, torchtitan_plan = tmp / "plan.json", tmp / "plan-torchtitan.json"
    run_timed([*meshplan_command(), "plan", "--top", "1", "--json", str(plan_file)], cwd=tmp, env=env)
    # What a TorchTitan user exports: a plan searched inside TorchTitan's features (the default plan is made for
    # `meshplan run` and may use what TorchTitan lacks, e.g. ZeRO-1, which export refuses with a one-line error).
    run_timed([*meshplan_command(), "plan", "--top", "1", "--framework", "torchtitan", "--json", str(torchtitan_plan)],
              cwd=tmp, env=env)
    out = [("meshplan --help", ["--help"]), ("meshplan plan", ["plan"])]
    for case in cases():
        if case.label.startswith(LARGEST):
            out.append((f"meshplan plan: {case.label}", ["plan", *case.cli_args(model_file(case, tmp)), "--top", "1"]))
    out += [
        ("meshplan compare --top 5", ["compare", "--top", "5"]),
        ("meshplan explain plan.json", ["explain", str(plan_file)]),
        ("meshplan export plan-torchtitan.json --to torchtitan", ["export", str(torchtitan_plan), "--to", "torchtitan"]),
        ("meshplan sweep --nodes 8,16,32,64 (4 points)", ["sweep", "--nodes", "8,16,32,64"]),
    ]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per command (median)")
    parser.add_argument("--only", action="append", default=[], help="only commands whose label contains this")
    args = parser.parse_args()
    print(f"# {load_note()}; other jobs may share the machine: compare CPU columns, not only wall")
    print(f"# median of {args.runs} runs after one untimed warm-up; CPU = user + sys of the child process")
    print(f"{'command':72s} {'wall s':>7s} {'CPU s':>6s}")
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, COLUMNS="200", MESHPLAN_CACHE_DIR=str(Path(tmp) / "cache"))
        for label, argv in commands(Path(tmp), env):
            if args.only and not any(o in label for o in args.only):
                continue
            wall, cpu = median_runs([*meshplan_command(), *argv], args.runs, cwd=tmp, env=env)
            print(f"{label:72s} {wall:7.3f} {cpu:6.3f}", flush=True)
    print(f"# {load_note()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
