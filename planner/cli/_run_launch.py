"""How `meshplan run` starts torchrun and relays its output (planner/cli/run.py holds the command).

`torchrun_cmd` builds the line: `python -m torch.distributed.run ... -m executor PLAN.json ...` with c10d
rendezvous at the endpoint (127.0.0.1 and a helper-hosted store on one host). `worker_args` is its part
after `-m executor`: the exact arguments every worker parses (planner.plan.run_options), which `meshplan run`
parses too before launching, so a bad combination is one line here instead of one per rank.

`launch` runs it, streaming progress to stderr and everything to the run's launcher.log; torchrun's own
logging and failure report are held back (`held_back`) and shown only when the failure is not a user error
the executor already put in one line.

Stopping: torchrun runs in a session of its own (as torchrun starts each of its workers), so a terminal's Ctrl-C
reaches meshplan alone. meshplan first stops relaying (the interrupted job's traceback noise goes to the log
only), then sends torchrun SIGINT itself, then SIGTERM/SIGKILL if it lingers; the output threads are joined before
the log closes (no "I/O operation on closed file" from them) and the KeyboardInterrupt reaches `main()` (one line,
exit 130). The order is what makes the terminal quiet: when the terminal signalled torchrun directly, its
traceback could reach the relay before meshplan's main thread had run its handler. SIGTERM and SIGHUP to meshplan
(a scheduler stopping the job, the terminal closing) are forwarded the same way and end in `Stopped`.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
STOP_GRACE_S = 20.0
"""How long torchrun gets to stop its workers after Ctrl-C (it sends them SIGTERM and waits) before it is
killed: a worker in the middle of a checkpoint write needs a few seconds."""
FORWARDED = (signal.SIGTERM, signal.SIGHUP)
"""Signals to meshplan that stop the job the way Ctrl-C does (each is forwarded to torchrun as itself)."""


class Stopped(Exception):
    """meshplan run got SIGTERM or SIGHUP while the job ran; the job was stopped with the same signal."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"stopped by {self.name}")


def worker_args(plan_path: Path, run_dir: Path, metrics: Path, args: dict) -> list[str]:
    """The arguments of `python -m executor` (everything after `-m executor` in the torchrun line)."""
    cmd = [str(plan_path), "--steps", str(args["steps"]), "--run-dir", str(run_dir), "--metrics", str(metrics)]
    if args["smoke"]:
        cmd.append("--smoke")
    for flag in ("data", "data_dtype", "checkpoint_dir"):
        if args.get(flag) is not None:
            cmd += [f"--{flag.replace('_', '-')}", str(args[flag])]
    if args["checkpoint_every"]:
        cmd += ["--checkpoint-every", str(args["checkpoint_every"])]
    if args.get("resume"):
        cmd += ["--resume", str(args["resume"])]
    if args.get("collective_timeout") is not None:
        cmd += ["--collective-timeout", str(args["collective_timeout"])]
    return cmd


def torchrun_cmd(plan_path: Path, run_dir: Path, metrics: Path, args: dict, endpoint: str, rdzv_id: str) -> list[str]:
    host = endpoint.rsplit(":", 1)[0]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(args["nnodes"]),
           "--nproc-per-node", str(args["nproc"]), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
           "--rdzv-id", rdzv_id]
    if host in LOOPBACK:
        cmd += ["--local-addr", "127.0.0.1"]  # workers' MASTER_ADDR: loopback, not the host name
    if args.get("store_hosted"):
        cmd += ["--rdzv-conf", "is_host=0"]  # the store runs in our helper process (planner.rendezvous)
    if args["nnodes"] > 1:
        cmd += ["--node-rank", str(args["node_rank"]), "--rdzv-conf", f"is_host={int(args['node_rank'] == 0)}"]
    if args.get("max_restarts"):
        cmd += ["--max-restarts", str(args["max_restarts"])]
    return cmd + ["-m", "executor", *worker_args(plan_path, run_dir, metrics, args)]


_AGENT_LOG = re.compile(r"^[DIWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ torch/distributed/")
"""A log line of the torchrun agent itself (glog style: level, date, time, pid, source file)."""


def held_back(line: str, in_report: bool) -> tuple[bool, bool]:
    """(hold this line?, inside torchrun's failure report from now on?).

    Held: torchrun's own logging and its failure report (an unprefixed traceback; workers' lines carry
    [rankN]:), and the executor's `error:` line, which the CLI repeats itself.
    """
    if in_report or line.startswith("Traceback (most recent call last)"):
        return True, True
    return bool(_AGENT_LOG.match(line)) or line.startswith("error: "), False


def launch(cmd: list[str], env: dict[str, str], log_path: Path) -> tuple[int, list[str]]:
    """Run torchrun, streaming its output to our stderr and to `log_path`; (exit status, held lines)."""
    held: list[str] = []
    state = {"in_report": False, "quiet": False}
    lock = threading.Lock()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                            start_new_session=True)  # terminal signals reach meshplan only; it forwards them

    def pump(stream, log) -> None:  # noqa: ANN001
        for line in stream:
            with lock:
                try:
                    log.write(line)
                except ValueError:  # the log was closed after a join timed out: nothing left to do
                    return
                hold, state["in_report"] = held_back(line, state["in_report"])
                if state["quiet"]:
                    continue
                if hold:
                    held.append(line)
                    continue
                try:
                    sys.stderr.write(line)
                    sys.stderr.flush()
                except (OSError, ValueError):  # our stderr is gone: keep logging, stop relaying
                    state["quiet"] = True

    with open(log_path, "a", encoding="utf-8") as log:
        threads = [threading.Thread(target=pump, args=(s, log), daemon=True) for s in (proc.stdout, proc.stderr)]
        for t in threads:
            t.start()
        try:
            with _stops_raised():
                rc = proc.wait()
        except (KeyboardInterrupt, Stopped) as stop:
            with lock:
                state["quiet"] = True  # before torchrun hears of it: its interrupted tracebacks go to the log only
            _stop(proc, stop.signum if isinstance(stop, Stopped) else signal.SIGINT)
            _join(threads)
            raise
        _join(threads)
    return rc, held


@contextlib.contextmanager
def _stops_raised() -> Iterator[None]:
    """While torchrun runs: SIGTERM and SIGHUP raise `Stopped` in the main thread (restored afterwards, so a
    second one while the job stops ends meshplan at once). Python sets handlers from the main thread only; an
    embedding program that launches from another thread keeps its own."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_stopped(signum: int, _frame: object) -> None:
        raise Stopped(signum)

    previous = {sig: signal.signal(sig, raise_stopped) for sig in FORWARDED}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop(proc: subprocess.Popen, first: int) -> None:
    """Send torchrun `first` (SIGINT after Ctrl-C) and wait for it to stop its workers, escalating to SIGTERM and
    SIGKILL if it does not; a second Ctrl-C kills it at once."""
    steps = [(first, STOP_GRACE_S)] + [(s, 5.0) for s in (signal.SIGTERM, signal.SIGKILL) if s != first]
    for sig, wait_s in steps:
        if proc.poll() is not None:
            return
        try:
            proc.send_signal(sig)
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
        except KeyboardInterrupt:
            proc.kill()
            proc.wait()
            return


def _join(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.join(timeout=10)
