"""Collective timings for `executor.calibrate`: every kind the planner models, over group and message sizes.

Message size S follows the planner's convention (planner.topology.estimate): the full buffer for all_reduce,
the full gathered size for all_gather and reduce_scatter (each rank holds S/n of it), each rank's whole send
buffer for all_to_all, and the bytes sent for p2p. Groups of size g are consecutive ranks [0..g), [g..2g),
...; all of them run the collective at the same time, as the groups of a mesh axis do (ranks left over when
g does not divide the world idle). p2p pairs ranks (0,1), (2,3), ... exchanging at once, timed as a
ping-pong: one-way time = round trip / 2.

all_to_all is measured as expert parallelism runs it (the planner models no other all-to-all): the
executor's own row exchange (executor.ep.all_to_all_rows) with the uneven split sizes that top-k routing
produces. Each rank routes S / (ROUTED_WIDTH x 4 B x 2) random tokens, top-2, through a router initialised
as the reference model's (N(0, 0.02) weights) over 2 experts per rank, and sends each assignment's row
(ROUTED_WIDTH fp32 values) to the rank holding its expert: S bytes in all per rank, split unevenly. The
exchange of the split sizes themselves is set-up here; the planner costs it as one more all-to-all of
E counts per MoE layer (planner.cost.comm).

A repetition is a fixed number of back-to-back calls (agreed by all ranks from a probe, so none waits on a
call another never makes) after a barrier; its time is the slowest rank's, and the result is the median
over repetitions.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.distributed._functional_collectives import wait_tensor

from executor.ep import all_to_all_rows
from executor.init import BASE_STD

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p")
ROUTED_WIDTH = 64
"""Values per exchanged row of the all_to_all measurement: the `tiny` preset's hidden size."""
MAX_CALLS = 64
"""Upper bound on calls per repetition (tiny messages finish in microseconds on GPUs)."""


def message_sizes(device: str, quick: bool) -> list[int]:
    """Bytes per message: latency-bound to bandwidth-bound for the backend's fabric."""
    if device == "cuda":
        return [2**20, 64 * 2**20] if quick else [64 * 2**10, 2**20, 16 * 2**20, 256 * 2**20]
    return [16 * 2**10, 2**20] if quick else [4 * 2**10, 64 * 2**10, 2**20, 8 * 2**20]


def group_sizes(world: int, quick: bool) -> list[int]:
    """Group sizes 2..world (quick: 2 and world)."""
    if world < 2:
        return []
    return sorted({2, world}) if quick else list(range(2, world + 1))


def _elements(nbytes: int, multiple: int) -> int:
    """fp32 elements for `nbytes`, rounded up to a multiple of `multiple` (so the buffer splits evenly)."""
    n = max(nbytes // 4, 1)
    return -(-n // multiple) * multiple


def _op(kind: str, nbytes: int, g: int, group, device: torch.device, peer: int | None) -> Callable[[], None]:
    """One call of `kind` on this rank (a closure over preallocated buffers)."""
    if kind == "all_reduce":
        x = torch.ones(_elements(nbytes, 1), device=device)
        return lambda: dist.all_reduce(x, group=group)
    if kind == "all_gather":
        n = _elements(nbytes, g)
        out, inp = torch.empty(n, device=device), torch.ones(n // g, device=device)
        return lambda: dist.all_gather_single(out, inp, group=group)
    if kind == "reduce_scatter":
        n = _elements(nbytes, g)
        inp, out = torch.ones(n, device=device), torch.empty(n // g, device=device)
        return lambda: dist.reduce_scatter_single(out, inp, group=group)
    if kind == "all_to_all":
        send, recv = routed_splits(nbytes, g, group, device)
        rows = torch.ones(sum(send), ROUTED_WIDTH, device=device)
        return lambda: wait_tensor(all_to_all_rows(rows, send, recv, group))
    assert kind == "p2p" and peer is not None
    buf = torch.ones(_elements(nbytes, 1), device=device)
    first = dist.get_rank() < peer

    def ping_pong() -> None:
        if first:
            dist.send(buf, peer)
            dist.recv(buf, peer)
        else:
            dist.recv(buf, peer)
            dist.send(buf, peer)

    return ping_pong


def routed_splits(nbytes: int, g: int, group, device: torch.device) -> tuple[list[int], list[int]]:
    """(rows sent to, rows received from) each group rank when this rank's top-2 routing of random tokens over
    2 experts per rank fills `nbytes` of ROUTED_WIDTH-wide fp32 rows (module docstring). Collective."""
    top_k, experts = 2, 2 * g
    tokens = max(nbytes // (ROUTED_WIDTH * 4 * top_k), 1)
    gen = torch.Generator().manual_seed(1000 + dist.get_rank())
    x = torch.randn(tokens, ROUTED_WIDTH, generator=gen)
    router = torch.randn(ROUTED_WIDTH, experts, generator=gen) * BASE_STD
    chosen = torch.topk(torch.softmax(x @ router, dim=-1), top_k, dim=-1).indices
    per_rank = torch.bincount(chosen.flatten() // (experts // g), minlength=g).to(device)
    received = torch.empty_like(per_rank)
    dist.all_to_all_single(received, per_rank, group=group)
    return per_rank.tolist(), received.tolist()


def _timed(fn: Callable[[], None] | None, calls: int, device: torch.device) -> float:
    """Seconds per call of `calls` back-to-back calls of `fn` (0 on ranks outside every group)."""
    dist.barrier()
    if fn is None:
        return 0.0
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - t0) / calls


def _slowest(seconds: float, device: torch.device) -> float:
    t = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _measure(fn, clock, device: torch.device, one_way: bool) -> float:
    if fn is not None:
        fn()  # warm-up (connection setup, buffer registration)
    probe = _slowest(_timed(fn, 1, device), device)
    calls = int(min(MAX_CALLS, max(1, clock.min_time_s // max(probe, 1e-9))))
    samples = [_slowest(_timed(fn, calls, device), device) for _ in range(clock.reps)]
    t = statistics.median(samples)
    return t / 2 if one_way else t


def measure_collectives(device: torch.device, sizes: list[int], groups: list[int], clock, step) -> list[dict]:
    """Median seconds per call of every (kind, group size, message size); `step(label)` after each."""
    world, rank = dist.get_world_size(), dist.get_rank()
    points = []
    for g in groups:
        members = [list(range(i * g, (i + 1) * g)) for i in range(world // g)]
        mine, _ = dist.new_subgroups_by_enumeration(members)
        for kind in KINDS[:-1]:
            for nbytes in sizes:
                fn = _op(kind, nbytes, g, mine, device, None) if mine is not None else None
                t = _measure(fn, clock, device, one_way=False)
                points.append({"kind": kind, "group_size": g, "groups": len(members), "bytes": nbytes, "time_s": t})
                step(f"{kind} n={g} {nbytes} B")
    for nbytes in sizes:
        peer = rank ^ 1
        fn = _op("p2p", nbytes, 2, None, device, peer) if peer < world else None
        t = _measure(fn, clock, device, one_way=True)
        points.append({"kind": "p2p", "group_size": 2, "groups": world // 2, "bytes": nbytes, "time_s": t})
        step(f"p2p {nbytes} B")
    return points
