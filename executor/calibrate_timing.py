"""Timing helpers of `executor.calibrate`: a clock that repeats calls, and medians over ranks."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist


class Clock:
    """Median seconds per call of `fn` over repetitions; synchronises CUDA around each repetition."""

    def __init__(self, device: torch.device, min_time_s: float, reps: int) -> None:
        self.device, self.min_time_s, self.reps = device, min_time_s, reps

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def time(self, fn: Callable[[], object], setup: Callable[[], object] | None = None, *, collective: bool = False,
             group=None) -> float:
        """Per-call seconds of `fn`; `setup` (untimed) runs before each call when given.

        `collective`: `fn` talks to the other ranks of `group` (None: all), so each must make the same
        number of calls: they agree on it from the slowest rank's probe instead of looping until `min_time_s`.
        """
        if setup is not None:
            setup()
        fn()  # warm-up: first-call allocation and dispatch caches
        fixed = self._agreed_calls(fn, setup, group) if collective else None
        samples = []
        for _ in range(self.reps):
            if collective and dist.is_initialized():
                dist.barrier(group=group)  # start together
            calls, spent = 0, 0.0
            while (spent < self.min_time_s) if fixed is None else (calls < fixed):
                spent += self._timed_call(fn, setup)
                calls += 1
            samples.append(spent / calls)
        return statistics.median(samples)

    def _timed_call(self, fn: Callable[[], object], setup: Callable[[], object] | None) -> float:
        """Seconds of one call of `fn` (after its untimed `setup`), device work included."""
        if setup is not None:
            setup()
        self.sync()
        t0 = time.perf_counter()
        fn()
        self.sync()
        return time.perf_counter() - t0

    def _agreed_calls(self, fn: Callable[[], object], setup: Callable[[], object] | None, group) -> int:
        probe = torch.tensor([self._timed_call(fn, setup)], dtype=torch.float64, device=self.device)
        if dist.is_initialized():
            dist.all_reduce(probe, op=dist.ReduceOp.MAX, group=group)
        return int(min(64, max(1, self.min_time_s // max(float(probe.item()), 1e-9))))


def median_over_ranks(values: list[float], device: torch.device) -> list[float]:
    """Element-wise median of every rank's list (same length and order on each rank)."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    local = torch.tensor(values, dtype=torch.float64, device=device)
    if world == 1:
        return local.tolist()
    gathered = torch.empty(world * len(values), dtype=torch.float64, device=device)
    dist.all_gather_into_tensor(gathered, local)
    return gathered.view(world, -1).median(dim=0).values.tolist()
