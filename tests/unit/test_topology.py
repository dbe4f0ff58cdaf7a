"""Collective estimates pinned to hand computations (the arithmetic is in each test's comment).

Link numbers used below (hardware_profiles/data/links): nvlink4 450e9 B/s per GPU per direction, nvlink5
900e9, ib-ndr 50e9 per NIC port, ib-hdr 25e9, pcie-gen4 31.5e9, each times its protocol efficiency (the
payload rate NCCL achieves: nvlink4 0.822, nvlink3/5 0.8, InfiniBand 0.96, PCIe 0.8); the comments write
line rates, the constants below are the usable rates. Per-step latencies (NCCL Ring/Simple): NVLink 3.4 us,
PCI 5.7 us, NET 14 us.
"""

from __future__ import annotations

import math

import pytest

import hardware_profiles as hp
from planner.topology import KINDS, CollectiveEstimate, Topology, build_topology


def _eff(name: str) -> float:
    return hp.link(name).protocol_efficiency


NV4, NV5, NDR, HDR, GEN4 = (450e9 * _eff("nvlink4"), 900e9 * _eff("nvlink5"), 50e9 * _eff("ib-ndr"),
                            25e9 * _eff("ib-hdr"), 31.5e9 * _eff("pcie-gen4"))
NV3 = 300e9 * _eff("nvlink3")
L_NV, L_PCI, L_NET = 3.4e-6, 5.7e-6, 14e-6


def topo(name: str, **kw) -> Topology:
    return Topology(hp.cluster(name, **kw))


def test_one_dgx_h100_all_reduce_is_nvlink4():
    # Ring over 8 GPUs of one node: each GPU sends to the next through the NVSwitch, one flow per
    # GPU uplink -> bus bw = 450e9 / 1. Latency 2(n-1) steps x 3.4 us = 14 x 3.4 us.
    t = topo("dgx-h100", nodes=1)
    est = t.collective("all_reduce", range(8))
    assert est.bus_bandwidth_Bps == pytest.approx(NV4)
    assert est.bottleneck == "nvlink4"
    assert est.latency_s == pytest.approx(14 * L_NV)
    # 1 GB all-reduce: 2*7/8 * 1e9 / 450e9 + 14 * 3.4e-6
    assert est.time_s(1e9) == pytest.approx(2 * 7 / 8 * 1e9 / NV4 + 14 * L_NV)


def test_two_dgx_h100_all_reduce_crosses_hosts():
    # 16 GPUs on 2 hosts: each host holds 8 GPUs near 8 distinct NICs -> C = min(8, 8) = 8 channels;
    # each inter-host hop puts 1/8 on each NIC -> NIC bus bw 8 * 50e9 * 0.96 = 384e9, just above the usable
    # NVLink 450e9 * 0.822 = 370e9, so NVLink is the bottleneck (it would be the NICs at line rates).
    # Ring hops: 14 NVLink (3.4 us) + 2 NET (14 us) -> mean hop (14*3.4 + 2*14)/16 us, 30 steps.
    t = topo("dgx-h100", nodes=2)
    est = t.collective("all_reduce", range(16))
    assert est.bus_bandwidth_Bps == pytest.approx(min(8 * NDR, NV4))
    assert est.bottleneck == ("ib-ndr NIC" if 8 * NDR < NV4 else "nvlink4")
    hop = (14 * L_NV + 2 * L_NET) / 16
    assert est.hop_latency_s == pytest.approx(hop)
    assert est.latency_s == pytest.approx(30 * hop)


