"""The search's shortcuts change no number: deduplicated bounds, the pp = 1 split and the coefficient columns.

`micro_batch_bounds` computes a layer's bound once per distinct (micro-batch, tp, cp, ep, TP world) and the
split once per distinct (that, pp); `balanced_split` skips the rows with one pipeline rank;
`AxisBandwidth.columns` answers a whole column from one table. Each must equal the row-by-row computation
bit for bit.
"""

from __future__ import annotations

import numpy as np

import hardware_profiles
from planner.api import make_context
from planner.cost.comm import AxisBandwidth
from planner.cost.partition import balanced_split
from planner.layout import Workload
from planner.layout.numeric import distinct_rows
from planner.model import preset
from planner.solver.bounds import micro_batch_bounds
from planner.solver.space import Pins, SearchLimits, micro_batch_pairs, shape_candidates, space_of


def test_distinct_rows_rebuild_every_row() -> None:
    rng = np.random.default_rng(0)
    cols = [rng.integers(1, 5, 200), rng.integers(1, 3, 200), rng.integers(1, 4, 200)]
    first, inverse = distinct_rows(*cols)
    for c in cols:
        assert np.array_equal(c[first][inverse], c)
    assert len(first) == len({tuple(r) for r in np.stack(cols, axis=1).tolist()})
    huge = [np.array([2**40, 1, 2**40]), np.array([2**40, 1, 2**40])]  # too wide to pack: whole-row compare
    first, inverse = distinct_rows(*huge)
    assert len(first) == 2 and np.array_equal(huge[0][first][inverse], huge[0])


def test_balanced_split_with_single_stage_rows_equals_row_by_row() -> None:
    rng = np.random.default_rng(1)
    n = 300
    pp = rng.integers(1, 9, n)
    u, e0, el = rng.random(n) + 0.1, rng.random(n), rng.random(n) * 3
    whole = balanced_split(61, pp, u, e0, el)
    for i in range(n):
        one = balanced_split(61, pp[i:i + 1], u[i:i + 1], e0[i:i + 1], el[i:i + 1])
        assert whole.counts(i, int(pp[i])) == one.counts(0, int(pp[i]))
        assert whole.mid_trimmed[i] == one.mid_trimmed[0]


def test_micro_batch_bounds_equal_row_by_row_on_a_cluster_tp_does_not_tile() -> None:
    # 600 GPUs: tp = 16 does not divide them, so its TP world depends on the ranks in use (GPT-3 175B: its
    # 96 KV heads allow tp = 16).
    model = preset("gpt3-175b")
    cluster = hardware_profiles.cluster("dgx-a100", gpus=600)
    ctx = make_context(model, cluster, Workload(global_batch=1200, seq_len=2048))
    pins, limits = Pins({}), SearchLimits()
    space = space_of(ctx, pins, limits)
    shapes = shape_candidates(space)
    assert 16 in shapes[0]
    idx, mb = micro_batch_pairs(space, shapes)
    rows = np.random.default_rng(2).choice(len(idx), 400, replace=False)
    cols = [a[idx[rows]] for a in shapes]
    bw = AxisBandwidth(ctx.topology)
    together = micro_batch_bounds(ctx, bw, pins, *cols, mb[rows])
    alone = [micro_batch_bounds(ctx, bw, pins, *(c[i:i + 1] for c in cols), mb[rows][i:i + 1])[0] for i in range(400)]
    assert [float(x).hex() for x in together] == [float(x).hex() for x in alone]


def test_columns_equal_scalar_queries() -> None:
    cluster = hardware_profiles.cluster("dgx-h100", gpus=200)
    bw = AxisBandwidth(make_context(preset("llama3-8b"), cluster, Workload(global_batch=200, seq_len=2048)).topology)
    size = np.array([1, 2, 8, 3, 5, 2, 8, 4])
    stride = np.array([1, 1, 1, 1, 8, 40, 16, 2])
    world = np.array([200, 200, 192, 198, 120, 160, 128, 8])
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "p2p", "all_to_all"):
        a, b = bw.columns(kind, size, stride, world)
        for i in range(len(size)):
            w = 200 if 200 % (size[i] * stride[i]) == 0 else world[i]  # whole cluster where the pattern tiles it
            ea, eb, _ = bw.coeffs(kind, (int(w // (size[i] * stride[i])), int(size[i]), int(stride[i])), 1)
            assert (a[i], b[i]) == (ea, eb)
