"""`nvidia-smi topo -m` parsing and detection on recorded fixtures (NVIDIA's documented format)."""

from __future__ import annotations

from pathlib import Path

import pytest

import hardware_profiles as hp
from planner.errors import UserError
from planner.topology import Topology
from planner.topology.detect import (
    cpu_spec,
    detect_local,
    gpu_profile_name,
    nic_link_from_sysfs,
    parse_nvidia_smi_topo,
    spec_from_topo,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia_smi"


def read(name: str) -> str:
    return (FIX / name).read_text()


def test_parse_dgx_a100():
    t = parse_nvidia_smi_topo(read("dgx_a100_topo.txt"))
    assert t.gpus == [f"GPU{i}" for i in range(8)]
    assert t.nics == [f"NIC{i}" for i in range(10)]
    assert t.nvlinks("GPU0", "GPU7") == 12
    assert t.link("GPU0", "NIC1") == "PXB" and t.link("GPU0", "NIC9") == "SYS"
    assert t.nic_names["NIC9"] == "mlx5_9"
    assert t.cpu_affinity["GPU0"] == "48-63,176-191" and t.numa_affinity["GPU6"] == "5"


def test_parse_old_format_without_legend():
    t = parse_nvidia_smi_topo(read("pcie_4xl40s_topo.txt"))
    assert t.gpus == ["GPU0", "GPU1", "GPU2", "GPU3"] and t.nics == ["mlx5_0"]
    assert t.link("GPU0", "GPU1") == "PIX" and t.link("GPU2", "GPU3") == "PXB" and t.link("GPU1", "GPU2") == "NODE"
    assert t.nvlinks("GPU0", "GPU1") == 0
    assert t.numa_affinity["GPU3"] == "0"


def test_dgx_h100_spec_renumbers_nics_and_drops_storage_ports():
    t = parse_nvidia_smi_topo(read("dgx_h100_topo.txt"))
    spec = spec_from_topo(t, "h100-sxm", host="box")
    node = spec.node_groups[0].node
    assert (node.gpus, node.scaleup_link, node.pcie_link) == (8, "nvlink4", "pcie-gen5")
    # GPU i is PIX to one NIC each (NIC0, NIC3, NIC2, NIC1, NIC6, NIC9, NIC8, NIC7); NIC4/NIC5 serve no GPU
    assert node.nics == 8 and node.nic_of_gpu == list(range(8))
    assert "left out): NIC4, NIC5" in spec.sources["node_groups.0.node.nics"]
    assert node.nic_link == "ib-ndr" and "ASSUMED" in spec.sources["node_groups.0.node.nics"]


def test_dgx_a100_spec_shares_tied_nics():
    t = parse_nvidia_smi_topo(read("dgx_a100_topo.txt"))
    node = spec_from_topo(t, "a100-80gb", host="box").node_groups[0].node
    # GPU0 and GPU1 are both PXB to NIC0 and NIC1: they take one each -> 8 compute NICs, 1:1
    assert node.scaleup_link == "nvlink3" and node.nics == 8 and node.nic_of_gpu == list(range(8))
    assert node.nic_link == "ib-hdr"


def test_pcie_box_spec_and_its_topology(tmp_path):
    t = parse_nvidia_smi_topo(read("pcie_4xl40s_topo.txt"))
    spec = spec_from_topo(t, "l40s", host="box", nic_link="ethernet-100g")
    node = spec.node_groups[0].node
    assert node.scaleup_link is None and node.gpus_per_pcie_switch == 2 and node.nics == 1
    path = tmp_path / "box.yaml"
    from planner.cli.detect import spec_yaml

    path.write_text(spec_yaml(spec))
    topo = Topology(hp.cluster(str(path)))
    # GPUs 0,1 share switch 0; ring 0->1->2->3->0 crosses the switch uplinks once each way (hops 1->2 and
    # 3->0), the GPU links carry one flow each: all 31.5e9 x 0.8 protocol efficiency -> bus bw 25.2e9 (PCIe Gen4)
    gen4 = 31.5e9 * hp.link("pcie-gen4").protocol_efficiency
    assert topo.collective("all_reduce", range(4)).bus_bandwidth_Bps == pytest.approx(gen4)
    # two rings {0,2} and {1,3} at once: each crosses both uplinks in both directions -> 2 flows / 31.5e9
    est = topo.collective("all_reduce", [0, 2], concurrent=[[0, 2], [1, 3]])
    assert est.bus_bandwidth_Bps == pytest.approx(gen4 / 2)
    assert est.bottleneck == "pcie-gen4 switch uplink"


def test_nic_speed_from_sysfs(tmp_path):
    port = tmp_path / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    assert nic_link_from_sysfs("mlx5_0", tmp_path) == "ib-ndr"
    assert nic_link_from_sysfs("mlx5_9", tmp_path) is None
    t = parse_nvidia_smi_topo(read("pcie_4xl40s_topo.txt"))
    node = spec_from_topo(t, "l40s", host="box", sysfs=tmp_path).node_groups[0].node
    assert node.nic_link == "ib-ndr"


def test_gpu_names():
    assert gpu_profile_name("NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert gpu_profile_name("NVIDIA H100 PCIe") == "h100-pcie"
    assert gpu_profile_name("NVIDIA A100-SXM4-40GB") == "a100-40gb"
    assert gpu_profile_name("NVIDIA A100-SXM4-80GB") == "a100-80gb"
    assert gpu_profile_name("NVIDIA GB200") == "gb200"
    with pytest.raises(UserError, match="no built-in profile"):
        gpu_profile_name("NVIDIA GeForce GT 710")


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("nothing here\n", "no header line"),
        ("\tGPU0\tGPU1\nGPU0\t X\tNV4\n", "no row for GPU1"),
        ("\tGPU0\tGPU1\nGPU0\t X\tFOO\nGPU1\tNV4\t X\n", "unknown connection 'FOO'"),
        ("\tGPU0\tGPU1\nGPU0\t X\nGPU1\tNV4\t X\n", "has 1 cells"),
    ],
)
def test_parse_errors(text, pattern):
    with pytest.raises(UserError, match=pattern):
        parse_nvidia_smi_topo(text)


def test_detect_local_without_gpus_gives_cpu_processes(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    found = detect_local(devices=3)
    assert found.spec.node_groups[0].node.gpu == "cpu" and found.spec.node_groups[0].node.gpus == 3
    assert "CPU processes" in found.method
    assert cpu_spec().node_groups[0].node.gpus >= 2


def test_detect_local_from_text_needs_a_gpu_name():
    with pytest.raises(UserError, match="pass --gpu"):
        detect_local(topo_text=read("dgx_h100_topo.txt"))
    found = detect_local(topo_text=read("dgx_h100_topo.txt"), gpu="h100-sxm")
    assert found.spec.node_groups[0].node.nics == 8
