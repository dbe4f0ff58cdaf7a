"""hardware_profiles: every built-in file loads, every number is sourced, sizes resolve, errors are one line."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import yaml

import hardware_profiles as hp
from hardware_profiles.schema import _numeric_paths

GPUS = ["a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h800", "h200", "b200", "gb200", "mi300x", "l40s", "cpu"]
LINKS = ["nvlink3", "nvlink4", "nvlink5", "pcie-gen4", "pcie-gen5", "ib-hdr", "ib-ndr", "ib-xdr", "roce-400g",
         "roce-200g", "ethernet-100g", "loopback-gloo"]
CLUSTERS = ["dgx-a100", "dgx-h100", "hgx-h200", "gb200-nvl72", "pcie-4xl40s", "selene", "hetero-a100-h100",
            "local-cpu", "dgx-h100-oversub", "mosaicml-a100-80gb", "mosaicml-a100-40gb", "ibm-a100-400g",
            "ibm-h100-800g", "hgx-h800"]


def test_required_names_exist():
    assert set(GPUS) <= set(hp.list_gpus())
    assert set(LINKS) <= set(hp.list_links())
    assert set(CLUSTERS) <= set(hp.list_clusters())


@pytest.mark.parametrize("name", GPUS)
def test_gpu_profiles_load_and_cite_every_number(name):
    g = hp.gpu(name)
    assert g.name == name
    assert g.peak_flops["bf16"] > 0 and g.peak_flops["fp32"] > 0
    for path in _numeric_paths(g):
        assert any(path == k or path.startswith(k + ".") for k in g.sources), path


def test_known_datasheet_numbers():
    assert hp.gpu("h100-sxm").peak_flops["bf16"] == 989.4e12
    assert hp.gpu("a100-80gb").peak_flops["bf16"] == 312e12
    assert hp.gpu("a100-80gb").memory_bytes == 81920 * 2**20
    assert hp.gpu("h100-sxm").nvlink_bandwidth_Bps == 450e9
    assert "fp8" not in hp.gpu("a100-40gb").peak_flops
    assert hp.link("ib-ndr").bandwidth_Bps == 50e9
    assert hp.link("ib-hdr").bandwidth_Bps == 25e9
    assert hp.gpu("cpu").sources["peak_flops"].startswith("measured by benchmarks/measure_cpu_profile.py")
    assert hp.link("loopback-gloo").sources["bandwidth_Bps"].startswith("measured by")


@pytest.mark.parametrize("name", LINKS)
def test_link_profiles(name):
    lk = hp.link(name)
    assert lk.name == name and lk.kind in hp.LINK_KINDS


@pytest.mark.parametrize("name", CLUSTERS)
def test_clusters_resolve_and_round_trip_json(name):
    c = hp.cluster(name)
    assert c.num_gpus == c.num_nodes * c.gpus_per_node
    back = hp.Cluster.model_validate_json(c.model_dump_json())
    assert back == c and back.fingerprint() == c.fingerprint()
    assert len(c.fingerprint()) == 64


@pytest.mark.parametrize(("name", "gpu", "memory_gib"), [("mosaicml-a100-80gb", "a100-80gb", 80),
                                                          ("mosaicml-a100-40gb", "a100-40gb", 40)])
def test_mosaicml_a100_nodes_carry_the_stated_1600_gbps_roce(name, gpu, memory_gib):
    """llm-foundry's benchmark tables: 'A100 80GB / 40GB with 1600 Gbps node-node interconnect (RoCE)', runs of
    8 to 128 GPUs: 8 GPUs per node on NVLink, 8 x 200 Gb/s RoCE NICs per node, 16 nodes."""
    c = hp.cluster(name, gpus=128)
    node = c.host_groups[0].node
    assert (c.num_nodes, c.gpus_per_node, node.gpu, node.scaleup_link) == (16, 8, gpu, "nvlink3")
    nic = c.links[node.nic_link]
    assert nic.kind == "roce" and node.nics * nic.bandwidth_Bps * 8 == pytest.approx(1600e9)
    assert c.gpus[gpu].memory_bytes == memory_gib * 1024**3
    assert hp.cluster(name, gpus=8).num_nodes == 1


def test_sizes():
    assert hp.cluster("dgx-h100", nodes=16).num_gpus == 128
    c = hp.cluster("dgx-h100", gpus=4)
    assert (c.num_nodes, c.gpus_per_node) == (1, 4)
    c = hp.cluster("dgx-h100", gpus=12)  # fewest hosts, evenly: 2 x 6
    assert (c.num_nodes, c.gpus_per_node) == (2, 6)
    assert hp.cluster("local-cpu", gpus=6).num_gpus == 6
    # cpu devices share host memory evenly
    assert hp.cluster("local-cpu", gpus=4).gpus["cpu"].memory_bytes == hp.gpu("cpu").memory_bytes // 4
    assert hp.cluster("dgx-h100", nodes=8192).num_gpus == 65536


def test_hetero_split_by_weight():
    # weights 1:1, largest remainder, ties to the first (A100) group
    assert hp.cluster("hetero-a100-h100", nodes=5).host_gpu_names == ["a100-80gb"] * 3 + ["h100-sxm"] * 2
    assert hp.cluster("hetero-a100-h100", nodes=1).host_gpu_names == ["a100-80gb"]
    assert hp.cluster("hetero-a100-h100").host_gpu_names == ["a100-80gb"] * 2 + ["h100-sxm"] * 2


def test_fingerprint_changes_with_content():
    assert hp.cluster("dgx-h100", nodes=2).fingerprint() != hp.cluster("dgx-h100", nodes=3).fingerprint()
    assert hp.cluster("dgx-h100", nodes=2).fingerprint() == hp.cluster("dgx-h100", nodes=2).fingerprint()


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda: hp.cluster("dgx-h1000"), r"unknown cluster name 'dgx-h1000'; allowed: dgx-a100, "),
        (lambda: hp.gpu("h1000"), r"unknown gpu name 'h1000'; allowed: a100-40gb"),
        (lambda: hp.link("nvlink9"), r"unknown link name"),
        (lambda: hp.cluster("dgx-h100", gpus=20), r"gpus=20 does not fill 3 hosts.*allowed: 1..8"),
        (lambda: hp.cluster("dgx-h100", gpus=4, nodes=1), r"not both"),
        (lambda: hp.cluster("local-cpu", nodes=2), r"single-host profile"),
        (lambda: hp.cluster("missing.yaml"), r"file 'missing.yaml' not found"),
    ],
)
def test_errors_are_one_line(call, pattern):
    with pytest.raises(hp.ProfileError, match=pattern) as info:
        call()
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def _write(tmp_path, name, data) -> str:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data) if isinstance(data, dict) else textwrap.dedent(data))
    return str(p)


def test_user_cluster_file_and_its_errors(tmp_path):
    spec = yaml.safe_load((hp.DATA_DIR / "clusters" / "dgx-h100.yaml").read_text())
    spec["name"] = "mine"
    c = hp.cluster(_write(tmp_path, "mine.yaml", spec), nodes=2)
    assert c.name == "mine" and c.num_gpus == 16 and c.origin.endswith("mine.yaml")
    bad = dict(spec, node_groups=[{**spec["node_groups"][0], "node": {**spec["node_groups"][0]["node"], "gpu": "h1000"}}])
    with pytest.raises(hp.ProfileError, match=r"mine2.yaml: field 'node_groups.0.node.gpu': unknown gpu name 'h1000'"):
        hp.cluster(_write(tmp_path, "mine2.yaml", bad))
    extra = dict(spec, colour="red")
    with pytest.raises(hp.ProfileError, match=r"field 'colour' = 'red': Extra inputs are not permitted"):
        hp.cluster(_write(tmp_path, "mine3.yaml", extra))


def test_unsourced_number_is_rejected(tmp_path):
    data = yaml.safe_load((hp.DATA_DIR / "gpus" / "h100-sxm.yaml").read_text())
    del data["sources"]["tdp_w"]
    with pytest.raises(hp.ProfileError, match="no source for tdp_w"):
        hp.gpu(_write(tmp_path, "g.yaml", data))
    data["sources"]["tdp_w"] = "x"
    data["sources"]["tdp_watts"] = "typo"
    with pytest.raises(hp.ProfileError, match="sources name no numeric field: tdp_watts"):
        hp.gpu(_write(tmp_path, "g2.yaml", data))
    data["sources"].pop("tdp_watts")
    data["peak_flops"]["int4"] = 1.0
    with pytest.raises(hp.ProfileError, match="unknown dtype 'int4'"):
        hp.gpu(_write(tmp_path, "g3.yaml", data))


def test_malformed_yaml(tmp_path):
    with pytest.raises(hp.ProfileError, match="cannot read YAML"):
        hp.gpu(_write(tmp_path, "bad.yaml", "name: [unclosed\n"))
    with pytest.raises(hp.ProfileError, match="mapping"):
        hp.gpu(_write(tmp_path, "list.yaml", "- 1\n- 2\n"))


def test_no_torch_and_no_planner_import():
    code = (
        "import sys, hardware_profiles as hp\n"
        "hp.cluster('dgx-h100', nodes=2)\n"
        "assert not any(m == 'planner' or m.startswith('planner.') for m in sys.modules), 'planner imported'\n"
        "import planner.topology, planner.topology.detect\n"
        "planner.topology.Topology(hp.cluster('dgx-h100', nodes=2)).collective('all_reduce', range(16))\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(("name", "gpus", "gpu", "gbps"), [("ibm-a100-400g", 128, "a100-80gb", 400),
                                                           ("ibm-h100-800g", 96, "h100-sxm", 800)])
def test_ibm_fsdp_blog_clusters_carry_the_stated_inter_node_bandwidth(name, gpus, gpu, gbps):
    """The PyTorch FSDP blog (IBM and Meta, 2024-03): 'an A100 cluster with 128 GPUs and 400Gbps inter-node
    interconnect, and an H100 cluster with 96 GPUs and 800Gbps inter-node interconnect', 8 GPUs per node."""
    c = hp.cluster(name, gpus=gpus)
    node = c.host_groups[0].node
    assert (c.num_nodes, c.gpus_per_node, node.gpu) == (gpus // 8, 8, gpu)
    assert node.nics * c.links[node.nic_link].bandwidth_Bps * 8 == pytest.approx(gbps * 1e9)