def test_two_gpus_per_node_across_nodes():
    # Group {0,1,8,9}: 2 GPUs on each of 2 hosts, NICs 0 and 1 on each -> C = 2 channels, 1/2 load per
    # NIC -> 2 * 50e9 = 100e9; NVLink hop load 1 -> 450e9. All four such groups at once use disjoint
    # GPUs and NICs, so the answer is unchanged.
    t = topo("dgx-h100", nodes=2)
    groups = [[2 * i, 2 * i + 1, 8 + 2 * i, 9 + 2 * i] for i in range(4)]
    alone = t.collective("all_reduce", groups[0])
    together = t.collective("all_reduce", groups[0], concurrent=groups)
    assert alone.bus_bandwidth_Bps == pytest.approx(2 * NDR)
    assert together.bus_bandwidth_Bps == pytest.approx(2 * NDR)
    assert together.bottleneck == "ib-ndr NIC"
    # DGX A100: 2 HDR NICs -> 2 * 25e9 = 50e9
    a = topo("dgx-a100", nodes=2).collective("all_reduce", [0, 1, 8, 9])
    assert a.bus_bandwidth_Bps == pytest.approx(2 * HDR)
    assert a.bottleneck == "ib-hdr NIC"


def test_dp_across_nodes_one_gpu_per_node_each_rail_separate():
    # Mesh (2 nodes, 8 local) axis 0: 8 groups {i, 8+i}, each through its own rail NIC -> 50e9.
    t = topo("dgx-h100", nodes=2)
    est = t.axis_collective("all_reduce", (2, 8), 0)
    assert est.bus_bandwidth_Bps == pytest.approx(NDR)
    assert est.num_groups == 8
    assert est.latency_s == pytest.approx(2 * L_NET)  # 2(n-1) = 2 steps of NET latency


def test_pcie_box_without_nvlink():
    # 4x L40S on their own Gen4 x16 root ports: each ring hop leaves GPU a through its PCIe link (load 1)
    # -> bus bw = 31.5e9; PCI step latency 5.7 us, 6 steps for n = 4.
    t = topo("pcie-4xl40s")
    est = t.collective("all_reduce", range(4))
    assert est.bus_bandwidth_Bps == pytest.approx(GEN4)
    assert est.bottleneck.startswith("pcie-gen4")
    assert est.latency_s == pytest.approx(6 * L_PCI)


def test_oversubscribed_spine_with_concurrent_groups():
    # dgx-h100-oversub: 4 hosts per rail leaf, uplinks 2:1 -> each rail leaf has 4 * 50e9 / 2 = 100e9 up.
    # Mesh (2, 4, 8) axis 0: 32 groups {h, h+4} (host pairs across the two leaf groups) per rail.
    # Rail leaf (0, r) carries one upward flow per host pair (h -> h+4): 4 flows on 100e9 -> 25e9 = NIC/2.
    t = topo("dgx-h100-oversub", nodes=8)
    est = t.axis_collective("all_reduce", (2, 4, 8), 0)
    assert est.bus_bandwidth_Bps == pytest.approx(NDR / 2)
    assert est.bottleneck == "leaf uplink 2:1"
    assert est.num_groups == 32
    # one such group alone is NIC-bound (1 flow on a 100e9 uplink)
    alone = t.collective("all_reduce", [0, 32])
    assert alone.bus_bandwidth_Bps == pytest.approx(NDR)
    # the same group with all 32 groups concurrent sees the shared uplink
    groups = t.mesh_groups((2, 4, 8), 0)
    shared = t.collective("all_reduce", [0, 32], concurrent=groups)
    assert shared.bus_bandwidth_Bps == pytest.approx(NDR / 2)
    # hosts inside one leaf group never climb: mesh (4, 8) over hosts 0..3 -> NIC-bound
    assert t.axis_collective("all_reduce", (4, 8), 0).bus_bandwidth_Bps == pytest.approx(NDR)


