"""Everything `meshplan run` checks before it launches anything, and the calibration hint after a run.

Each failure is one line and exit 2, with nothing started:
- `--rdzv-endpoint HOST:PORT`: a port in 1..65535 and a host name that resolves;
- the executor's own options (`--checkpoint-every` without a folder, `--collective-timeout` out of range,
  `--steps`): parsed here by the parser every worker uses (planner.plan.run_options), so the user gets the
  executor's one line once, instead of one per rank followed by torchrun's traceback;
- `--data`: the token file the workers will memory-map (planner.plan.preflight.check_token_file);
- the machine: devices, ranks per host and memory (planner.plan.preflight.check_machine).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from planner.errors import UserError

OFF_FACTOR = 2.0
"""A run whose median step is more than this factor away from the prediction gets the calibration hint."""


def check_endpoint(endpoint: str) -> None:
    """HOST:PORT with a valid port and a host name this machine can resolve."""
    host, sep, port = endpoint.rpartition(":")
    host = host.strip("[]")  # [::1]:29500
    if not sep or not host or not port.isdigit():
        raise UserError(f"{endpoint!r}: expected HOST:PORT", where="--rdzv-endpoint", fix="e.g. node0:29500")
    if not 1 <= int(port) <= 65535:
        raise UserError(f"port {port} is out of range", where=f"--rdzv-endpoint {endpoint}",
                        fix="use a TCP port from 1 to 65535, e.g. 29500")
    if not resolvable(host):
        raise UserError(f"host {host!r} does not resolve to an address here", where=f"--rdzv-endpoint {endpoint}",
                        fix="give the name or IP address of the host that runs rank 0 (node rank 0)")


def resolvable(host: str) -> bool:
    try:
        socket.getaddrinfo(host, None)
    except (socket.gaierror, UnicodeError, OSError):
        return False
    return True


def check_executor_options(worker_args: list[str]) -> None:
    """The workers' arguments, parsed by the workers' own parser (raises its one-line UserError)."""
    from planner.plan.run_options import parse_args

    parse_args(worker_args)


def check_data(data: Path, *, plan: Any, data_dtype: str | None, smoke: bool) -> None:
    """The --data token file, with the sequence length and dtype the workers will use."""
    from planner.model.smoke import smoke_seq_len
    from planner.plan.preflight import check_token_file, token_dtype

    seq_len = smoke_seq_len(plan.layout.cp) if smoke else plan.inputs.workload.seq_len
    check_token_file(data, dtype=token_dtype(plan.inputs.model.vocab_size, data_dtype), seq_len=seq_len)


def calibrated(plan: Any) -> bool:
    """True when the plan's device profile was measured by `meshplan calibrate` (its sources say so)."""
    gpus = plan.inputs.cluster.get("gpus") or {}
    return any("meshplan calibrate" in str(src) for g in gpus.values() for src in (g.get("sources") or {}).values())


def calibration_hint(plan: Any, measured_s: float, predicted_s: float, plan_path: Path) -> str | None:
    """One line when the measured median step is more than OFF_FACTOR away from the prediction."""
    if predicted_s <= 0 or measured_s <= 0:
        return None
    ratio = measured_s / predicted_s
    if 1 / OFF_FACTOR <= ratio <= OFF_FACTOR:
        return None
    off = f"{ratio:.1f}x" if ratio > 1 else f"1/{1 / ratio:.1f}"
    head = f"note: the measured step ({measured_s * 1e3:.1f} ms) is {off} the prediction ({predicted_s * 1e3:.1f} ms)"
    if calibrated(plan):
        return (f"{head} although the plan's profile was calibrated: calibrate again on a quiet machine "
                f"(meshplan run {plan_path} --calibrate)")
    name = "/".join(sorted((plan.inputs.cluster.get("gpus") or {"?": 0}).keys()))
    return (f"{head}: the plan's {name} profile is not calibrated for this machine; run `meshplan run "
            f"{plan_path} --calibrate`, or `meshplan calibrate --out here.yaml` and plan with --cluster here.yaml")
