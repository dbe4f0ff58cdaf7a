"""One timed burst of CUDA work, shared by the GPU measurement scripts (measure_kernels, measure_sustained_layer)."""

from __future__ import annotations

from collections.abc import Callable

import torch


def burst_s(fn: Callable[[], object], calls: int) -> float:
    """Seconds per call of `calls` back-to-back calls of `fn`, timed with CUDA events (device time, not host)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / calls
