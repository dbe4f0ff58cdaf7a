"""Keep a one-host torchrun job off the network: every listening socket on 127.0.0.1 (used by `meshplan run`).

A one-host job opens three kinds of listening socket, and none binds MASTER_ADDR by itself:

- torchrun's c10d rendezvous store, hosted by the agent at --rdzv-endpoint: PyTorch binds it to every
  interface ([::]:PORT, measured here for 127.0.0.1:PORT). `LoopbackStore` hosts it instead, in a helper
  process (`python -m executor.loopback_store`) that binds 127.0.0.1 itself; torchrun joins as a client
  (`--rdzv-conf is_host=0`).
- the workers' store (rank 0, MASTER_ADDR:MASTER_PORT): same PyTorch behaviour; the executor binds it to
  loopback itself (`executor.world._loopback_store`).
- gloo's and NCCL's connection sockets, on the interface they pick (gloo: the host name's address; NCCL:
  the first non-loopback one): `loopback_sockets()` names the loopback interface for both.

This module never imports torch (the helper process does).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from planner.errors import UserError


def loopback_sockets() -> dict[str, str]:
    """GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME naming this host's loopback interface (lo or lo0).

    Measured here: a gloo process group listened on eth0's address with GLOO_SOCKET_IFNAME=eth0 and on
    127.0.0.1 with lo. Empty when no interface is named lo/lo0; callers keep any value the user set.
    """
    names = {name for _, name in socket.if_nameindex()} if hasattr(socket, "if_nameindex") else set()
    lo = next((n for n in ("lo", "lo0") if n in names), None)
    return {"GLOO_SOCKET_IFNAME": lo, "NCCL_SOCKET_IFNAME": lo} if lo else {}


EXIT_WAIT_S = 60.0
"""How long `LoopbackStore.stop` waits for each stage of the helper's exit (stdin closed, then SIGTERM)."""


class LoopbackStore:
    """The rendezvous store of a one-host run, on 127.0.0.1 at a free port, for as long as it is open.

        store = LoopbackStore.start(Path("run/rendezvous.log"))   # endpoint "127.0.0.1:PORT"
        ... torchrun --rdzv-endpoint store.endpoint --rdzv-conf is_host=0 ...
        store.stop()
    """

    def __init__(self, proc: subprocess.Popen, port: int) -> None:
        self.proc, self.port = proc, port

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    @classmethod
    def start(cls, log: Path) -> LoopbackStore:
        """Start the helper (its stderr goes to `log`) and wait for its port."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as err:
            proc = subprocess.Popen([sys.executable, "-m", "executor.loopback_store"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=err, text=True)
        line = proc.stdout.readline().strip() if proc.stdout else ""
        if not line.isdigit():
            proc.kill()
            proc.wait()
            lines = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
            raise UserError(f"the rendezvous store did not start ({lines[-1] if lines else 'no output'})",
                            where=str(log), fix="check that PyTorch imports here (python -c 'import torch')")
        return cls(proc, int(line))

    def stop(self) -> None:
        """Close the helper's stdin (it exits) and wait for it; then ask it to stop (SIGTERM), and kill it last.

        The wait is long (EXIT_WAIT_S) because a clean exit includes the helper's interpreter shutdown with
        torch loaded, which took over 10 s on a loaded 2-core machine (a 10 s wait killed a helper that was
        exiting normally). The wait only ends early, never late: a healthy helper returns at
        once after its stdin closes, and a hung one is still stopped.
        """
        if self.proc.stdin:
            self.proc.stdin.close()
        for last_resort in (self.proc.terminate, self.proc.kill):
            try:
                self.proc.wait(timeout=EXIT_WAIT_S)
                return
            except subprocess.TimeoutExpired:
                last_resort()
        self.proc.wait()
