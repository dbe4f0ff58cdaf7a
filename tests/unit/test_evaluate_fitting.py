"""`evaluate_fitting` (the search's first pass: step times assembled only for the rows that fit) gives exactly
what `evaluate_table` gives for the whole table: the same fits and peak memory for every row, and bit-identical
step times and breakdowns for the rows that fit, with most rows out of memory and with all rows fitting."""

from __future__ import annotations

import numpy as np
import pytest

import hardware_profiles
from planner.api import make_context
from planner.cost.comm import AxisBandwidth
from planner.cost.evaluate import evaluate_fitting, evaluate_table
from planner.layout import Workload
from planner.model import preset
from planner.solver.bounds import optimistic_bw
from planner.solver.space import Pins, SearchLimits, expand_shapes, shape_candidates, space_of

CASES = {
    "mostly-out-of-memory": ("llama3-70b", "dgx-h100", 64, Workload(global_batch=64, seq_len=8192)),
    "mixed": ("llama3-8b", "dgx-h100", 16, Workload(global_batch=32, seq_len=4096)),
    "none-fits": ("llama3-70b", "dgx-h100", 8, Workload(global_batch=8, seq_len=8192)),
}
FIELDS = ("step_time_s", "compute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s", "dp_comm_s", "bubble_s",
          "optimizer_s", "peak_memory_bytes", "pipeline_s", "rank_total_s", "rank_forward_s")


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("optimistic", [False, True])
def test_fitting_rows_equal_the_whole_table(name: str, optimistic: bool) -> None:
    model, cluster, gpus, workload = CASES[name]
    ctx = make_context(preset(model), hardware_profiles.cluster(cluster, gpus=gpus), workload)
    space = space_of(ctx, Pins(), SearchLimits(max_micro_batch=2))
    table = expand_shapes(space, shape_candidates(space))
    assert len(table["dp"]) > 100
    bw = optimistic_bw(ctx.topology, table) if optimistic else AxisBandwidth(ctx.topology)
    whole = evaluate_table(ctx, table, bw)
    fits, peak, part = evaluate_fitting(ctx, table, bw)
    np.testing.assert_array_equal(fits, whole.fits)
    assert peak.tobytes() == whole.peak_memory_bytes.tobytes()
    if name == "none-fits":
        assert not fits.any() and part is None
        return
    assert 0 < fits.sum() < len(fits) if name != "mixed" else fits.any()
    assert part is not None
    for f in FIELDS:
        assert getattr(part, f).tobytes() == getattr(whole, f)[fits].tobytes(), f
    assert part.fits.all()
