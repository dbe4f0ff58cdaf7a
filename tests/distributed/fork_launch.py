"""A test-only launcher: import torch and the executor once, then fork the ranks of one node.

    python tests/distributed/fork_launch.py NPROC SCRIPT.py ARGS...
    python tests/distributed/fork_launch.py NPROC -m MODULE ARGS...
    python tests/distributed/fork_launch.py --serve      # many launches, one import (below)

Why: under torchrun every rank is a fresh interpreter that imports torch, the executor and (when a plan builds a
DTensor) torch._dynamo, several CPU-seconds each, which the 2-core CI machine pays once per rank per launch. The
tests that check what the executor computes (numerical equivalence, checkpoint resharding) do not test the
launcher, so they fork their ranks from one process that has imported all of it (copy-on-write). The launcher
itself (`meshplan run`, torchrun's restarts, two agents on loopback) stays tested under real torchrun.

Each rank gets what torchrun gives a worker on one node: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
GROUP_RANK, MASTER_ADDR (127.0.0.1) and MASTER_PORT, TORCHELASTIC_RESTART_COUNT=0, and runs SCRIPT (or MODULE)
as `__main__`. As under torchrun, the first rank to fail stops the others; the exit status is that rank's.
Nothing is forked while a thread other than torch's own idle one runs (fork copies only the calling thread).

--serve: a fork server for a test process that launches many times (dist_launch.forked). The imports above
cost ~4 CPU-seconds, which a fresh launcher pays for every launch; the server pays them once and, for each
request (one JSON line on stdin: nproc, target, env, cwd, stdout and stderr files), forks a launcher that
takes that environment, folder and output files and then does exactly what a fresh launcher does; the server
answers one JSON line, {"rc": exit status}, when it ends. Every launch forks from the same freshly imported
state: nothing one launch does reaches the next. A launcher dies with the server, and its ranks with it.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import signal
import sys

import torch  # noqa: F401  (before counting its threads)

TORCH_THREADS = len(os.listdir("/proc/self/task"))
"""Threads after `import torch` alone (it starts one idle native thread): the state DataLoader's fork-started
workers are forked in. The imports below must start no more."""


def _preload() -> None:
    """What every rank imports, imported once here and inherited (torch._dynamo: FSDP and TP import it when a
    plan first builds a DTensor)."""
    import torch._dynamo  # noqa: F401
    import torch.distributed.checkpoint  # noqa: F401
    import torch.distributed.pipelining  # noqa: F401

    import executor.train  # noqa: F401


PR_SET_PDEATHSIG = 1


def _run_rank(rank: int, nproc: int, target: list[str]) -> int:
    """In the forked child: this rank's environment, then the target as `__main__`; its exit status."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the launcher killed by a timeout: ranks go too
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0", ROLE_RANK=str(rank),
                      WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc), GROUP_WORLD_SIZE="1",
                      ROLE_WORLD_SIZE=str(nproc), TORCHELASTIC_RESTART_COUNT="0")
    try:
        if target[0] == "-m":
            sys.argv = [target[1], *target[2:]]
            runpy.run_module(target[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(target)
            sys.path.insert(0, os.path.dirname(os.path.abspath(target[0])))
            runpy.run_path(target[0], run_name="__main__")
        return 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported like an uncaught exception in a torchrun worker
        import traceback

        traceback.print_exc()
        return 1


def _check_threads(expected: int) -> None:
    threads = len(os.listdir("/proc/self/task"))  # native threads too (an OpenMP pool), not only Python's
    if threads != expected:
        raise SystemExit(f"fork_launch: {threads} threads after the imports ({expected} expected)")


def launch(nproc: int, target: list[str], *, threads: int = TORCH_THREADS) -> int:
    """Fork the `nproc` ranks of `target` (this process has done `_preload`, and runs `threads` threads: torch's
    own, or one in a launcher forked by the server); the job's exit status."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        raise SystemExit("fork_launch: set MASTER_PORT")
    _check_threads(threads)
    sys.stdout.flush()
    sys.stderr.flush()
    children: dict[int, int] = {}
    for rank in range(nproc):
        pid = os.fork()
        if pid == 0:
            code = _run_rank(rank, nproc, target)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        children[pid] = rank
    status = 0
    while children:
        pid, wait_status = os.wait()
        children.pop(pid, None)
        code = os.waitstatus_to_exitcode(wait_status)
        if code != 0 and status == 0:
            status = code if code > 0 else 128 - code
            for other in children:  # as torchrun: one failed rank stops the job
                os.kill(other, signal.SIGTERM)
    return status


def _served_launch(request: dict) -> int:
    """In the launcher forked by the server: the request's environment, folder and output files, then
    `launch`; its exit status."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the server killed (a timeout): the job goes too
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)  # the ranks must not read the server's requests
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(out, fd)
            os.close(out)
        return launch(int(request["nproc"]), list(request["target"]), threads=1)  # a fork keeps only its caller
    except SystemExit as exc:
        if exc.code not in (None, 0) and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported like a launcher that failed
        import traceback

        traceback.print_exc()
        return 1


def serve() -> int:
    """Answer launch requests from stdin, one at a time, until it closes (see the module docstring)."""
    import json

    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the test process gone: the server goes too
    _preload()
    for line in sys.stdin:
        request = json.loads(line)
        _check_threads(TORCH_THREADS)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = _served_launch(request)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        _, wait_status = os.waitpid(pid, 0)
        print(json.dumps({"rc": os.waitstatus_to_exitcode(wait_status)}), flush=True)
    return 0


def main() -> int:
    if sys.argv[1:] == ["--serve"]:
        return serve()
    nproc, target = int(sys.argv[1]), sys.argv[2:]
    _preload()
    return launch(nproc, target)


if __name__ == "__main__":
    sys.exit(main())
