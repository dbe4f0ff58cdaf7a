"""The schedule registry: every consumer's view of a schedule agrees with it, and its formulas agree with each
other (numpy and scalar makespan, the integer objective, the simulated timeline for equal stages)."""

from __future__ import annotations

import numpy as np
import pytest
from torch.distributed.pipelining import schedules as torch_schedules

from planner.cli.options import RecomputeChoice, ScheduleChoice
from planner.figures.timeline import ORDERS, makespan_s, simulate
from planner.layout import RECOMPUTE_NAMES, SCHEDULE_NAMES, SCHEDULES, Layout, ScheduleCode, schedules
from planner.solver.partition_data import objective_coefficients

CASES = [(p, m, v) for p in (2, 3, 4) for m in (4, 8, 12) for v in (1, 2, 3)]


def test_names_codes_and_choices_come_from_the_registry() -> None:
    assert [s.code for s in schedules.BY_CODE] == list(range(len(SCHEDULES))) == [c.value for c in ScheduleCode]
    assert tuple(c.value for c in ScheduleChoice) == SCHEDULE_NAMES
    assert tuple(c.value for c in RecomputeChoice) == RECOMPUTE_NAMES
    assert Layout.model_json_schema()["properties"]["schedule"]["enum"] == list(SCHEDULE_NAMES)
    assert set(schedules.SEARCH_ORDER) == set(SCHEDULES) == set(ORDERS)
    for s in SCHEDULES.values():
        assert isinstance(getattr(torch_schedules, s.torch_class), type), s.name
        assert s.megatron is not None or s.megatron_instead
        assert s.dominated_by is None or s.dominated_by in SCHEDULES


def _valid(s, p: int, m: int, v: int) -> bool:
    if s.virtual_stages != (v > 1) or (s.needs_microbatches_per_rank and m < p):
        return False
    return not (s.microbatches_multiple_of_pp and m % p)


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_makespan_numpy_scalar_and_integer_objective_agree(name: str) -> None:
    s = SCHEDULES[name]
    rng = np.random.default_rng(3)
    for p, m, v in CASES:
        t = rng.uniform(1.0, 3.0, p)
        f = t * rng.uniform(0.25, 0.5, p)
        scalar = s.makespan(m, v, t.max(), t.sum(), f.max(), f.sum(), p)
        column = schedules.makespan(np.array([s.code]), np.array([float(m)]), np.array([v]), np.array([t.max()]),
                                    np.array([t.sum()]), np.array([f.max()]), np.array([f.sum()]), np.array([p]))
        assert column[0] == scalar
        a, b, c, d = objective_coefficients(name, m, v)
        assert (a * t.max() + b * t.sum() + c * (f.sum() - f.max())) / d == pytest.approx(scalar, rel=1e-12)
        assert scalar >= m * t.max()  # the bubble is never negative
        assert s.makespan(m, v, t.max(), t.sum(), f.max(), f.sum(), 1) == m * t.max()


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_makespan_is_the_simulated_timeline_for_equal_stages(name: str) -> None:
    """Equal stages, F = 1, B = 2 (split B = W = 1 for zero-bubble schedules, T_B = T_W <= T_F as the formula
    assumes): the registry's closed form equals the simulated schedule."""
    s = SCHEDULES[name]
    for p, m, v in CASES:
        if not _valid(s, p, m, v):
            continue
        f, b = [1.0] * p, [2.0] * p
        ops = simulate(name, m, f, [x / 2 for x in b] if s.splits_backward else b, v=v,
                       weight_grad_s=[x / 2 for x in b] if s.splits_backward else None)
        t = np.array(f) + np.array(b)
        want = s.makespan(m, v, t.max(), t.sum(), max(f), sum(f), p)
        assert makespan_s(ops) == pytest.approx(want, rel=1e-12), (p, m, v)


def test_inflight_microbatches() -> None:
    """1F1B holds p - r, GPipe m, interleaved Korthikanti's p(1 + (p-1)/(pv)) on rank 0; at most m, 1 unpiped."""
    codes = {n: SCHEDULES[n].code for n in SCHEDULE_NAMES}
    got = schedules.inflight_microbatches(np.array([codes["1f1b"], codes["gpipe"], codes["interleaved"], codes["zb-h1"]]),
                                          np.array([1, 1, 0, 3]), np.array([4, 4, 4, 4]), np.array([1, 1, 2, 1]),
                                          np.array([8, 8, 8, 8]))
    assert got.tolist() == [3.0, 8.0, 4 * (1 + 3 / 8), 1.0]
    assert schedules.inflight_microbatches(np.array([codes["gpipe"]]), np.array([0]), np.array([1]), np.array([1]),
                                           np.array([8])).tolist() == [1.0]
    assert schedules.inflight_microbatches(np.array([codes["1f1b"]]), np.array([0]), np.array([8]), np.array([1]),
                                           np.array([2])).tolist() == [2.0]


# Qi et al. 2024 ("Zero Bubble Pipeline Parallelism", ICLR), Table 5: bubble rates of the 1.5B model on p = 8 stages,
# (cost - m (T_F + T_B + T_W)) / cost with cost the schedule's makespan from profiled uniform T_F, T_B, T_W and the
# measured per-hop communication time (Sec. 5.3; sail-sg's fork builds the same schedule graph, scheduler/zb.py).
QI_TABLE5_1P5B = {"1f1b": {24: 0.2431}, "zb-h1": {24: 0.1585, 32: 0.1242, 64: 0.0674}}


def _bubble_rate(name: str, m: int, p: int, t: float, g: float) -> float:
    cost = schedules.schedule(name).makespan_formula(m, 1, t, p * t, g, p * g)
    return (cost - m * t) / cost


@pytest.mark.parametrize("m", [32, 64])
def test_zero_bubble_makespan_scales_with_microbatches_as_qi_table5(m: int) -> None:
    """The ZB-H1 makespan's bubble is a fixed (p - 1) g behind m t: the one g that gives Table 5's rate at m = 24
    gives its rates at 32 and 64 micro-batches within 3 % (a bubble growing or shrinking with m would miss)."""
    p, t = 8, 1.0
    rate24 = QI_TABLE5_1P5B["zb-h1"][24]
    g = rate24 * 24 * t / (1 - rate24) / (p - 1)  # the per-slot bubble unit Table 5 implies at m = 24
    assert _bubble_rate("zb-h1", 24, p, t, g) == pytest.approx(rate24, rel=1e-9)
    assert _bubble_rate("zb-h1", m, p, t, g) == pytest.approx(QI_TABLE5_1P5B["zb-h1"][m], rel=0.03)

