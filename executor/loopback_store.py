"""`python -m executor.loopback_store`: host torchrun's rendezvous store on 127.0.0.1 only, for `meshplan run`.

torchrun's c10d rendezvous makes its agent host a TCPStore at --rdzv-endpoint, and that store binds every
interface whatever host the endpoint names (measured here: [::]:PORT for 127.0.0.1:PORT). For a one-host run
`meshplan run` starts this process instead: it binds a socket to 127.0.0.1 on a free port, hands it to a
TCPStore (`master_listen_fd`), prints the port on stdout and serves until its stdin closes (the launcher
closes it when torchrun ends, or dies). torchrun then joins it as a client (`--rdzv-conf is_host=0`).
"""

from __future__ import annotations

import socket
import sys
from datetime import timedelta

import torch.distributed as dist


def main() -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    port = sock.getsockname()[1]
    # world_size None: any number of clients (agents join and leave across restarts); the timeout bounds
    # waits of the clients' requests, not this server's life.
    store = dist.TCPStore("127.0.0.1", port, None, True, timedelta(hours=24), wait_for_workers=False,
                          multi_tenant=True, master_listen_fd=sock.fileno())
    print(port, flush=True)
    sys.stdin.read()  # until the launcher closes our stdin
    del store
    return 0


if __name__ == "__main__":
    sys.exit(main())
