"""Megatron's blocking stage-boundary exchange: the host synchronisation each one pays (runtime.p2p_sync_s)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import hardware_profiles
from planner.api import make_context
from planner.cost import comm
from planner.cost.runtime import BLOCKING_P2P_SYNC_S, RUNTIME_COSTS, p2p_sync_s
from planner.layout import Workload
from planner.layout.schedules import ScheduleCode
from planner.model import preset

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

MODEL = preset("megatron-gpt-1.7b")


def ctx_for(runtime: str, overlap_pp_comm: bool):
    return make_context(MODEL, hardware_profiles.cluster("dgx-a100", gpus=8),
                        Workload(global_batch=8, seq_len=1024, runtime=runtime, overlap_pp_comm=overlap_pp_comm),
                        framework="any")


def test_only_megatron_blocking_exchanges_pay_the_sync() -> None:
    assert RUNTIME_COSTS["megatron"].p2p_host_sync
    assert not RUNTIME_COSTS["pytorch"].p2p_host_sync and not RUNTIME_COSTS["pytorch-compile"].p2p_host_sync
    assert p2p_sync_s(ctx_for("megatron", overlap_pp_comm=False)) == BLOCKING_P2P_SYNC_S
    assert p2p_sync_s(ctx_for("megatron", overlap_pp_comm=True)) == 0.0  # --overlap-p2p-communication: no sync
    assert p2p_sync_s(ctx_for("pytorch", overlap_pp_comm=False)) == 0.0


def test_a_blocking_step_pays_it_once_per_exchange_call() -> None:
    """By hand, with free transfers (no latency, no bytes) over pp 4 with m 8: 1F1B makes 2 (8 + 3) = 22 calls;
    interleaved at v 2 makes 8 x 2 + 2 x 3 + 1 x 4 = 26 (one combined call per steady forward/backward pair)."""
    ctx = ctx_for("megatron", overlap_pp_comm=False)
    free = np.array([0.0])
    m, v1, v2, pp, window = np.array([8]), np.array([1]), np.array([2]), np.array([4]), np.array([1.0])
    one_f1b, inter = np.array([ScheduleCode.ONE_F_ONE_B]), np.array([ScheduleCode.INTERLEAVED])
    assert comm.pp_exposed_s(ctx, free, m, v1, pp, one_f1b, window)[0] == pytest.approx(22 * 0.86e-3)
    assert comm.pp_exposed_s(ctx, free, m, v2, pp, inter, window)[0] == pytest.approx(26 * 0.86e-3)
    assert comm.pp_exposed_s(ctx, free, m, v2, np.array([1]), inter, window)[0] == 0.0  # no pipeline, no exchange
    zero_bubble = np.array([ScheduleCode.ZB_H1])  # Qi et al.'s scheduler waits on its requests, no host sync
    assert comm.blocking_exchange_calls(m, v1, pp, zero_bubble)[0] == 0.0
    assert comm.pp_exposed_s(ctx, free, m, v1, pp, zero_bubble, window)[0] == 0.0
    overlapped = ctx_for("megatron", overlap_pp_comm=True)
    assert comm.pp_exposed_s(overlapped, free, m, v1, pp, one_f1b, window)[0] == 0.0


def test_the_committed_value_is_the_megascale_ablation_derivation() -> None:
    import derive_p2p_sync

    assert derive_p2p_sync.derive(1) == pytest.approx(BLOCKING_P2P_SYNC_S, rel=0.02)
