"""Overlap is not free: communication that runs beside compute slows that compute down.

NCCL kernels occupy SMs (one CTA per channel) and move their bytes through HBM, so GEMMs and attention running
at the same time get fewer SMs, tail waves and less memory bandwidth. Lee et al. 2025, "Characterizing
Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning: Performance and Power Implications"
(arXiv 2507.03114), measured GPT and Llama training on 4 x A100, H100, MI250 and MI210: compute overlapped with
communication runs on average 18.9 % slower than alone (at most 40 %). The SM share alone gives the same order:
DeepSeek-V3 (report Sec. 3.2.2) gives its overlapped all-to-all 20 of an H800's 132 SMs, and compute on the other
112 runs 132/112 - 1 = 17.9 % slower. The factor is a GPU-family property:
each GPU profile carries it as `comm_overlap_slowdown` with its source; a profile without one gets
`DEFAULT_SLOWDOWN` (the same paper's average), CPU devices 0 (their collectives never overlap, comm.py).

How it enters the step: of a collective of `comm` seconds scheduled beside a compute window of `window`
seconds, the part that cannot hide (`comm - window`, and at least the share `floor` that has nothing to overlap
with, such as the first bucket) is exposed; the overlapped rest slows the compute beside it by the factor:

    exposed = max(comm - window, floor * comm) + slowdown * (comm - max(comm - window, floor * comm))

Both parts grow with `comm`, so the step time stays monotone in every collective's cost (the search's
optimistic first pass, solver/bounds.py, relies on it).

Collectives that leave the host take far fewer SMs. NCCL "uses the minimal number of SMs to achieve the
performance of the platform. If you have a PCI system with a single NIC, which can achieve up to 12-24 GB/s it
should just launch 2 SMs. If you are on DGX with 8 NICs and a top speed of 190 GB/s, then it would use 16 SMs"
(S. Jeaugey, NCCL maintainer, NVIDIA/nccl#689, 2022-06), and "NCCL CTAs won't share an SM with compute kernels"
(same thread, 2023-08): two SMs per NIC port of up to 25 GB/s (`NCCL_SMS_PER_NIC`, `NCCL_NIC_BPS_PER_SM_PAIR`).
A data-parallel group with r ranks on each host drives min(r, NICs) ports, so compute beside it runs on the SMs
left: slowdown = s / (SMs - s) with s those NCCL SMs (DeepSeek-V3's form above), at most the GPU family's factor
(`data_group_slowdown`; GPU profiles with `sm_count`). Lee et al.'s average was measured inside one 4-GPU host,
where the collectives are NVLink's; a TP-8 layout's DP group (one rank per host, one NIC) takes 4 of an H100's 132
SMs (NDR, 50 GB/s: two pairs), 3.1 % instead of 18.9 %. HBM traffic at a NIC's rate is a few per cent of the
GPU's bandwidth and is not added (LESS SURE).
"""

from __future__ import annotations

import math

import numpy as np

from planner.layout.expert_groups import DATA_AXES

DEFAULT_SLOWDOWN = 0.189  # Lee et al. 2025 (arXiv 2507.03114), abstract: average compute slowdown under overlap
NCCL_SMS_PER_NIC = 2  # NVIDIA/nccl#689 (NCCL maintainer): 2 SMs for one 12-24 GB/s NIC, 16 for 8 NICs at 190 GB/s
NCCL_NIC_BPS_PER_SM_PAIR = 25e9  # the same two figures: one pair of SMs drives up to ~24 GB/s of NIC line rate


def slowdown(ctx) -> float:
    """The fraction by which compute slows while communication overlaps it on this cluster's GPUs."""
    if ctx.gpu_kind_is_cpu:
        return 0.0
    value = getattr(ctx.gpu, "comm_overlap_slowdown", None)
    return float(DEFAULT_SLOWDOWN if value is None else value)


def exposed_s(comm, window, floor, factor: float) -> np.ndarray:
    """Seconds a collective adds to the critical path beside a compute window (module docstring)."""
    comm = np.asarray(comm, dtype=float)
    alone = np.maximum(comm - window, comm * floor)
    return alone + factor * (comm - alone)


def data_group_slowdown(ctx, groups: dict[str, tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Per row, the slowdown of compute beside its data-parallel collectives (module docstring): the family's
    factor for a group inside one host (NVLink) or where the GPU's SM count or the hosts' NICs are unknown;
    beside a group that leaves the host, the share of SMs NCCL takes to drive the NIC ports its ranks on one host
    use, at most the family's factor. The group is every data axis (dp_replicate x dp_shard x cp), the widest
    that any of the row's DP collectives spans. `groups`: the rows' `dp_groups.axis_groups` (size, stride per axis)."""
    family = slowdown(ctx)
    rows = len(groups[DATA_AXES[0]][0])
    sms = getattr(ctx.gpu, "sm_count", None)
    nic_sms, nics = _nic_sms(ctx)
    if family == 0.0 or not sms or not nics or ctx.cluster.nvlink_domain is not None or ctx.cluster.num_nodes == 1:
        return np.full(rows, family)
    host = ctx.cluster.gpus_per_node
    on_host = np.ones(rows, dtype=np.int64)
    members = np.ones(rows, dtype=np.int64)
    for axis in DATA_AXES:
        size, stride = (np.asarray(x, dtype=np.int64) for x in groups[axis])
        on_host *= np.where(stride * size <= host, size, np.where(stride < host, np.maximum(host // stride, 1), 1))
        members *= size
    on_host = np.minimum(on_host, host)
    taken = nic_sms * np.minimum(on_host, nics)
    network = np.minimum(family, taken / np.maximum(sms - taken, 1))
    return np.where(members > on_host, network, family)


def _nic_sms(ctx) -> tuple[int, int]:
    """(NCCL SMs per NIC port, NIC ports per host), the most of any host group (0 ports: none known)."""
    per_port, ports = 0, 0
    for group in ctx.cluster.host_groups:
        node = group.node
        if not node.nics or node.nic_link is None:
            continue
        rate = float(ctx.cluster.links[node.nic_link].bandwidth_Bps)
        per_port = max(per_port, NCCL_SMS_PER_NIC * max(1, math.ceil(rate / NCCL_NIC_BPS_PER_SM_PAIR)))
        ports = max(ports, int(node.nics))
    return per_port, ports
