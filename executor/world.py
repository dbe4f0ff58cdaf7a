"""The world a rank finds, checked against the plan before any collective; and the process group.

A mismatch (rank count, device kind, device memory, backend) is a `UserError` with one line naming the
plan field, what was found and the fix. Every rank runs the same check on the same inputs and reaches the
same verdict, so all stop together without talking to each other.

The plan's cluster is read by `planner.plan.preflight.hardware_of`, which `meshplan run` also uses before it
launches anything (that module imports no torch).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from planner.errors import UserError
from planner.plan import Plan
from planner.plan.preflight import Hardware, hardware_of

GIB = 2**30


@dataclass(frozen=True, kw_only=True)
class World:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    backend: str
    hardware: Hardware
    """The plan's hardware."""
    on_planned_device: bool
    """False when a smoke run of a GPU plan runs on CPU: MFU against the plan's GPU is then meaningless."""


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def check_world(plan: Plan, *, smoke: bool, plan_path: str) -> World:
    """Validate the plan against this process's world (torchrun env, devices) and pick device and backend."""
    rank, local_rank = _env_int("RANK", 0), _env_int("LOCAL_RANK", 0)
    world_size = _env_int("WORLD_SIZE", 1)
    layout = plan.layout
    if world_size != layout.world_size:
        raise UserError(
            f"layout needs {layout.world_size} ranks (dp{layout.dp} x tp{layout.tp} x pp{layout.pp} x cp{layout.cp}) "
            f"but torchrun started {world_size}",
            where=f"{plan_path}: layout",
            fix=f"launch {layout.world_size} processes in total (--nproc-per-node x --nnodes)",
        )
    host = plan.placement[rank].host if rank < len(plan.placement) else 0
    hw = hardware_of(plan.inputs.cluster, host)
    planned = True
    if hw.kind == "cuda":
        if not torch.cuda.is_available():
            if not smoke:
                raise UserError(
                    f"the plan is for {hw.gpu_name} GPUs but no CUDA device is visible",
                    where=f"{plan_path}: inputs.cluster",
                    fix="run on the planned hardware, or pass --smoke to run the layout at toy size on CPU",
                )
            planned = False
        else:
            local = _env_int("LOCAL_WORLD_SIZE", 1)
            if torch.cuda.device_count() < local:
                raise UserError(
                    f"{local} ranks on this host but only {torch.cuda.device_count()} CUDA devices",
                    where="torchrun --nproc-per-node",
                    fix=f"start at most {torch.cuda.device_count()} processes per host",
                )
            total = torch.cuda.get_device_properties(local_rank % torch.cuda.device_count()).total_memory
            need = plan.prediction.peak_memory_bytes
            if not smoke and need > total:
                raise UserError(
                    f"predicted peak memory {need / GIB:.1f} GiB exceeds this GPU's {total / GIB:.1f} GiB",
                    where=f"{plan_path}: prediction.peak_memory_bytes",
                    fix="re-plan for this GPU (its profile's memory_bytes) or run with --smoke",
                )
    kind = hw.kind if planned else "cpu"
    backend = "nccl" if kind == "cuda" else "gloo"
    if not dist.is_backend_available(backend):
        raise UserError(f"torch.distributed backend {backend!r} is not available in this PyTorch build", where="torch")
    if kind == "cuda":
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
    else:
        device = torch.device("cpu")
    return World(
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        device=device,
        backend=backend,
        hardware=hw,
        on_planned_device=planned,
    )


def init_process_group(world: World, timeout_s: float) -> None:
    """Join the job; every collective gives up after `timeout_s` so one dead rank does not hang the rest."""
    if world.device.type == "cuda":
        torch.cuda.set_device(world.device)
    store = _loopback_store(world, timeout_s)
    dist.init_process_group(
        backend=world.backend,
        timeout=timedelta(seconds=timeout_s),
        device_id=world.device if world.device.type == "cuda" else None,
        **({"store": store, "rank": world.rank, "world_size": world.world_size} if store is not None else {}),
    )


_LISTENERS: list[socket.socket] = []
"""Sockets handed to a TCPStore by file descriptor: kept open for the life of the process."""


def _loopback_store(world: World, timeout_s: float) -> dist.TCPStore | None:
    """The job's key-value store, listening on 127.0.0.1 only, when MASTER_ADDR is the loopback address.

    PyTorch's env:// store (rank 0 hosts it at MASTER_ADDR:MASTER_PORT) binds every interface whatever
    MASTER_ADDR says (measured here: [::]:PORT in /proc/net/tcp6 for MASTER_ADDR=127.0.0.1), so anyone on
    the network could reach it. Rank 0 binds the socket itself and hands it over (`master_listen_fd`); the
    other ranks connect as before. None (PyTorch's default path) for a named host, or when torchrun shares
    its own store with the workers (TORCHELASTIC_USE_AGENT_STORE: nothing is hosted here then).
    """
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if addr not in ("127.0.0.1", "localhost") or not port or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return None
    timeout = timedelta(seconds=timeout_s)
    if world.rank != 0:
        return dist.TCPStore("127.0.0.1", int(port), world.world_size, False, timeout, multi_tenant=True)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", int(port)))
    sock.listen(max(128, world.world_size))
    _LISTENERS.append(sock)
    return dist.TCPStore("127.0.0.1", int(port), world.world_size, True, timeout, multi_tenant=True,
                         master_listen_fd=sock.fileno())
