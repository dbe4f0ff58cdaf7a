"""Achieved matmul throughput as a function of GEMM size: an efficiency curve, not one constant.

Small GEMMs cannot fill the GPU (too few tiles for the SMs, fixed launch and tail costs); large ones reach a
plateau below the datasheet peak. We model the achieved fraction of peak for a GEMM of F FLOPs as a
saturating curve

    eff(F) = max_fraction * F / (F + half_flops)

whose two parameters live in each GPU profile (`matmul_efficiency`), with their sources there: the plateau
from published cuBLAS measurements and NVIDIA's Deep Learning Performance guide ("Matrix Multiplication
Background"), the knee from the same guide's wave-quantisation discussion; `meshplan calibrate` measures
both on the user's own machine. This is the same hyperbolic form that roofline-style latency models use
(time = F / (peak*max) + half_flops / (peak*max): a fixed per-GEMM overhead plus a throughput term).
"""

from __future__ import annotations

import numpy as np

# Fraction of the isolated-benchmark plateau (the profiles' max_fraction: MAMF sweeps, kernel papers) that GEMMs
# and attention kernels sustain inside a training step on a GPU: clocks held down by the power cap under
# sustained load, cold caches between kernels, non-ideal transposed shapes in backward. FITTED to a
# measurement: least squares over all ten per-layer times of Korthikanti et al. 2022 Table 4 (22B GPT layer on
# A100, TP 8; baseline / sequence-parallel / full / selective / selective + SP, forward and backward), with the
# A100 profile's published-measurement GEMM knee (a100-80gb.yaml half_flops) and its achievable HBM bandwidth
# (a100-80gb.yaml memory_bandwidth_efficiency) and the backward TP collectives as exposed as Megatron's
# asynchronous column-parallel backward leaves them (comm.tp_backward_exposed_s: Table 4 ran Megatron-LM of May
# 2022, whose async all-reduce was on by default), every residual within 0.25 ms of 7-20 ms (0.880 with the
# backward collectives all exposed, max residual 0.49 ms; 0.833 with datasheet bandwidth too); reproduce with
# benchmarks/fit_layer_overhead.py. The same fit leaves no room for element-wise work beyond the itemised passes
# (the SP rows bound it), so the layer model counts only those. Not applied to CPU profiles, whose plateau is measured in place (benchmarks/measure_cpu_profile.py).
SUSTAINED_FRACTION_OF_ISOLATED = 0.811

# How much faster FlashAttention-2 runs attention than FlashAttention-1 on the same GPU. SOURCE: Dao 2023
# (FlashAttention-2, arXiv 2307.08691), abstract: FlashAttention reaches "only 25-40% of the theoretical maximum
# FLOPs/s" on A100; FlashAttention-2's changes "yield around 2x speedup compared to FlashAttention, reaching 50-73%".
# Measured on A100; applied to the FlashAttention-2 efficiency of every profile (LESS SURE beyond Ampere).
FLASH2_SPEEDUP_OVER_FLASH1 = 2.0


def gemm_time_s(flops: np.ndarray | float, peak_flops: float, max_fraction: float, half_flops: float) -> np.ndarray:
    """Seconds for a GEMM of `flops` FLOPs: F / (peak * eff(F)) = (F + half_flops) / (peak * max_fraction)."""
    flops = np.asarray(flops, dtype=float)
    return np.where(flops > 0, (flops + half_flops) / (peak_flops * max_fraction), 0.0)
