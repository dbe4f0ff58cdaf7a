"""`meshplan profiles | topology | detect`: exit codes, stdout/stderr split, JSON documents."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest
import typer
import yaml
from typer.testing import CliRunner

import hardware_profiles as hp
from planner.cli.detect import detect_command
from planner.cli.profiles import profiles_command
from planner.cli.topology import topology_command

ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia_smi"


def _cli() -> typer.Typer:
    group = typer.Typer(add_completion=False)

    @group.callback()
    def _root() -> None:
        """meshplan (test group)."""

    group.command("profiles")(profiles_command)
    group.command("topology")(topology_command)
    group.command("detect")(detect_command)
    return group


def run(*args: str):  # noqa: ANN202
    return CliRunner().invoke(_cli(), list(args), env=ENV)


def test_profiles_tables_and_json(tmp_path):
    r = run("profiles")
    assert r.exit_code == 0, r.stderr
    for name in ("h100-sxm", "ib-ndr", "gb200-nvl72", "989.4"):
        assert name in r.stdout
    r = run("profiles", "--json", "-")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    assert doc["gpus"]["h100-sxm"]["peak_flops"]["bf16"] == 989.4e12
    assert set(hp.list_clusters()) == set(doc["clusters"])
    target = tmp_path / "p.json"
    assert run("profiles", "--json", str(target)).exit_code == 0
    again = run("profiles", "--json", str(target))
    assert again.exit_code == 2 and "file exists" in again.stderr


def test_topology_dgx_h100_four_nodes(tmp_path):
    r = run("topology", "dgx-h100", "--nodes", "4")
    assert r.exit_code == 0, r.stderr
    assert "32 GPUs" in r.stdout and "4 hosts" in r.stdout
    assert "tp8_all_reduce" in r.stdout and "nvlink4" in r.stdout and "ib-ndr NIC" in r.stdout
    gml, js = tmp_path / "g.graphml", tmp_path / "g.json"
    r = run("topology", "dgx-h100", "--nodes", "4", "--graphml", str(gml), "--json", str(js))
    assert r.exit_code == 0, r.stderr
    g = nx.read_graphml(gml)
    assert sum(1 for _, d in g.nodes(data=True) if d["kind"] == "gpu") == 32
    doc = json.loads(js.read_text())
    assert doc["summary"]["reference"]["dp_all_reduce_across_hosts"]["bus_bandwidth_Bps"] == pytest.approx(50e9 * hp.link("ib-ndr").protocol_efficiency)
    assert hp.Cluster.model_validate(doc["cluster"]).num_gpus == 32
    assert len(doc["graph"]["nodes"]) == g.number_of_nodes()


def test_topology_user_errors_are_one_line_exit_2():
    r = run("topology", "dgx-h1000")
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and "unknown cluster name 'dgx-h1000'" in r.stderr and "dgx-h100" in r.stderr
    assert r.stdout == ""
    r = run("topology", "dgx-h100", "--gpus", "20")
    assert r.exit_code == 2 and "gpus=20" in r.stderr
    r = run("topology", "dgx-h100", "--gpus", "4", "--nodes", "1")
    assert r.exit_code == 2 and "not both" in r.stderr


def test_detect_cpu_path_writes_a_loadable_profile(tmp_path, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    out = tmp_path / "me.yaml"
    r = run("detect", "--out", str(out), "--devices", "3")
    assert r.exit_code == 0, r.stderr
    assert "CPU processes" in r.stdout
    c = hp.cluster(str(out))
    assert c.num_gpus == 3 and c.host_gpu_names == ["cpu"]
    r = run("detect", "--out", str(out))
    assert r.exit_code == 2 and "file exists" in r.stderr
    assert run("detect", "--out", str(out), "--force").exit_code == 0


def test_detect_gpu_path_from_fixture(tmp_path):
    out, js = tmp_path / "dgx.yaml", tmp_path / "dgx.json"
    r = run("detect", "--topo-file", str(FIX / "dgx_h100_topo.txt"), "--gpu", "h100-sxm", "--nic-link", "ib-ndr",
            "--out", str(out), "--json", str(js), "--name", "mybox")
    assert r.exit_code == 0, r.stderr
    spec = yaml.safe_load(out.read_text())
    assert spec["name"] == "mybox" and spec["node_groups"][0]["node"]["scaleup_link"] == "nvlink4"
    c = hp.Cluster.model_validate_json(js.read_text())
    assert c.num_gpus == 8 and c.gpus["h100-sxm"].peak_flops["bf16"] == 989.4e12
    r = run("detect", "--topo-file", str(FIX / "dgx_h100_topo.txt"), "--gpu", "h1000")
    assert r.exit_code == 2 and "unknown gpu name 'h1000'" in r.stderr
    r = run("detect", "--topo-file", str(tmp_path / "missing.txt"), "--gpu", "h100-sxm")
    assert r.exit_code == 2 and "--topo-file" in r.stderr
