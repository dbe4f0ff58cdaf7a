"""Fit the cost model's un-itemised element-wise work per token to a published per-layer measurement.

    .venv/bin/python benchmarks/fit_layer_overhead.py

Korthikanti et al. 2022, Table 4, measured one transformer layer of their 22B GPT (hidden 6144, 64 heads,
sequence 2048, TP 8, 8192 tokens per micro-batch, no sequence parallelism, no recomputation) on A100 GPUs:
forward 7.7 ms, backward 11.9 ms. This script finds the value of
planner.cost.compute.UNITEMISED_ELEMENTS_PER_HIDDEN (element-wise passes per token and hidden unit beyond the
itemised norms and residuals) for which meshplan's layer model (compute terms + TP all-reduce over the DGX A100
topology) gives the measured 19.6 ms, and prints the per-layer times at the fit and at the current value.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq

import hardware_profiles
import planner.cost.compute as compute
from planner.api import make_context
from planner.cost.comm import AxisBandwidth, tp_layer_fwd_s
from planner.cost.evaluate import _coeff_columns
from planner.model import ModelSpec
from planner.workload import Workload

MEASURED_FWD_S, MEASURED_BWD_S = 7.7e-3, 11.9e-3  # Korthikanti et al. 2022 Table 4, baseline row
GPT_22B = ModelSpec(
    name="gpt-22b", num_layers=48, hidden_size=6144, num_heads=64, num_kv_heads=64, ffn_hidden_size=24576,
    vocab_size=51200, max_seq_len=2048, mlp="gelu", norm="layernorm", position="learned", tied_embeddings=True,
    qkv_bias=True, linear_bias=True, source="Korthikanti et al. 2022 Table 3 (22B)",
)


def layer_times_s(extra: float | None) -> tuple[float, float]:
    cluster = hardware_profiles.cluster("dgx-a100", gpus=8)
    ctx = make_context(GPT_22B, cluster, Workload(global_batch=4, seq_len=2048, flash_attention=False))
    saved = compute.UNITEMISED_ELEMENTS_PER_HIDDEN
    if extra is not None:
        compute.UNITEMISED_ELEMENTS_PER_HIDDEN = extra
    tokens, tp, one = np.array([8192]), np.array([8]), np.array([1])
    t = compute.layer_time_s(ctx, ctx.layer_types[0], tokens, tp, one, one, np.array([False]))
    comm = tp_layer_fwd_s(ctx, _coeff_columns(AxisBandwidth(ctx.topology), "all_reduce", tp, one, np.array([8])), tokens)
    compute.UNITEMISED_ELEMENTS_PER_HIDDEN = saved
    return float(t.fwd_s[0] + comm[0]), float(t.bwd_s[0] + comm[0])


def main() -> None:
    fit = brentq(lambda x: sum(layer_times_s(x)) - (MEASURED_FWD_S + MEASURED_BWD_S), 0.0, 200.0)
    f, b = layer_times_s(fit)
    f0, b0 = layer_times_s(None)
    print(f"fitted UNITEMISED_ELEMENTS_PER_HIDDEN = {fit:.2f}")
    print(f"at the fit: forward {f * 1e3:.2f} ms, backward {b * 1e3:.2f} ms (measured 7.7 / 11.9)")
    print(f"at the current value {compute.UNITEMISED_ELEMENTS_PER_HIDDEN}: forward {f0 * 1e3:.2f} ms, backward {b0 * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
