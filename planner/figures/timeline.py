"""Simulate a pipeline schedule: start and end time of every forward (F), backward (B) and weight-gradient (W)
op on every pipeline rank, from per-rank per-micro-batch times. The Gantt chart draws this timeline.

Schedules (p pipeline ranks, m micro-batches, v chunks per rank; global chunk g runs on rank g % p):
  gpipe        every forward, then every backward (Huang et al. 2019).
  1f1b         p - r - 1 warm-up forwards on rank r, then alternate one forward / one backward, then the
               remaining backwards (PipeDream-Flush, Narayanan et al. 2021 Sec. 2.2.1).
  interleaved  Megatron's interleaved 1F1B: micro-batches in groups of p per chunk, (p - r - 1) * 2 +
               (v - 1) * p warm-up forwards (Narayanan et al. 2021 Sec. 2.2.2; Megatron-LM
               `forward_backward_pipelining_with_interleaving`).
  zb-h1        zero-bubble H1 (Qi et al. 2023 Sec. 3.1, "ZB1P" in torch.distributed.pipelining): the 1F1B
               order with the backward split into B (input gradient) and W (weight gradient); rank r delays
               its W passes by r backward passes (W of the oldest micro-batch after each B from the r-th on),
               and runs the delayed ones at the end, where they fill 1F1B's cool-down bubbles. For equal
               stages the bubble is (p - 1) * max(T_F, T_B): the paper's (p - 1)(T_F + T_B - T_W) = (p - 1) T_F
               when T_B = T_W <= T_F (tests/unit/test_figures.py checks both cases).
Dependencies: F(mb, g) after F(mb, g - 1); B(mb, g) after B(mb, g + 1), and the last chunk's B after its F;
W(mb, g) after B(mb, g). Point-to-point transfer times are not on the timeline: the cost model adds the
exposed p2p time once per step after the pipeline (planner.cost.evaluate), and so does the chart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planner.layout.schedules import SCHEDULES


@dataclass(frozen=True)
class Op:
    """One op of the timeline; times in seconds from the start of the step."""

    rank: int
    kind: str  # "F", "B" or "W"
    microbatch: int
    chunk: int  # global chunk index (chunk c runs on rank c % p)
    start_s: float
    end_s: float


def _zb_h1_order(p: int, m: int, r: int) -> list[tuple[str, int, int]]:
    warm = min(p - r - 1, m)
    order = [("F", i, r) for i in range(warm)]
    w = 0
    for k in range(m):  # the k-th backward, preceded by the next forward while any is left
        if warm + k < m:
            order.append(("F", warm + k, r))
        order.append(("B", k, r))
        if k >= r:  # rank r keeps r weight-gradient passes pending
            order.append(("W", w, r))
            w += 1
    return order + [("W", i, r) for i in range(w, m)]


def _gpipe_order(p: int, m: int, v: int, r: int) -> list[tuple[str, int, int]]:
    return [("F", i, r) for i in range(m)] + [("B", i, r) for i in range(m)]


def _warmup_then_alternate(fwd: list, bwd: list, warm: int) -> list[tuple[str, int, int]]:
    order = fwd[:warm]
    for i in range(len(fwd) - warm):
        order += [fwd[warm + i], bwd[i]]
    return order + bwd[len(fwd) - warm:]


def _one_f_one_b_order(p: int, m: int, v: int, r: int) -> list[tuple[str, int, int]]:
    fwd = [("F", i, r) for i in range(m)]
    bwd = [("B", i, r) for i in range(m)]
    return _warmup_then_alternate(fwd, bwd, min(p - r - 1, m))


def _interleaved_order(p: int, m: int, v: int, r: int) -> list[tuple[str, int, int]]:
    # the k-th forward is micro-batch (k // (p*v)) * p + k % p of local chunk (k // p) % v
    fwd = [("F", (k // (p * v)) * p + k % p, ((k // p) % v) * p + r) for k in range(m * v)]
    bwd = [("B", (k // (p * v)) * p + k % p, (v - 1 - (k // p) % v) * p + r) for k in range(m * v)]
    return _warmup_then_alternate(fwd, bwd, min((p - r - 1) * 2 + (v - 1) * p, m * v))


ORDERS: dict[str, Callable[[int, int, int, int], list[tuple[str, int, int]]]] = {
    "gpipe": _gpipe_order,
    "1f1b": _one_f_one_b_order,
    "interleaved": _interleaved_order,
    "zb-h1": lambda p, m, v, r: _zb_h1_order(p, m, r),
}
"""Per schedule of the registry: rank r's fixed op order (kind, micro-batch, global chunk) for (p, m, v, r)."""