def test_nvl72_domain_spans_trays():
    # GB200 NVL72: GPUs 0, 4, 8, 12 sit on 4 different trays (hosts) of one NVLink5 domain -> the ring
    # stays on NVLink (900e9), NCCL NVLink step latency.
    t = topo("gb200-nvl72")
    est = t.collective("all_reduce", [0, 4, 8, 12])
    assert est.bus_bandwidth_Bps == pytest.approx(NV5)
    assert est.bottleneck == "nvlink5"
    assert t.collective("all_gather", range(72)).bus_bandwidth_Bps == pytest.approx(NV5)
    # two racks: a ring across both leaves the domain through 4 NICs per tray... min over the two
    # domains of distinct NICs of the group -> group {0, 72}: 1 NIC each -> 50e9
    two = topo("gb200-nvl72", nodes=36)
    assert two.collective("all_reduce", [0, 72]).bus_bandwidth_Bps == pytest.approx(NDR)


def test_p2p_between_neighbouring_hosts():
    # GPU 7 (host 0) -> GPU 8 (host 1): NIC 7 -> leaf -> NIC 8, 50e9, one NET step of 14 us.
    t = topo("dgx-h100", nodes=2)
    est = t.collective("p2p", [7, 8])
    assert est.bus_bandwidth_Bps == pytest.approx(NDR)
    assert est.latency_s == pytest.approx(L_NET)
    assert est.time_s(100e6) == pytest.approx(100e6 / NDR + L_NET)
    # PP chain over 4 hosts (mesh (4, 8) axis 0): every stage boundary on its own rail -> 50e9
    t4 = topo("dgx-h100", nodes=4)
    assert t4.axis_collective("p2p", (4, 8), 0).bus_bandwidth_Bps == pytest.approx(NDR)


def test_all_to_all_two_dgx():
    # 16 GPUs, 2 hosts: each GPU sends 1/15 to each peer; 8 peers are remote -> own-NIC load 8/15
    # -> 50e9 * 15/8 = 93.75e9; NVLink carries 7/15 -> 450e9 * 15/7 (not the bottleneck).
    t = topo("dgx-h100", nodes=2)
    est = t.collective("all_to_all", range(16))
    assert est.bus_bandwidth_Bps == pytest.approx(NDR * 15 / 8)
    assert est.bottleneck == "ib-ndr NIC"
    one = t.collective("all_to_all", range(8))
    assert one.bus_bandwidth_Bps == pytest.approx(NV4)  # 7/7 on each NVLink uplink


