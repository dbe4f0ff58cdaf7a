"""`meshplan export --check`: load an export with the real framework, in its own interpreter.

    outcome = check_export(result, python="/opt/megatron-env/bin/python")   # CheckOutcome(ok, message)

The checkers (planner/export/checks/*_check.py) import only the framework and the standard library, so they
run in any interpreter that has the framework: this one when it can import it, or the one `--python` names
(a separate environment, e.g. the one benchmarks/framework_env.sh builds). Each prints one JSON line; this
module runs it as a subprocess (the frameworks import torch, which the planner never does) and turns the
answer into one line.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from planner.errors import UserError

if TYPE_CHECKING:
    from planner.export import ExportResult

CHECKS_DIR = Path(__file__).parent / "checks"
CHECKERS = {"torchtitan": ("torchtitan_check.py", "torchtitan"), "megatron": ("megatron_check.py", "megatron.core"),
            "deepspeed": ("deepspeed_check.py", "deepspeed")}
"""Export target -> (checker script, module it needs)."""
TIMEOUT_S = 900.0
"""A dry build of the largest plans (Llama 3 405B on 512 fake ranks) takes minutes on a busy 2-core machine."""


@dataclass(frozen=True)
class CheckOutcome:
    ok: bool
    message: str


def check_export(result: ExportResult, *, python: str | None = None, megatron_lm: str | None = None,
                 timeout_s: float = TIMEOUT_S) -> CheckOutcome:
    """Run the real framework's checker on `result` (a torchtitan, megatron or deepspeed export)."""
    from planner.frameworks import framework

    if result.target not in CHECKERS:
        raise UserError(f"--check loads TorchTitan, Megatron and DeepSpeed exports, not {result.target}",
                        fix="meshplan run checks a plan against the world it finds when it starts")
    if result.plan is None:
        raise UserError("the export carries no plan to check against")
    script, module = CHECKERS[result.target]
    profile = framework(result.target)
    if python is None:
        if importlib.util.find_spec(module.split(".")[0]) is None:
            return CheckOutcome(False, f"{profile.label()} is not installed in this Python ({sys.executable}); "
                                       f"install it with `{profile.pip}`, or point --python at an environment that has it")
        python = sys.executable
    lay = result.plan.layout
    with tempfile.TemporaryDirectory(prefix="meshplan-check-") as folder:
        path = Path(folder) / ("export.json" if result.target == "deepspeed" else "export.sh")
        path.write_text(result.text, encoding="utf-8")
        cmd = [python, str(CHECKS_DIR / script), str(path), "--world-size", str(result.plan.world_size)]
        if result.target == "deepspeed":
            cmd += ["--tp", str(lay.tp), "--pp", str(lay.pp)]
        if result.target == "megatron" and megatron_lm:
            cmd += ["--megatron-lm", megatron_lm]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=folder)
        except FileNotFoundError:
            raise UserError(f"no Python interpreter at {python}", where="--python",
                            fix="give the python of the environment that has the framework") from None
        except subprocess.TimeoutExpired:
            return CheckOutcome(False, f"{profile.label()} did not finish building the export in {timeout_s:.0f} s")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = " ".join(done.stderr.split())[-300:]
        return CheckOutcome(False, f"the {result.target} checker gave no answer (exit {done.returncode}): {tail}")
    from hardware_profiles.reader import InputFileError, parse_json

    try:  # the one bounded JSON reader (hardware_profiles.reader), like every input meshplan takes
        answer = parse_json(lines[-1], where=f"the {result.target} checker's answer")
    except InputFileError as exc:
        return CheckOutcome(False, str(exc))
    if done.returncode == 3:
        return CheckOutcome(False, f"{answer['message']}; install it with `{profile.pip}`")
    return CheckOutcome(bool(answer["ok"]), str(answer["message"]))


__all__ = ["CHECKERS", "CheckOutcome", "check_export"]
