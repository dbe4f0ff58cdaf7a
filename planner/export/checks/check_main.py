"""The command line every framework checker shares (standard library only; it runs in the framework's
interpreter): one export, or a batch of them in one process so the framework is imported once.

    python X_check.py EXPORT --world-size N [--tp T --pp P] [--megatron-lm DIR]
    python X_check.py --batch CASES.jsonl      # one {"path", "world_size", "tp", "pp"} object per line

Prints one JSON line {"path", "ok", "message"} per export. Exit status (single export): 0 it builds, 1 the
framework refuses it, 3 the framework is not installed; a batch exits 0 once every case has been answered.
Each case runs in a child forked after the framework is imported: the process groups, meshes, environment
variables and module caches one build leaves behind cannot leak into the next.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import traceback
from collections.abc import Callable


def run(check: Callable[..., str], reset: Callable[[], None], probe: Callable[[], None]) -> int:
    """Answer every case; `probe` imports the framework (ImportError: not installed)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("export", nargs="?")
    parser.add_argument("--world-size", type=int)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--megatron-lm", default=os.environ.get("MEGATRON_LM"))
    parser.add_argument("--batch")
    a = parser.parse_args()
    try:
        probe()
    except ImportError as exc:
        print(json.dumps({"path": a.export, "ok": False, "message": f"the framework is not importable here ({exc})"}))
        return 3
    if a.batch:
        with open(a.batch, encoding="utf-8") as f:
            cases = [json.loads(line) for line in f if line.strip()]
    else:
        cases = [{"path": a.export, "world_size": a.world_size, "tp": a.tp, "pp": a.pp}]
    ok = True
    for case in cases:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork() if hasattr(os, "fork") else 0
        if pid == 0:  # the child (or the only process where there is no fork)
            answer = _one(check, case, a.megatron_lm)
            print(json.dumps({"path": case["path"], **answer}), flush=True)
            if hasattr(os, "fork"):
                sys.stderr.flush()
                os._exit(0 if answer["ok"] else 1)
            ok &= answer["ok"]
            with contextlib.suppress(Exception):
                reset()
            continue
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code not in (0, 1):  # the child died before answering (a crash inside the framework)
            print(json.dumps({"path": case["path"], "ok": False, "message": f"the check crashed (exit {code})"}),
                  flush=True)
        ok &= code == 0
    return 0 if a.batch or ok else 1


def _one(check: Callable[..., str], case: dict, megatron_lm: str | None) -> dict:
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            message = check(case["path"], int(case["world_size"]), tp=int(case.get("tp", 1)),
                            pp=int(case.get("pp", 1)), megatron_lm=megatron_lm)
    except SystemExit as exc:  # an argument parser (tyro, argparse) refusing the arguments
        return {"ok": False, "message": f"the framework rejected the arguments (exit {exc.code}): "
                + " ".join(log.getvalue().split())[-400:]}
    except Exception as exc:  # what the framework raises is the answer, whatever its type
        traceback.print_exc()  # the record, on stderr; the one-line answer goes to stdout
        return {"ok": False, "message": f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"}
    return {"ok": True, "message": message}
