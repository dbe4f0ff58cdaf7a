"""Bad input through the real CLI entry point: exit 2, exactly one `error:` line naming the file or flag, the
field, the bad value and the fix; never a traceback.

Table-driven: each case writes its files into a temporary folder, runs `meshplan ARGS` in-process
(`planner.cli.main.main`) and checks the refusal contract plus the words the message must contain. The
cases cover every file a user gives (cluster, GPU and link YAML, model YAML, Hugging Face config.json, plan
JSON) and the workload options: missing and unknown fields, wrong types, zero and negative sizes and
bandwidths, empty, truncated, non-UTF-8 and binary files, YAML lists, GPU counts no layout can use, models
that fit nowhere, plans made for another cluster or world size or a newer meshplan.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_inputs import check_refusal, hf_data, invoke, preset_data, profile_data, tiny_plan_json, write

SMALL = ["--seq-len", "64", "--global-batch", "8"]
"""A workload the tiny model takes (its max_seq_len is 64)."""
BINARY = bytes(range(256)) * 4
NON_UTF8 = "name: caf\u00e9\n".encode("latin-1")
FIX = ("fix:", "allowed:")
"""A refusal states the fix (`fix: ...`), or for profile names what is allowed (`allowed: ...`)."""


@dataclass(frozen=True)
class Case:
    """`meshplan ARGS` with FILES (name -> content or builder) written first; the line must contain NEEDS."""

    id: str
    args: list[str]
    files: dict[str, Any] = field(default_factory=dict)
    needs: tuple[str, ...] = ()


def edited(data: dict[str, Any], edit: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    data = copy.deepcopy(data)
    edit(data)
    return data


def cluster(edit: Callable[[dict[str, Any]], Any] = lambda d: None) -> dict[str, Any]:
    """local-cpu.yaml, edited; its GPU and links are built-in names unless the edit points them at files."""
    return edited(profile_data("clusters", "local-cpu"), edit)


def dgx(edit: Callable[[dict[str, Any]], Any] = lambda d: None) -> dict[str, Any]:
    return edited(profile_data("clusters", "dgx-h100"), edit)


def node(d: dict[str, Any]) -> dict[str, Any]:
    return d["node_groups"][0]["node"]


def tiny(edit: Callable[[dict[str, Any]], Any] = lambda d: None) -> dict[str, Any]:
    return edited(preset_data("tiny"), edit)


def llama_hf(edit: Callable[[dict[str, Any]], Any] = lambda d: None) -> dict[str, Any]:
    return edited(hf_data("llama3-8b"), edit)


def plan(edit: Callable[[dict[str, Any]], Any] = lambda d: None) -> dict[str, Any]:
    return edited(json.loads(tiny_plan_json(4)), edit)


def set_path(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """An edit that sets a dotted path (list indices as numbers)."""

    def edit(d: dict[str, Any]) -> None:
        keys = [int(k) if k.isdigit() else k for k in path.split(".")]
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value

    return edit


def drop(path: str) -> Callable[[dict[str, Any]], None]:
    def edit(d: dict[str, Any]) -> None:
        keys = [int(k) if k.isdigit() else k for k in path.split(".")]
        for k in keys[:-1]:
            d = d[k]
        del d[keys[-1]]

    return edit


def _gpu_file(edit: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    return edited(profile_data("gpus", "cpu"), edit)


def _link_file(edit: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    return edited(profile_data("links", "loopback-gloo"), edit)


_TOPOLOGY = ["topology", "c.yaml"]
_PLAN_WITH_CLUSTER = ["plan", "--model", "tiny", "--cluster", "c.yaml", *SMALL]
_TRUNCATED_PLAN = tiny_plan_json(4)[: len(tiny_plan_json(4)) // 2]

CASES = [
    # Cluster YAML -------------------------------------------------------------------------------------
    Case("cluster missing field", _TOPOLOGY, {"c.yaml": cluster(drop("default_nodes"))},
         ("c.yaml", "default_nodes", "missing")),
    Case("cluster unknown field", _TOPOLOGY, {"c.yaml": cluster(set_path("nodez", 3))},
         ("c.yaml", "nodez", "= 3", "fields here:", "default_nodes")),
    Case("cluster wrong type", _TOPOLOGY, {"c.yaml": cluster(set_path("default_nodes", "two"))},
         ("c.yaml", "default_nodes", "'two'")),
    Case("cluster zero GPUs per host", _TOPOLOGY, {"c.yaml": cluster(lambda d: node(d).update(gpus=0))},
         ("c.yaml", "node_groups.0.node.gpus", "= 0", "greater than or equal to 1")),
    Case("cluster negative host count", _TOPOLOGY, {"c.yaml": cluster(set_path("node_groups.0.count", -2))},
         ("c.yaml", "node_groups.0.count", "-2")),
    Case("cluster unknown GPU name", _TOPOLOGY, {"c.yaml": cluster(lambda d: node(d).update(gpu="h900"))},
         ("c.yaml", "node_groups.0.node.gpu", "'h900'", "h100-sxm")),
    Case("cluster YAML list", _TOPOLOGY, {"c.yaml": "- name: x\n- name: y\n"}, ("c.yaml", "mapping")),
    Case("cluster empty file", _TOPOLOGY, {"c.yaml": ""}, ("c.yaml", "mapping")),
    Case("cluster non-UTF-8", _TOPOLOGY, {"c.yaml": NON_UTF8}, ("c.yaml", "not UTF-8")),
    Case("cluster truncated", _TOPOLOGY, {"c.yaml": "name: x\nnode_groups: [{count: 1, node: {name: a"},
         ("c.yaml", "cannot read YAML")),
    Case("cluster binary junk", _TOPOLOGY, {"c.yaml": BINARY}, ("c.yaml", "not UTF-8")),
    Case("cluster via plan --cluster", _PLAN_WITH_CLUSTER, {"c.yaml": cluster(lambda d: node(d).update(gpus=-1))},
         ("--cluster", "c.yaml", "node_groups.0.node.gpus", "-1")),
    Case("cluster huge host count", ["topology", "dgx-h100", "--nodes", "10000000000"], {},
         ("dgx-h100", "10000000000 hosts", "1048576")),
    # GPU and link YAML, referenced from a cluster file ----------------------------------------------------
    Case("GPU zero memory", _TOPOLOGY,
         {"c.yaml": cluster(lambda d: node(d).update(gpu="g.yaml")), "g.yaml": _gpu_file(set_path("memory_bytes", 0))},
         ("g.yaml", "memory_bytes", "= 0", "greater than 0")),
    Case("GPU negative bandwidth", _TOPOLOGY,
         {"c.yaml": cluster(lambda d: node(d).update(gpu="g.yaml")),
          "g.yaml": _gpu_file(set_path("memory_bandwidth_Bps", -3.0e12))},
         ("g.yaml", "memory_bandwidth_Bps", "-3000000000000.0")),
    Case("GPU missing peak", _TOPOLOGY,
         {"c.yaml": cluster(lambda d: node(d).update(gpu="g.yaml")), "g.yaml": _gpu_file(drop("peak_flops"))},
         ("g.yaml", "peak_flops", "missing")),
    Case("link zero bandwidth", _TOPOLOGY,
         {"c.yaml": cluster(lambda d: node(d).update(scaleup_link="l.yaml")),
          "l.yaml": _link_file(set_path("bandwidth_Bps", 0))},
         ("l.yaml", "bandwidth_Bps", "= 0")),
    Case("link negative latency", _TOPOLOGY,
         {"c.yaml": cluster(lambda d: node(d).update(scaleup_link="l.yaml")),
          "l.yaml": _link_file(set_path("latency_s", -1e-6))},
         ("l.yaml", "latency_s", "-1e-06")),
    Case("link unknown kind", _TOPOLOGY,
         {"c.yaml": cluster(lambda d: node(d).update(scaleup_link="l.yaml")), "l.yaml": _link_file(set_path("kind", "wifi"))},
         ("l.yaml", "kind", "'wifi'")),
    # GPU counts and models that no layout can use -------------------------------------------------------
    Case("GPUs that do not fill hosts", ["plan", "--model", "tiny", "--cluster", "dgx-h100", "--gpus", "9", *SMALL], {},
         ("--cluster dgx-h100", "gpus=9", "does not fill 2 hosts")),
    Case("more hosts than a one-host profile", ["plan", "--model", "tiny", "--cluster", "local-cpu", "--nodes", "2", *SMALL],
         {}, ("local-cpu", "nodes=2", "single-host")),
    Case("pinned tp no layout can use", ["plan", "--model", "tiny", "--cluster", "local-cpu", "--gpus", "3", "--tp", "3",
                                         *SMALL], {}, ("no valid layout", "tiny", "3 GPUs", "tp=3", "num_heads=8",
                                                       "fix:")),
    Case("tp that does not divide the GPUs", ["evaluate", "--model", "tiny", "--cluster", "local-cpu", "--gpus", "4",
                                              "--tp", "3", *SMALL], {}, ("tp*pp*cp=3", "4 GPUs", "--dp")),
    Case("model fits nowhere (states alone)", ["plan", "--model", "llama3-405b", "--cluster", "dgx-h100", "--nodes", "1"], {},
         ("llama3-405b fits nowhere on 8 x h100-sxm", "GiB per GPU", "at least", "GPUs")),
    Case("model fits nowhere (best layout)", ["plan", "--model", "llama3-8b", "--cluster", "pcie-4xl40s", "--nodes", "1",
                                              "--seq-len", "8192", "--global-batch", "4", "--micro-batch", "4",
                                              "--recompute", "none", "--tp", "4"], {},
         ("fits nowhere", "least-memory layout", "GiB over", "--recompute full (instead of the pinned none)",
          "--micro-batch 1 (instead of the pinned 4)", "more GPUs")),
    Case("layout does not fit", ["evaluate", "--model", "llama3-70b", "--cluster", "dgx-h100", "--nodes", "1", "--tp", "8"],
         {}, ("does not fit", "GiB over", "--recompute full")),
    # Model YAML -------------------------------------------------------------------------------------------
    Case("model missing field", ["model", "m.yaml"], {"m.yaml": tiny(drop("num_layers"))}, ("m.yaml", "num_layers", "missing")),
    Case("model unknown field", ["model", "m.yaml"], {"m.yaml": tiny(set_path("num_layer", 4))},
         ("m.yaml", "num_layer", "fields here:", "num_layers")),
    Case("model wrong type", ["model", "m.yaml"], {"m.yaml": tiny(set_path("hidden_size", "big"))},
         ("m.yaml", "hidden_size", "'big'")),
    Case("model negative heads", ["model", "m.yaml"], {"m.yaml": tiny(set_path("num_heads", -8))},
         ("m.yaml", "num_heads", "-8")),
    Case("model zero vocabulary", ["plan", "--model", "m.yaml", "--cluster", "local-cpu", *SMALL],
         {"m.yaml": tiny(set_path("vocab_size", 0))}, ("m.yaml", "vocab_size", "= 0")),
    Case("model absurd depth", ["model", "m.yaml"], {"m.yaml": tiny(set_path("num_layers", 10**12))},
         ("m.yaml", "num_layers", "1000000000000", "less than or equal")),
    Case("model name with a line break", ["model", "m.yaml"], {"m.yaml": tiny(set_path("name", "x\nrm -rf ~"))},
         ("m.yaml", "name", "control character")),
    Case("model YAML list", ["model", "m.yaml"], {"m.yaml": "- 1\n- 2\n"}, ("m.yaml", "mapping")),
    Case("model empty file", ["model", "m.yaml"], {"m.yaml": ""}, ("m.yaml", "mapping")),
    Case("model non-UTF-8", ["model", "m.yaml"], {"m.yaml": NON_UTF8}, ("m.yaml", "UTF-8")),
    Case("model truncated", ["model", "m.yaml"], {"m.yaml": "name: tiny\nnum_layers: [4, 8\n"}, ("m.yaml", "YAML")),
    Case("model binary junk", ["model", "m.yaml"], {"m.yaml": BINARY}, ("m.yaml",)),
    Case("model unknown name", ["model", "llama-9"], {}, ("llama-9", "tiny")),
    # Hugging Face config.json -----------------------------------------------------------------------------
    Case("HF missing key", ["model", "config.json"], {"config.json": llama_hf(drop("hidden_size"))},
         ("config.json", "hidden_size", "missing")),
    Case("HF unsupported model type", ["model", "config.json"], {"config.json": llama_hf(set_path("model_type", "bert"))},
         ("config.json", "model_type='bert'", "llama")),
    Case("HF wrong type", ["model", "config.json"], {"config.json": llama_hf(set_path("num_hidden_layers", [32]))},
         ("config.json", "num_hidden_layers", "[32]", "whole number")),
    Case("HF negative size", ["model", "config.json"], {"config.json": llama_hf(set_path("intermediate_size", -1))},
         ("config.json", "ffn_hidden_size", "-1")),
    Case("HF truncated", ["model", "config.json"], {"config.json": json.dumps(hf_data("llama3-8b"))[:100]},
         ("config.json", "JSON")),
    Case("HF list", ["model", "config.json"], {"config.json": "[1, 2]"}, ("config.json", "mapping")),
    Case("HF empty", ["model", "config.json"], {"config.json": ""}, ("config.json", "JSON")),
    # Plan JSON --------------------------------------------------------------------------------------------
    Case("plan missing field", ["explain", "p.json"], {"p.json": plan(drop("layout"))}, ("p.json", "layout", "missing")),
    Case("plan unknown field", ["export", "p.json", "--to", "torchrun"], {"p.json": plan(set_path("model_module", "os"))},
         ("p.json", "model_module", "'os'", "fields here:")),
    Case("plan wrong type", ["explain", "p.json"], {"p.json": plan(set_path("layout.tp", "x"))}, ("p.json", "layout.tp", "'x'")),
    Case("plan negative degree", ["export", "p.json", "--to", "slurm"], {"p.json": plan(set_path("layout.dp", -4))},
         ("p.json", "layout.dp", "-4")),
    Case("plan newer schema", ["explain", "p.json"], {"p.json": plan(set_path("schema_version", 99))},
         ("p.json", "schema_version 99", "upgrade meshplan")),
    Case("plan schema version 0", ["explain", "p.json"], {"p.json": plan(set_path("schema_version", 0))},
         ("p.json", "schema_version 0")),
    Case("plan truncated", ["explain", "p.json"], {"p.json": _TRUNCATED_PLAN}, ("p.json", "invalid JSON", "truncated")),
    Case("plan non-UTF-8", ["export", "p.json", "--to", "torchrun"], {"p.json": b'{"name": "caf\xe9"}'}, ("p.json", "UTF-8")),
    Case("plan empty", ["explain", "p.json"], {"p.json": ""}, ("p.json", "invalid JSON")),
    Case("plan list", ["explain", "p.json"], {"p.json": "[1, 2]"}, ("p.json", "top level is list", "mapping")),
    Case("plan binary junk", ["compare", "p.json"], {"p.json": BINARY}, ("p.json", "UTF-8")),
    Case("plan for another cluster", ["export", "p.json", "--to", "torchrun"],
         {"p.json": plan(set_path("inputs.cluster.host_groups.0.gpus_per_host", 2))},
         ("p.json", "layout", "needs 4 ranks", "has 2 GPUs", "another cluster", "replan")),
    Case("plan with an edited world size", ["explain", "p.json"],
         {"p.json": plan(set_path("inputs.cluster.host_groups.0.gpus_per_host", 8))},
         ("p.json", "prediction.idle_gpus", "edited after planning")),
    Case("plan with a broken embedded cluster", ["explain", "p.json"],
         {"p.json": plan(set_path("inputs.cluster.host_groups.0.hosts", 0))},
         ("p.json", "inputs.cluster.host_groups.0.hosts", "= 0")),
    Case("plan placement off the cluster", ["export", "p.json", "--to", "torchrun"],
         {"p.json": plan(set_path("placement.3.gpu", 7))}, ("p.json", "placement.3", "gpu=7", "1 hosts x 4 GPUs")),
    Case("plan batch disagrees with its workload", ["explain", "p.json"],
         {"p.json": plan(set_path("inputs.workload.global_batch", 16))}, ("p.json", "global batch 16")),
    Case("plan run with too few ranks", ["run", "p.json", "--nproc", "3", "--run-dir", "r"], {"p.json": plan()},
         ("p.json", "needs 4 ranks", "--nproc 3")),
    Case("plan missing file", ["explain", "nope.json"], {}, ("nope.json", "cannot read plan")),
    # Workload and layout options ------------------------------------------------------------------------
    Case("zero sequence length", ["plan", "--model", "tiny", "--seq-len", "0"], {}, ("--seq-len", "'0'", "--help")),
    Case("negative batch", ["evaluate", "--model", "tiny", "--global-batch", "-8"], {}, ("--global-batch", "'-8'")),
    Case("not a number", ["plan", "--model", "tiny", "--gpus", "four"], {}, ("--gpus", "'four'", "integer")),
    Case("tokens not a multiple of seq len", ["plan", "--model", "tiny", "--cluster", "local-cpu", "--seq-len", "64",
                                             "--global-batch-tokens", "100"], {},
         ("global_batch_tokens=100", "multiple of seq_len=64", "--global-batch-tokens as a multiple of --seq-len")),
    Case("sequence longer than the model", ["plan", "--model", "tiny", "--cluster", "local-cpu", "--seq-len", "128",
                                           "--global-batch", "8"], {}, ("seq_len=128", "max_seq_len=64", "--seq-len <= 64")),
    Case("nodes and gpus together", ["plan", "--model", "tiny", "--cluster", "local-cpu", "--nodes", "1", "--gpus", "2"], {},
         ("--nodes or --gpus",)),
    Case("bad mesh axes", ["plan", "--model", "tiny", "--mesh-axes", "pp,tp"], {}, ("--mesh-axes='pp,tp'", "dp_replicate")),
    Case("bad layout string", ["compare", "--model", "tiny", "--cluster", "local-cpu", "--gpus", "4", *SMALL,
                               "--layout", "tp=two"], {}, ("--layout", "tp='two'", "integer")),
    Case("unknown layout key", ["compare", "--model", "tiny", "--cluster", "local-cpu", "--gpus", "4", *SMALL,
                                "--layout", "tensor=2"], {}, ("--layout", "'tensor'", "fix:")),
    Case("zero stage out of range", ["evaluate", "--model", "tiny", "--zero", "4"], {}, ("--zero", "'4'")),
    Case("unknown schedule", ["evaluate", "--model", "tiny", "--schedule", "2f2b"], {}, ("--schedule", "'2f2b'")),
    Case("unknown cluster", ["plan", "--model", "tiny", "--cluster", "dgx-h1000"], {}, ("dgx-h1000", "dgx-h100")),
    Case("unknown option", ["plan", "--tensor-parallel", "8"], {}, ("--tensor-parallel", "meshplan plan --help")),
    Case("unknown command", ["plna"], {}, ("plna", "meshplan --help")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: Case) -> None:
    monkeypatch.chdir(tmp_path)
    for name, content in case.files.items():
        if isinstance(content, dict):
            content = yaml.safe_dump(content, sort_keys=False) if name.endswith(".yaml") else json.dumps(content)
        write(tmp_path / name, content)
    code, out, err = invoke(case.args)
    line = check_refusal(code, err)
    for needle in case.needs:
        assert needle in line, f"{needle!r} missing from: {line}"
    assert any(marker in line for marker in FIX), line
    assert out == "", out  # nothing on stdout for a refused command
