"""The data of a layer-partition problem, its integer form, and the oracle `partition_cpsat` is tested against.

`PartitionProblem` holds the float data (seconds, bytes); `scale` turns it into CP-SAT's integer units, stated
once here: times are integer multiples of TIME_UNIT_S = 1 ns (rounded to nearest), memory is whole bytes
(per-layer and fixed memory rounded up, capacities down, so a partition that fits in integers truly fits).
`integer_objective` is what the CP-SAT model minimises, and `brute_force` enumerates every contiguous
partition with it (the test oracle on small problems); `objective_s` is a partition's value on the float data.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from planner.cost.typed import counts_of
from planner.layout.schedules import SCHEDULE_NAMES
from planner.layout.schedules import SCHEDULES as REGISTRY

TIME_UNIT_S = 1e-9  # one CP-SAT time unit: 1 ns (see the module docstring)
BOTTLENECK = "bottleneck"
SCHEDULES = (BOTTLENECK, *SCHEDULE_NAMES)
"""Objectives: the busiest rank's time alone, or a pipeline schedule's makespan (`planner.layout.schedules`)."""


@dataclass(frozen=True)
class PartitionProblem:
    """The data of one partition problem (see the module docstring); arrays are per rank r and type k."""

    layer_types: tuple[int, ...]  # type index of each decoder layer, in layer order
    layer_time_s: np.ndarray  # (p, K) one layer of type k on rank r, per micro-batch
    extra_time_s: np.ndarray  # (p,) embedding / head time on the end ranks, per micro-batch
    layer_memory_bytes: np.ndarray  # (p, K)
    fixed_memory_bytes: np.ndarray  # (p,)
    capacity_bytes: np.ndarray  # (p,)
    virtual_stages: int = 1
    schedule: str = "bottleneck"
    num_microbatches: int = 1
    # The zero-bubble unit g = T_F + T_B - T_W (planner.layout.schedules), needed by zero-bubble schedules:
    layer_bubble_s: np.ndarray | None = None  # (p, K) of one layer of type k on rank r, per micro-batch
    extra_bubble_s: np.ndarray | None = None  # (p,) of the embedding / head on the end ranks

    def __post_init__(self) -> None:
        p, K = np.shape(self.layer_time_s)
        if np.shape(self.layer_memory_bytes) != (p, K):
            raise ValueError(f"layer_memory_bytes must be {p} x {K} like layer_time_s")
        for name in ("extra_time_s", "fixed_memory_bytes", "capacity_bytes"):
            if np.shape(getattr(self, name)) != (p,):
                raise ValueError(f"{name} must have one entry per rank ({p})")
        if any(not 0 <= k < K for k in self.layer_types):
            raise ValueError(f"layer_types must be type indices in 0..{K - 1}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule {self.schedule!r}; allowed: {', '.join(SCHEDULES)}")
        if self.uses_bubble_times and (self.layer_bubble_s is None or self.extra_bubble_s is None):
            raise ValueError(f"{self.schedule} needs layer_bubble_s and extra_bubble_s")
        if self.virtual_stages < 1 or self.num_microbatches < 1:
            raise ValueError("virtual_stages and num_microbatches must be >= 1")

    @property
    def uses_bubble_times(self) -> bool:
        """The schedule's objective reads the zero-bubble unit g (zero-bubble schedules)."""
        return objective_coefficients(self.schedule, self.num_microbatches, self.virtual_stages)[2] != 0

    @property
    def pp(self) -> int:
        return int(np.shape(self.layer_time_s)[0])

    @property
    def num_types(self) -> int:
        return int(np.shape(self.layer_time_s)[1])

    @property
    def num_chunks(self) -> int:
        return self.pp * self.virtual_stages


@dataclass(frozen=True)
class ScaledProblem:
    """`PartitionProblem` in CP-SAT units: integer nanoseconds and bytes (module docstring)."""

    layer_types: tuple[int, ...]
    time: np.ndarray
    extra: np.ndarray
    bubble: np.ndarray
    extra_bubble: np.ndarray
    mem: np.ndarray
    fixed: np.ndarray
    cap: np.ndarray
    pp: int
    v: int
    schedule: str
    m: int