@pytest.mark.parametrize("tp, ep, per_node", [(2, 4, 4), (4, 8, 2), (4, 4, 2), (2, 8, 4), (8, 8, 1)])
def test_strided_ep_all_to_all_is_bound_by_its_own_nic(tp, ep, per_node):
    # EP groups as Megatron-Core lays them (tp innermost, EP next: ranks base + j * tp), all groups at once on
    # 16 DGX H100 (the Liu et al. 2025 layouts). Within a node the group runs on NVLink; across nodes each GPU's
    # remote share (ep - per_node) / ep leaves through its own NIC (an all-to-all cannot aggregate NICs, NCCL
    # maintainers in NVIDIA/nccl-tests#267), so bus bandwidth = NIC * ((ep-1)/ep) / ((ep-per_node)/ep)
    # (NVIDIA/nccl-tests#130: N/(N-1) x the per-GPU network bandwidth for whole nodes).
    t = topo("dgx-h100", nodes=16)
    est = t.axis_collective("all_to_all", (128 // (ep * tp), ep, tp), 1)
    if per_node == ep:
        assert est.bus_bandwidth_Bps == pytest.approx(NV4)
    else:
        assert est.bottleneck == "ib-ndr NIC"
        assert est.bus_bandwidth_Bps == pytest.approx(NDR * (ep - 1) / (ep - per_node))


def test_heterogeneous_dp_is_bound_by_the_slower_nic():
    # hetero-a100-h100 with nodes=2: host 0 DGX A100 (HDR 25e9), host 1 DGX H100 (NDR 50e9).
    c = hp.cluster("hetero-a100-h100", nodes=2)
    assert c.host_gpu_names == ["a100-80gb", "h100-sxm"]
    t = Topology(c)
    assert t.gpu_profile(0).name == "a100-80gb" and t.gpu_profile(15).name == "h100-sxm"
    est = t.collective("all_reduce", [0, 8])
    assert est.bus_bandwidth_Bps == pytest.approx(HDR)
    assert est.bottleneck == "ib-hdr NIC"
    # TP inside each host: A100 NVLink3 300e9 is slower than H100 NVLink4 -> slowest group 300e9
    assert t.axis_collective("all_reduce", (2, 8), 1).bus_bandwidth_Bps == pytest.approx(NV3)


def test_time_formulas_and_trivial_group():
    est = CollectiveEstimate("all_gather", 4, 100e9, 3e-6, "x", 1e-6)
    assert est.time_s(4e9) == pytest.approx(3 / 4 * 4e9 / 100e9 + 3e-6)
    ar = CollectiveEstimate("all_reduce", 4, 100e9, 6e-6, "x", 1e-6)
    assert ar.time_s(4e9) == pytest.approx(2 * 3 / 4 * 4e9 / 100e9 + 6e-6)
    t = topo("dgx-h100", nodes=1)
    one = t.collective("all_reduce", [3])
    assert one.time_s(1e9) == 0.0 and math.isinf(one.bus_bandwidth_Bps)
    assert t.axis_collective("all_reduce", (8, 1), 1).time_s(1e9) == 0.0
    for kind in KINDS:
        assert t.collective(kind, [0, 1]).time_s(1e6) > 0


def test_mesh_groups_row_major():
    t = topo("dgx-h100", nodes=1)
    assert t.mesh_groups((2, 4), 0) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert t.mesh_groups((2, 4), 1) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert t.mesh_groups((2, 2), 0, ranks=[7, 6, 5, 4]) == [[7, 5], [6, 4]]
    assert t.mesh_groups((2, 2, 2), -1) == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_rank_helpers_and_errors():
    t = build_topology(hp.cluster("dgx-h100", nodes=2))
    assert (t.num_gpus, t.host_of(9), t.local_index(9)) == (16, 1, 1)
    with pytest.raises(IndexError):
        t.host_of(16)
    with pytest.raises(ValueError, match="unknown collective kind"):
        t.collective("broadcast", [0, 1])
    with pytest.raises(ValueError, match="needs 32 GPUs"):
        t.axis_collective("all_reduce", (4, 8), 0)
    with pytest.raises(ValueError, match="twice"):
        t.collective("all_reduce", [0, 0])


def test_axis_collective_is_cached():
    t = topo("dgx-h100", nodes=2)
    a = t.axis_collective("all_reduce", (2, 8), 0)
    assert t.axis_collective("all_reduce", (2, 8), 0) is a


def test_local_cpu_uses_measured_loopback():
    c = hp.cluster("local-cpu", gpus=4)
    t = Topology(c)
    est = t.collective("all_reduce", range(4))
    assert est.bus_bandwidth_Bps == pytest.approx(hp.link("loopback-gloo").bandwidth_Bps)
    assert est.bottleneck == "loopback-gloo"


def test_graph_matches_layout():
    t = topo("dgx-h100-oversub", nodes=8)
    g = t.graph
    assert sum(1 for _, d in g.nodes(data=True) if d["kind"] == "gpu") == 64
    lay = t.layout
    for _u, _v, d in g.edges(data=True):
        assert d["bandwidth_Bps"] == lay.cap[d["cls"]][d["idx"]]
    # leaf uplink capacity in the graph: 4 hosts * 50e9 / 2
    ups = [d for _, _, d in g.edges(data=True) if d["cls"] == "lvl0_up"]
    assert ups and all(d["bandwidth_Bps"] == pytest.approx(4 * NDR / 2) for d in ups)
    assert g.edges["gpu0", "nvswitch0"]["bandwidth_Bps"] == NV4
