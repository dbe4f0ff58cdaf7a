"""How a ring collective's bus bandwidth falls as the ring crosses more nodes: the measured curve, one home.

NCCL runs reduce-scatter and all-gather (and large all-reduces) as rings. In theory a ring's bus bandwidth does
not depend on its length, but measured rings lose bandwidth with every doubling of the nodes they cross (more
switch tiers and ECMP paths, and the ring runs at the pace of its slowest hop, so a longer ring samples more
slow hops). The link profiles' `protocol_efficiency` is measured on a few nodes (ib-hdr: 3 nodes, nccl-tests
issue #119), so this curve is relative to its first point, 4 nodes, and leaves shorter rings as they are.

Source (a published measurement): NVIDIA/nccl issue #1229 ("question of Reduce-scatter", 2024-03-16), an H100
cluster, reduce-scatter bus bandwidth by node count: 4 nodes 360 GB/s, 8: 345, 16: 320, 32: 300, 64: 280,
128: 260 (the reporter attributes it to the ring algorithm NCCL uses for inter-node reduce-scatter). LESS SURE:
one cluster, message size not stated, H100 with NDR-class NICs; applied to every network ring, since the causes
named above are properties of a ring over a multi-tier fabric. Rings beyond 128 nodes keep the 128-node factor
(no measurement beyond it; not extrapolated).
"""

from __future__ import annotations

import math

import numpy as np

RING_NODES = (4, 8, 16, 32, 64, 128)
RING_REDUCE_SCATTER_BUSBW_GBPS = (360.0, 345.0, 320.0, 300.0, 280.0, 260.0)  # NVIDIA/nccl#1229, see above

_LOG_NODES = np.log2(RING_NODES)
_FACTOR = np.asarray(RING_REDUCE_SCATTER_BUSBW_GBPS) / RING_REDUCE_SCATTER_BUSBW_GBPS[0]


def nodes_spanned(group_size: int, stride: int, gpus_per_node: int) -> int:
    """Nodes a group of `group_size` ranks spaced `stride` apart crosses (ranks are numbered node by node)."""
    if group_size <= 1:
        return 1
    if stride >= gpus_per_node:
        return int(group_size)
    return max(1, math.ceil(group_size * stride / gpus_per_node))


def ring_bandwidth_factor(nodes: int) -> float:
    """Share of the few-node bus bandwidth a ring over `nodes` nodes achieves (1 up to 4 nodes; interpolated in
    log2(nodes) between the measured points; the last point beyond 128 nodes)."""
    return float(np.interp(math.log2(max(nodes, 1)), _LOG_NODES, _FACTOR))
