"""One timed burst of device work, shared by the GPU measurement scripts (measure_kernels, measure_sustained_layer)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def burst_s(fn: Callable[[], object], calls: int, device: str = "cuda") -> float:
    """Seconds per call of `calls` back-to-back calls of `fn`: timed with CUDA events on a GPU (device time, not
    host), with the host clock elsewhere (a CPU smoke run of the same script)."""
    if device != "cuda":
        start_s = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - start_s) / calls
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / calls
