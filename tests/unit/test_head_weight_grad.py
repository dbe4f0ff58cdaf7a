"""The LM head's weight-gradient GEMM belongs to the last pipeline rank's W pass.

Zero-bubble schedules defer every linear layer's weight-gradient GEMM to the W pass, the output layer's included
(Qi et al.'s Megatron fork: WeightGradStore; torch.distributed.pipelining: stage_backward_weight). Checked here:
- the head's W share is its forward GEMM's time, and its whole price is that GEMM three times plus the loss;
- the mean-layer path (`evaluate_table`) and the per-type path the CP-SAT partition uses (`typed.evaluate_partition`)
  put exactly that time in the last rank's W and nothing extra in any other rank's, so a zero-bubble row's bubble
  unit g = t - 2w is the same in both;
- a zero-bubble layout's step is the registry's makespan of those per-rank t and g.
"""

from __future__ import annotations

import numpy as np
import pytest

import hardware_profiles
from planner.api import make_context
from planner.cost import compute, elementwise
from planner.cost.comm import AxisBandwidth
from planner.cost.evaluate import evaluate_table
from planner.cost.typed import evaluate_partition, rank_costs
from planner.layout import COLUMNS, Workload
from planner.layout.schedules import BY_CODE, ScheduleCode
from planner.model import preset
from planner.solver.space import Pins, SearchLimits, expand_shapes, shape_candidates, space_of


def _zero_bubble_rows(ctx, count: int) -> list[dict[str, int]]:
    space = space_of(ctx, Pins({"schedule": "zb-h1"}), SearchLimits(prune_dominated=False))
    table = expand_shapes(space, shape_candidates(space))
    piped = np.nonzero((table["pp"] > 1) & (table["sched"] == int(ScheduleCode.ZB_H1)))[0]
    assert len(piped), "no zero-bubble pipeline rows"
    pick = np.random.default_rng(0).choice(piped, min(count, len(piped)), replace=False)
    return [{k: int(table[k][i]) for k in COLUMNS} for i in pick]


@pytest.fixture(scope="module")
def ctx():
    return make_context(preset("llama3-8b"), hardware_profiles.cluster("dgx-h100", nodes=2),
                        Workload(global_batch=32, seq_len=4096, runtime="megatron"))


def test_the_head_w_share_is_its_forward_gemm(ctx) -> None:
    tokens, tp = np.array([8192.0, 4096.0]), np.array([1, 4])
    w = compute.head_weight_grad_time_s(ctx, tokens, tp)
    ce_f, ce_b = elementwise.cross_entropy_bytes_per_logit(ctx)
    loss = tokens * ctx.model.vocab_size / tp * (ce_f + ce_b) / ctx.memory_bandwidth_Bps
    np.testing.assert_allclose(compute.head_time_s(ctx, tokens, tp), 3 * w + loss, rtol=1e-12)
    assert np.all(w > 0)


def test_the_last_rank_alone_carries_the_head_weight_gradient(ctx) -> None:
    bw = AxisBandwidth(ctx.topology)
    for row in _zero_bubble_rows(ctx, 12):
        p, L = row["pp"], ctx.model.num_layers
        per_rank = np.full(p, L // p)
        per_rank[: L % p] += 1
        table = {k: np.array([row[k]]) for k in COLUMNS}
        want = evaluate_table(ctx, table, bw, rank_layers=np.array([per_rank]))
        costs = rank_costs(ctx, row, bw)
        got = evaluate_partition(ctx, costs, per_rank.reshape(-1, 1))
        tokens = np.array([row["mb"] * ctx.workload.seq_len / row["cp"]], dtype=float)
        head_w = float(compute.head_weight_grad_time_s(ctx, tokens, np.array([row["tp"]]))[0])
        layers_w = per_rank * costs.layer_w_s[:, 0]
        np.testing.assert_allclose(want.rank_weight_grad_s[0], layers_w + np.eye(p)[-1] * head_w, rtol=1e-12)
        np.testing.assert_allclose(got.rank_weight_grad_s[0], want.rank_weight_grad_s[0], rtol=1e-12)
        np.testing.assert_allclose(costs.extra_bubble_s, costs.extra_s - 2 * np.eye(p)[-1] * head_w, rtol=1e-12)
        np.testing.assert_allclose(got.step_time_s, want.step_time_s, rtol=1e-12)


def test_a_zero_bubble_step_uses_the_head_in_w(ctx) -> None:
    """The zb-h1 makespan m t_max + sum g - max g (Qi et al. Sec. 3) of the per-rank t and g = t - 2w, with the
    head's weight gradient in the last rank's w, is the pipeline part of the step the cost model reports."""
    bw = AxisBandwidth(ctx.topology)
    for row in _zero_bubble_rows(ctx, 6):
        p, L, m = row["pp"], ctx.model.num_layers, row["m"]
        per_rank = np.full(p, L // p)
        per_rank[: L % p] += 1
        res = evaluate_table(ctx, {k: np.array([row[k]]) for k in COLUMNS}, bw, rank_layers=np.array([per_rank]))
        t, w = res.rank_total_s[0], res.rank_weight_grad_s[0]
        g = t - 2 * w
        pipe = BY_CODE[row["sched"]].makespan(m, row["v"], t.max(), t.sum(), g.max(), g.sum(), p)
        assert res.pipeline_s[0] == pytest.approx(pipe, rel=1e-12)
        tokens = np.array([row["mb"] * ctx.workload.seq_len / row["cp"]], dtype=float)
        head_w = float(compute.head_weight_grad_time_s(ctx, tokens, np.array([row["tp"]]))[0])
        assert w[-1] == pytest.approx(per_rank[-1] * w[0] / per_rank[0] + head_w, rel=1e-12)