def scale(problem: PartitionProblem) -> ScaledProblem:
    """Round the data to CP-SAT's integer units (times to nearest, memory conservatively)."""
    t = lambda x: np.rint(np.asarray(x, dtype=float) / TIME_UNIT_S).astype(np.int64)  # noqa: E731
    zb = problem.uses_bubble_times
    return ScaledProblem(
        layer_types=tuple(int(k) for k in problem.layer_types), time=t(problem.layer_time_s), extra=t(problem.extra_time_s),
        bubble=t(problem.layer_bubble_s) if zb else np.zeros_like(t(problem.layer_time_s)),
        extra_bubble=t(problem.extra_bubble_s) if zb else np.zeros(problem.pp, dtype=np.int64),
        mem=np.ceil(np.asarray(problem.layer_memory_bytes, dtype=float)).astype(np.int64),
        fixed=np.ceil(np.asarray(problem.fixed_memory_bytes, dtype=float)).astype(np.int64),
        cap=np.floor(np.asarray(problem.capacity_bytes, dtype=float)).astype(np.int64),
        pp=problem.pp, v=problem.virtual_stages, schedule=problem.schedule if problem.pp > 1 else "gpipe",
        m=problem.num_microbatches,
    )


def objective_coefficients(schedule: str, m: int, v: int) -> tuple[int, int, int, int]:
    """(a, b, c, d): the objective is (a * max t + b * sum t + c * (sum g - max g)) / d (integers, registry)."""
    if schedule == BOTTLENECK:
        return 1, 0, 0, 1
    return REGISTRY[schedule].objective(m, v)


def pipeline_value(schedule: str, m: int, v: int, t: np.ndarray, g: np.ndarray | None = None):
    """The objective for rank times t (and zero-bubble units g), times its divisor d (an integer on integer data)."""
    a, b, c, _ = objective_coefficients(schedule, m, v)
    value = a * t.max() + b * t.sum()
    if c:
        assert g is not None
        value = value + c * (g.sum() - g.max())
    return value


def integer_objective(s: ScaledProblem, chunks: tuple[int, ...]) -> tuple[int, bool]:
    """(primary objective, valid) of a partition in integer units: what CP-SAT minimises (the test oracle);
    valid = every rank fits and each rank's chunks are even (sizes differ by at most one)."""
    n = counts_of(s.layer_types, chunks, s.pp, s.time.shape[1])
    t = (n * s.time).sum(axis=1) + s.extra
    g = (n * s.bubble).sum(axis=1) + s.extra_bubble
    fits = bool(((n * s.mem).sum(axis=1) + s.fixed <= s.cap).all())
    even = all(max(chunks[r::s.pp]) - min(chunks[r::s.pp]) <= 1 for r in range(s.pp))
    return int(pipeline_value(s.schedule, s.m, s.v, t, g)), fits and even


def brute_force(problem: PartitionProblem) -> tuple[int, tuple[int, ...]] | None:
    """The least integer objective over every contiguous partition that fits, and one partition attaining it."""
    s = scale(problem)
    L, C = len(s.layer_types), s.pp * s.v
    best = None
    for cuts in itertools.combinations_with_replacement(range(L + 1), C - 1):
        chunks = tuple(int(x) for x in np.diff([0, *cuts, L]))
        value, fits = integer_objective(s, chunks)
        if fits and (best is None or value < best[0]):
            best = (value, chunks)
    return best


def objective_s(problem: PartitionProblem, chunks: tuple[int, ...]) -> float:
    """The objective of a partition on the unrounded data, in seconds (interleaved divided back by v)."""
    n = counts_of(tuple(problem.layer_types), chunks, problem.pp, problem.num_types)
    t = (n * problem.layer_time_s).sum(axis=1) + problem.extra_time_s
    g = None
    if problem.layer_bubble_s is not None and problem.extra_bubble_s is not None:
        g = (n * problem.layer_bubble_s).sum(axis=1) + problem.extra_bubble_s
    schedule = problem.schedule if problem.pp > 1 else "gpipe"
    m, v = problem.num_microbatches, problem.virtual_stages
    return float(pipeline_value(schedule, m, v, t, g)) / objective_coefficients(schedule, m, v)[3]
