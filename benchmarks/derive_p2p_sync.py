"""Derive the GPU time a blocking Megatron stage-boundary exchange costs, from MegaScale's PP-overlap ablation.

    .venv/bin/python benchmarks/derive_p2p_sync.py

MegaScale (Jiang et al. 2024, NSDI'24) Table 3 ablates its optimizations on the 175B model (96 layers, h 12288,
seq 2048, vocab 64,000; Table 1, Sec. 6.1) on 256 A100 at batch 256 with tp8 pp8 dp4 and the interleaved schedule
at six chunks per rank (Sec. 6.1): "+ PP overlap" lifts MFU from 55.5 % to 58.0 %. The step at 55.5 % follows from
Table 2's row for the same model on the same 256 GPUs (batch 768, 40.0 s at 53.0 % MFU): FLOPs per sequence
= 0.530 x 312e12 x 256 x 40.0 / 768, so the step of 256 sequences at 55.5 % MFU is those FLOPs over
256 x 312e12 x 0.555. The overlap saves (1 - 55.5 / 58.0) of it.

This script costs the same layout (megatron runtime as Megatron-LM 285068c8 runs it, micro-batch 1, m = 64) with
stage-boundary exchanges blocking and overlapped, takes the cost model's own credit for the overlap without the
synchronisation term (bandwidth and latency of the transfers it hides), and spreads the rest of the measured saving
over the step's blocking exchange calls (planner.cost.comm.blocking_exchange_calls): the value of
planner.cost.runtime.BLOCKING_P2P_SYNC_S. The ablation is
not a validation case (benchmarks/data/published_runs.yaml holds Table 2's rows). LESS SURE: MegaScale does not
state the micro-batch; 1 is Megatron's GPT-3 175B example script's, and 2 is printed beside it. The MFU gain also
holds what MegaScale's PP overlap removes besides the synchronisation (the lock-step waits of blocking sends).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import validation  # noqa: E402
from published_cases import build_model, load_runs  # noqa: E402
from published_runs import workload  # noqa: E402

from planner.api import evaluate  # noqa: E402
from planner.cost.comm import blocking_exchange_calls  # noqa: E402
from planner.cost.runtime import BLOCKING_P2P_SYNC_S  # noqa: E402
from planner.layout.schedules import ScheduleCode  # noqa: E402

CASE = "megascale2024_table2_175B_megatron_256gpu"  # Table 2: batch 768, 256 GPUs, 40.0 s, MFU 53.0 %
TABLE2_STEP_S, TABLE2_MFU, TABLE2_BATCH = 40.0, 0.530, 768
ABLATION_BATCH, MFU_BEFORE, MFU_AFTER = 256, 0.555, 0.580  # Table 3: "+ TP overlap" 55.5 -> "+ PP overlap" 58.0
PEAK_FLOPS, GPUS = 312e12, 256


def derive(micro_batch: int) -> float:
    """Seconds per exchange call that the measured saving leaves after the cost model's own overlap credit."""
    case = {c.id: c for c in load_runs().cases}[CASE]
    fixed = validation.published_layout_cost(case)
    m = ABLATION_BATCH // (fixed.layout.dp * micro_batch)
    layout = fixed.layout.model_copy(update={"micro_batch": micro_batch, "num_microbatches": m, "virtual_stages": 6})
    steps = {}
    for overlap in (False, True):
        work = workload(case).model_copy(update={"global_batch": ABLATION_BATCH, "overlap_pp_comm": overlap,
                                                 "tp_comm_overlap": True})
        steps[overlap] = evaluate(build_model(case), fixed.cluster, work, layout, allow_oom=True,
                                  framework="any").prediction.step_time_s
    calls = float(blocking_exchange_calls(np.array([m]), np.array([layout.virtual_stages]), np.array([layout.pp]),
                                          np.array([ScheduleCode.INTERLEAVED]))[0])
    credit = steps[False] - steps[True] - calls * BLOCKING_P2P_SYNC_S  # the model's credit without the sync term
    flops_per_seq = TABLE2_MFU * PEAK_FLOPS * GPUS * TABLE2_STEP_S / TABLE2_BATCH
    step_before = ABLATION_BATCH * flops_per_seq / (GPUS * PEAK_FLOPS * MFU_BEFORE)
    saved = step_before * (1 - MFU_BEFORE / MFU_AFTER)
    per_call = (saved - credit) / calls
    print(f"micro-batch {micro_batch} (m = {m}): step before {step_before:.3f} s, measured saving {saved:.3f} s, "
          f"model credit {credit:.3f} s, left {saved - credit:.3f} s over {calls:.0f} exchange calls = "
          f"{per_call * 1e3:.3f} ms per call")
    return per_call


if __name__ == "__main__":
    value = derive(1)
    derive(2)
    print(f"BLOCKING_P2P_SYNC_S committed {BLOCKING_P2P_SYNC_S * 1e3:.3f} ms; derived (micro-batch 1) {value * 1e3:.3f} ms")
