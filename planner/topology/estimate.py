"""`CollectiveEstimate`: bus bandwidth + latency of one collective, and its time for a message size.

Time model (NCCL's bus-bandwidth conventions, nccl-tests doc/PERFORMANCE.md; S = message bytes: the full
buffer for all-reduce, the full gathered size for all-gather / reduce-scatter / all-to-all):

    all_reduce      2(n-1)/n * S / busbw  +  2(n-1) * hop latency
    all_gather      (n-1)/n  * S / busbw  +  (n-1)  * hop latency
    reduce_scatter  (n-1)/n  * S / busbw  +  (n-1)  * hop latency
    all_to_all      (n-1)/n  * S / busbw  +  (n-1)  * hop latency
    p2p             S / busbw             +  1      * hop latency

The latency term mirrors NCCL's ring model (src/graph/tuning.cc: steps x per-step hwLat by transport); NCCL's
fixed base latency per call (a few us) is not included. A group of one GPU costs nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p")


def bytes_factor(kind: str, n: int) -> float:
    """Bytes each GPU moves per message byte, relative to the bus bandwidth (NCCL convention)."""
    if n <= 1:
        return 0.0
    if kind == "all_reduce":
        return 2 * (n - 1) / n
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if kind == "p2p":
        return 1.0
    raise ValueError(f"unknown collective kind {kind!r}; allowed: {', '.join(KINDS)}")


def latency_steps(kind: str, n: int) -> int:
    """Sequential steps whose per-step latency adds up."""
    if n <= 1:
        return 0
    return {"all_reduce": 2 * (n - 1), "p2p": 1}.get(kind, n - 1)


@dataclass(frozen=True)
class CollectiveEstimate:
    """What one collective over a group gets from the topology (all groups of its kind running at once)."""

    kind: str
    group_size: int
    bus_bandwidth_Bps: float
    latency_s: float
    bottleneck: str
    hop_latency_s: float = 0.0
    num_groups: int = 1

    def time_s(self, message_bytes: float) -> float:
        """Seconds for one collective of `message_bytes` (see the module docstring for the formulas)."""
        if self.group_size <= 1 or message_bytes <= 0:
            return 0.0 if self.group_size <= 1 else self.latency_s
        return bytes_factor(self.kind, self.group_size) * message_bytes / self.bus_bandwidth_Bps + self.latency_s

    @classmethod
    def trivial(cls, kind: str, num_groups: int = 1) -> CollectiveEstimate:
        """The estimate for a group of one GPU: no traffic, no time."""
        return cls(kind, 1, math.inf, 0.0, "none (group of 1)", 0.0, num_groups)
