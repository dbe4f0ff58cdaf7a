"""Overlap is not free: communication that runs beside compute slows that compute down.

NCCL kernels occupy SMs (one CTA per channel) and move their bytes through HBM, so GEMMs and attention running
at the same time get fewer SMs, tail waves and less memory bandwidth. Lee et al. 2025, "Characterizing
Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning: Performance and Power Implications"
(arXiv 2507.03114), measured GPT and Llama training on 4 x A100, H100, MI250 and MI210: compute overlapped with
communication runs on average 18.9 % slower than alone (at most 40 %). The SM share alone gives the same order:
DeepSeek-V3 (report Sec. 3.2.2) gives its overlapped all-to-all 20 of an H800's 132 SMs, and compute on the other
112 runs 132/112 - 1 = 17.9 % slower. The factor is a GPU-family property:
each GPU profile carries it as `comm_overlap_slowdown` with its source; a profile without one gets
`DEFAULT_SLOWDOWN` (the same paper's average), CPU devices 0 (their collectives never overlap, comm.py).

How it enters the step: of a collective of `comm` seconds scheduled beside a compute window of `window`
seconds, the part that cannot hide (`comm - window`, and at least the share `floor` that has nothing to overlap
with, such as the first bucket) is exposed; the overlapped rest slows the compute beside it by the factor:

    exposed = max(comm - window, floor * comm) + slowdown * (comm - max(comm - window, floor * comm))

Both parts grow with `comm`, so the step time stays monotone in every collective's cost (the search's
optimistic first pass, solver/bounds.py, relies on it).
"""

from __future__ import annotations

import numpy as np

DEFAULT_SLOWDOWN = 0.189  # Lee et al. 2025 (arXiv 2507.03114), abstract: average compute slowdown under overlap


def slowdown(ctx) -> float:
    """The fraction by which compute slows while communication overlaps it on this cluster's GPUs."""
    if ctx.gpu_kind_is_cpu:
        return 0.0
    value = getattr(ctx.gpu, "comm_overlap_slowdown", None)
    return float(DEFAULT_SLOWDOWN if value is None else value)


def exposed_s(comm, window, floor, factor: float) -> np.ndarray:
    """Seconds a collective adds to the critical path beside a compute window (module docstring)."""
    comm = np.asarray(comm, dtype=float)
    alone = np.maximum(comm - window, comm * floor)
    return alone + factor * (comm - alone)