def _orders(schedule: str, p: int, m: int, v: int) -> list[list[tuple[str, int, int]]]:
    """Fixed per-rank op order (kind, micro-batch, global chunk) of every rank."""
    return [ORDERS[schedule](p, m, v, r) for r in range(p)]


def _deps(kind: str, mb: int, g: int, chunks: int) -> tuple[tuple[str, int, int], ...]:
    if kind == "F":
        return (("F", mb, g - 1),) if g > 0 else ()
    if kind == "B":
        return (("B", mb, g + 1),) if g < chunks - 1 else (("F", mb, g),)
    return (("B", mb, g),)


def simulate(
    schedule: str,
    m: int,
    forward_s: list[float],
    backward_s: list[float],
    v: int = 1,
    weight_grad_s: list[float] | None = None,
) -> list[Op]:
    """Timeline of one step's pipeline ops.

    `forward_s[r]` and `backward_s[r]` are rank r's times per micro-batch over all its chunks (each chunk takes
    1/v of them, the cost model's convention); for a schedule that splits the backward (zb-h1), `backward_s`
    is B only and `weight_grad_s` is W.
    """
    if schedule not in ORDERS:
        raise ValueError(f"unknown schedule {schedule!r}; expected one of {tuple(ORDERS)}")
    p = len(forward_s)
    if len(backward_s) != p or (weight_grad_s is not None and len(weight_grad_s) != p):
        raise ValueError("forward_s, backward_s (and weight_grad_s) need one entry per pipeline rank")
    if SCHEDULES[schedule].splits_backward and weight_grad_s is None:
        raise ValueError(f"{schedule} needs weight_grad_s (the W time per rank)")
    if v > 1 and not SCHEDULES[schedule].virtual_stages:
        raise ValueError(f"v={v} needs a schedule with virtual stages, not {schedule!r}")
    dur = {"F": [f / v for f in forward_s], "B": [b / v for b in backward_s],
           "W": [w / v for w in (weight_grad_s or [0.0] * p)]}
    return _fixed_schedule(_orders(schedule, p, m, v), p * v, dur)


def _fixed_schedule(orders: list[list[tuple[str, int, int]]], chunks: int, dur: dict[str, list[float]]) -> list[Op]:
    """Each rank runs its ops in order, each as soon as the rank is free and its dependencies are done."""
    p = len(orders)
    end: dict[tuple[str, int, int], float] = {}
    nxt = [0] * p
    free = [0.0] * p
    ops: list[Op] = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r in range(p):
            while nxt[r] < len(orders[r]):
                kind, mb, g = orders[r][nxt[r]]
                deps = _deps(kind, mb, g, chunks)
                if any(d not in end for d in deps):
                    break
                start = max([free[r], *(end[d] for d in deps)])
                stop = start + dur[kind][r]
                end[(kind, mb, g)] = stop
                free[r] = stop
                ops.append(Op(r, kind, mb, g, start, stop))
                nxt[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise AssertionError("pipeline schedule deadlocked (inconsistent op order)")
    return ops


def makespan_s(ops: list[Op]) -> float:
    return max((o.end_s for o in ops), default=0.0)
