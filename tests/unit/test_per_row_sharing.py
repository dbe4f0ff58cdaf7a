"""The search's first pass shares per-row work between rows, and every shortcut gives bit for bit what the plain
per-row computation gives:

- `layer_costs`, the mean-layer split and the memory parts they decide, computed once per distinct row of
  `LAYER_COLUMNS` and indexed back, equal those computed over every row (dense, MoE with ep > 1, both mesh
  orders, exact and optimistic bandwidth);
- `comm.dp_time_s` and `fixed_costs.optimizer_step_s` over all rank columns at once (per-row columns as
  (rows, 1)) equal one call per rank column, and `dp_time_s`, which computes only the ZeRO stages its rows run,
  gives each (stage, pipelined, zero-bubble) group alone what it gives that group beside the others;
- the exact pass's re-assembly of the first pass's rows with the real DP and PP collectives equals
  `evaluate_table` of those rows;
- the rules' schedule-flag lookup equals `np.isin` over the registry's codes.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

import hardware_profiles
from planner.api import make_context
from planner.cost import comm, fixed_costs
from planner.cost.assemble import assemble
from planner.cost.comm import AxisBandwidth
from planner.cost.dp_groups import replicate_coeffs
from planner.cost.evaluate import (
    LAYER_COLUMNS,
    _layer_memory,
    _mean_layer_ranks,
    evaluate_again,
    evaluate_fitting,
    evaluate_table,
    fitting_rows,
)
from planner.cost.layer_costs import LayerCosts, layer_costs
from planner.layout import Workload
from planner.layout.numeric import distinct_rows
from planner.layout.rules import _flag
from planner.layout.schedules import SCHEDULES, by_code
from planner.model import preset
from planner.solver.bounds import optimistic_bw
from planner.solver.space import Pins, SearchLimits, expand_shapes, shape_candidates, space_of

CASES = {
    "dense": ("llama3-70b", "dgx-h100", 64, Workload(global_batch=64, seq_len=8192)),
    "moe": ("mixtral-8x7b", "dgx-h100", 32, Workload(global_batch=64, seq_len=4096)),
}


def _setup(name: str, optimistic: bool):
    model, cluster, gpus, workload = CASES[name]
    ctx = make_context(preset(model), hardware_profiles.cluster(cluster, gpus=gpus), workload)
    space = space_of(ctx, Pins(), SearchLimits(max_micro_batch=2))
    table = expand_shapes(space, shape_candidates(space))
    bw = optimistic_bw(ctx.topology, table) if optimistic else AxisBandwidth(ctx.topology)
    return ctx, table, bw


def _same(a, b, what: str) -> None:
    if isinstance(a, tuple):
        for x, y in zip(a, b, strict=True):
            _same(x, y, what)
        return
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), what


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("optimistic", [False, True])
def test_distinct_layer_rows_indexed_back_equal_every_row(name: str, optimistic: bool) -> None:
    ctx, table, bw = _setup(name, optimistic)
    at, inverse = distinct_rows(*(table[k] for k in LAYER_COLUMNS))
    assert len(at) < len(table["dp"]) / 2  # rows differing only in m / schedule / v / ZeRO do share
    if name == "moe":
        assert (table["ep"] > 1).any() and len(np.unique(table["order"])) == 2
    distinct = {k: table[k][at] for k in LAYER_COLUMNS}  # layer_costs may read no other column
    lc_d, lc = layer_costs(ctx, distinct, bw), layer_costs(ctx, table, bw)
    for f in fields(LayerCosts):
        d, whole = getattr(lc_d, f.name), getattr(lc, f.name)
        if isinstance(whole, float):
            assert d == whole, f.name
        else:
            _same(tuple(x[inverse] for x in d) if isinstance(d, tuple) else d[inverse], whole, f.name)
    ranks_d, ranks = _mean_layer_ranks(ctx, distinct, lc_d)[1:], _mean_layer_ranks(ctx, table, lc)[1:]
    for x, y in zip(ranks_d, ranks, strict=True):
        _same(np.asarray(x)[inverse], np.asarray(y), "split")
    n, first, last = ranks_d[:3]
    mem_d = _layer_memory(ctx, distinct, lc_d, n, first, last)
    mem = _layer_memory(ctx, table, lc, *ranks[:3])
    for i, (x, y) in enumerate(zip(mem_d, mem, strict=True)):
        _same(np.asarray(x)[inverse], np.asarray(y), f"layer memory part {i}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_fitting_pass_equals_the_whole_table_on_shuffled_duplicated_rows(name: str) -> None:
    ctx, table, bw = _setup(name, optimistic=False)
    rng = np.random.default_rng(3)
    rows = rng.permutation(np.concatenate([np.arange(len(table["dp"])), rng.integers(0, len(table["dp"]), 200)]))
    table = {k: v[rows] for k, v in table.items()}
    whole = evaluate_table(ctx, table, bw)
    fits, peak, part = evaluate_fitting(ctx, table, bw)
    assert fits.any() and not fits.all() and part is not None
    _same(fits, whole.fits, "fits")
    _same(peak, whole.peak_memory_bytes, "peak")
    for f in ("step_time_s", "dp_comm_s", "optimizer_s", "bubble_s", "compute_s", "pipeline_s"):
        _same(getattr(part, f), getattr(whole, f)[fits], f)


@pytest.mark.parametrize("name", sorted(CASES))
def test_exact_pass_reassembly_equals_the_whole_table(name: str) -> None:
    """The search's exact pass re-assembles the optimistic first pass's rows with the real DP and PP
    collectives (`evaluate_again`): on any subset of the fitting rows, in any order, what `evaluate_table`
    with the real bandwidth gives, bit for bit; the optimistic pass itself differs (else this proves nothing)."""
    ctx, table, bw = _setup(name, optimistic=False)
    fits, _, rows = fitting_rows(ctx, table, optimistic_bw(ctx.topology, table))
    assert rows is not None and fits.any() and not fits.all()
    rng = np.random.default_rng(5)
    at = np.sort(rng.choice(len(rows.table["dp"]), size=len(rows.table["dp"]) // 2, replace=False))
    at = rng.permutation(np.concatenate([at, at[:7]]))
    whole = evaluate_table(ctx, {k: v[at] for k, v in rows.table.items()}, bw)
    again = evaluate_again(ctx, rows, at, bw)
    for f in ("step_time_s", "fits", "peak_memory_bytes", "dp_comm_s", "pp_comm_s", "optimizer_s", "bubble_s",
              "compute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pipeline_s", "rank_total_s"):
        _same(getattr(again, f), getattr(whole, f), f)
    first = rows.of_rows(at)  # the first pass's own work and layer costs (optimistic DP and PP columns)
    assert not np.array_equal(assemble(ctx, first.table, first.work, first.lc).dp_comm_s, whole.dp_comm_s)

@pytest.mark.parametrize("name", sorted(CASES))
def test_dp_and_optimizer_over_all_rank_columns_equal_column_by_column(name: str) -> None:
    ctx, table, bw = _setup(name, optimistic=False)
    lc = layer_costs(ctx, table, bw)
    _, n, first, last, rank, weight = _mean_layer_ranks(ctx, table, lc)
    params = _layer_memory(ctx, table, lc, n, first, last)[0]
    fwd, bwd = n * lc.u_fwd[:, None], n * (lc.u - lc.u_fwd)[:, None]
    zero, m, shard, pp = table["zero"], table["m"], table["dp_shard"], table["pp"]
    zb = by_code(table["sched"], lambda s: s.splits_backward).astype(bool)
    assert len(np.unique(zero)) > 1 and (pp > 1).any()

    def c(x):
        return np.asarray(x).reshape(-1, 1)

    at_once = comm.dp_time_s(ctx, params, c(zero), c(m), tuple(map(c, lc.rs_shard)), tuple(map(c, lc.ag_shard)),
                             tuple(map(c, lc.ar_rep)), c(shard), fwd, bwd, n, c(pp), c(zb))
    by_column = np.stack([comm.dp_time_s(ctx, params[:, r], zero, m, lc.rs_shard, lc.ag_shard, lc.ar_rep, shard,
                                         fwd[:, r], bwd[:, r], n[:, r], pp, zb) for r in range(n.shape[1])], axis=1)
    _same(at_once, by_column, "dp_time_s")
    cp = table["cp"]
    opt_once = fixed_costs.optimizer_step_s(ctx, params, c(zero), c(shard), cp=c(cp))
    opt_cols = np.stack([fixed_costs.optimizer_step_s(ctx, params[:, r], zero, shard, cp=cp) for r in range(n.shape[1])],
                        axis=1)
    _same(opt_once, opt_cols, "optimizer_step_s")


@pytest.mark.parametrize("flag", ["virtual_stages", "needs_microbatches_per_rank", "microbatches_multiple_of_pp",
                                  "splits_backward"])
def test_schedule_flag_lookup_equals_isin(flag: str) -> None:
    codes = [s.code for s in SCHEDULES.values() if getattr(s, flag)]
    for sched in (np.arange(-2, 12), np.array([], dtype=np.int64), np.array([3]), np.array([1.0, 2.0]),
                  np.arange(8).reshape(2, 4) % 4):
        _same(_flag(sched, flag), np.isin(sched, codes), f"{flag} {sched}")


def test_distinct_rows_with_zeros_rebuild_every_row() -> None:
    rng = np.random.default_rng(5)
    cols = [rng.integers(0, 2, 300), rng.integers(0, 1, 300), rng.integers(0, 7, 300)]  # 0/1 flags, a constant 0
    first, inverse = distinct_rows(*cols)
    for col in cols:
        assert np.array_equal(col[first][inverse], col)
    assert len(first) == len({tuple(r) for r in np.stack(cols, axis=1).tolist()})
    first, inverse = distinct_rows(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    assert len(first) == 0 and len(inverse) == 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_dp_time_of_each_stage_group_alone_equals_the_whole_table(name: str) -> None:
    """`dp_time_s` computes a ZeRO stage's exposure only where some row runs it: rows of one (ZeRO stage,
    pipelined, zero-bubble) group, evaluated alone, get bit for bit what they get beside every other stage."""
    ctx, table, bw = _setup(name, optimistic=False)
    lc = layer_costs(ctx, table, bw)
    _, n, first, last, rank, weight = _mean_layer_ranks(ctx, table, lc)
    params = _layer_memory(ctx, table, lc, n, first, last)[0]
    fwd, bwd = n * lc.u_fwd[:, None], n * (lc.u - lc.u_fwd)[:, None]
    zb = by_code(table["sched"], lambda s: s.splits_backward).astype(bool)
    ar = replicate_coeffs(lc.ar_rep, lc.ar_ddp, table["zero"])

    def c(x):
        return np.asarray(x).reshape(-1, 1)

    def dp(rows, scale=1.0):
        zero, m, shard, pp = (c(table[k][rows]) for k in ("zero", "m", "dp_shard", "pp"))
        rs, ag, rep = (tuple(c(x[rows] * scale) for x in xs) for xs in (lc.rs_shard, lc.ag_shard, ar))
        return comm.dp_time_s(ctx, params[rows], zero, m, rs, ag, rep, shard, fwd[rows], bwd[rows], n[rows], pp,
                              c(zb[rows]))

    everything = np.arange(len(zb))
    whole = dp(everything)
    # Every stage's exposure grows with its collectives' cost: none is left uncomputed where a group moves data.
    synced = (table["dp"] * table["cp"] > 1)[:, None] & (weight > 0)
    assert (dp(everything, scale=2.0) > whole)[synced].all()
    _, group = distinct_rows(table["zero"], (table["pp"] > 1).astype(np.int64), zb.astype(np.int64))
    piped = table["pp"] > 1
    assert set(table["zero"].tolist()) == {0, 1, 2, 3} and piped.any() and (zb & piped & (table["zero"] == 3)).any()
    for g in np.unique(group):
        rows = np.nonzero(group == g)[0]
        _same(dp(rows), whole[rows], f"dp_time_s of group {g}")
