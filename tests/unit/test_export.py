"""Exports: the TorchTitan TOML, Megatron-LM arguments, DeepSpeed JSON and launch scripts name the plan's layout."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import hardware_profiles
from planner.api import evaluate, search
from planner.cli.app import app
from planner.cli.main import _register_commands
from planner.errors import UserError
from planner.export import TARGETS, export
from planner.layout import SCHEDULES, Layout, Workload
from planner.model import load_model
from planner.plan import Plan

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser as the tomli package (needs `pip install tomli`)
    import tomli as tomllib

_register_commands()
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
MODEL = load_model("llama3-8b")
CLUSTER = hardware_profiles.cluster("dgx-h100", nodes=2)
WORKLOAD = Workload(global_batch=64, seq_len=8192)


@pytest.fixture(scope="module")
def plans() -> dict[str, Plan]:
    """Layouts that exercise every mapping: interleaved + uneven chunks + DP-outer order, uneven 1F1B end stages,
    an even interleaved partition, HSDP with recompute, plain ZeRO-2, one host."""
    ev = lambda lay, w=WORKLOAD: evaluate(MODEL, CLUSTER, w, lay, allow_oom=True)  # noqa: E731
    return {
        "interleaved": search(MODEL, CLUSTER, WORKLOAD, tp=2, pp=2)[0],
        "uneven_1f1b": ev(Layout(dp=2, tp=2, pp=4, num_microbatches=32, zero=1, dp_shard=2, sequence_parallel=True)),
        "even_interleaved": ev(Layout(dp=2, tp=4, pp=2, num_microbatches=32, schedule="interleaved", virtual_stages=4,
                                      layer_partition=(4,) * 8, recompute="selective", sequence_parallel=True)),
        "hsdp": ev(Layout(dp=8, tp=2, num_microbatches=8, zero=3, dp_shard=4, recompute="full", sequence_parallel=True)),
        "zero2": search(MODEL, CLUSTER, WORKLOAD)[0],
        "one_host": search(MODEL, hardware_profiles.cluster("dgx-h100", nodes=1), WORKLOAD, recompute="full")[0],
        "zb": ev(Layout(dp=4, tp=1, pp=4, num_microbatches=16, schedule="zb-h1", zero=1, dp_shard=4)),
    }


ALL = ["interleaved", "uneven_1f1b", "even_interleaved", "hsdp", "zero2", "one_host", "zb"]


# TorchTitan ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
def test_torchtitan_toml_names_the_layout(plans: dict[str, Plan], name: str) -> None:
    plan = plans[name]
    lay = plan.layout
    cfg = tomllib.loads(export(plan, "torchtitan").text)
    par, train = cfg["parallelism"], cfg["training"]
    degrees = (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"], par["tensor_parallel_degree"],
               par["pipeline_parallel_degree"], par["context_parallel_degree"])
    assert degrees[0] * degrees[1] * degrees[2] * degrees[3] * degrees[4] == plan.world_size
    shard = lay.dp_shard if lay.zero else 1
    assert degrees == (lay.dp // shard, shard, lay.tp, lay.pp, lay.cp)
    assert par["expert_parallel_degree"] == lay.ep
    assert train["seq_len"] == plan.inputs.workload.seq_len
    assert train["global_batch_size"] == lay.global_batch
    assert cfg["activation_checkpoint"]["mode"] == lay.recompute
    if lay.pp > 1:
        assert par["pipeline_parallel_schedule"] == SCHEDULES[lay.schedule].torchtitan
        assert par["pipeline_parallel_microbatch_size"] == lay.micro_batch
        assert train["local_batch_size"] == lay.micro_batch * lay.num_microbatches  # split into pipeline micro-batches
        parts = par["module_fqns_per_model_part"]
        assert len(parts) == lay.pp * lay.virtual_stages
        layers = [[int(n.split(".")[1]) for n in part if n.startswith("layers.")] for part in parts]
        assert tuple(len(p) for p in layers) == lay.partition(MODEL.num_layers)
        assert sum(layers, []) == list(range(MODEL.num_layers))  # every layer once, in order
        assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
    else:
        assert "pipeline_parallel_schedule" not in par
        assert train["local_batch_size"] == lay.micro_batch  # TorchTitan accumulates global / (local * dp) steps
        assert train["global_batch_size"] // (train["local_batch_size"] * lay.dp) == lay.num_microbatches
    assert cfg["model"] == {"name": "llama3", "flavor": "8B"}


def test_torchtitan_warns_what_it_cannot_express(plans: dict[str, Plan]) -> None:
    warnings = export(plans["interleaved"], "torchtitan").warnings  # DP-outer mesh order, ZeRO-1
    assert any("cannot be expressed" in w for w in warnings)
    assert any("no ZeRO-1" in w for w in warnings)
    assert export(plans["hsdp"], "torchtitan").warnings == ()


# Megatron-LM ------------------------------------------------------------------------------------------------
def parse_args(text: str) -> dict[str, str | bool]:
    tokens = shlex.split(text.replace("\\\n", " "), comments=True)  # the shell drops backslash-newlines
    args: dict[str, str | bool] = {}
    for i, tok in enumerate(tokens):
        if tok.startswith("--"):
            nxt = tokens[i + 1] if i + 1 < len(tokens) else "--"
            args[tok] = True if nxt.startswith("--") else nxt
    return args


def megatron_partition(args: dict, num_layers: int, pp: int) -> tuple[int, ...]:
    """Layers per model chunk as Megatron-LM reads the arguments."""
    if pp == 1:
        return (num_layers,)
    if "--pipeline-model-parallel-layout" in args:
        chunks = str(args["--pipeline-model-parallel-layout"]).split("|")
        assert chunks[0].startswith("E") and chunks[-1].endswith("L")
        return tuple(sum(int(n) for n in re.findall(r"t\*(\d+)", c)) for c in chunks)
    first = args.get("--decoder-first-pipeline-num-layers")
    last = args.get("--decoder-last-pipeline-num-layers")
    if first or last:
        rest = num_layers - int(first or 0) - int(last or 0)
        middle = pp - (first is not None) - (last is not None)
        assert rest % middle == 0
        each = rest // middle
        return (int(first or each), *([each] * (pp - 2)), int(last or each))
    if "--num-layers-per-virtual-pipeline-stage" in args:
        n = int(args["--num-layers-per-virtual-pipeline-stage"])
        assert num_layers % (n * pp) == 0
        return (n,) * (num_layers // n)
    assert num_layers % pp == 0
    return (num_layers // pp,) * pp


@pytest.mark.parametrize("name", ALL)
def test_megatron_args_name_the_layout(plans: dict[str, Plan], name: str) -> None:
    plan = plans[name]
    lay = plan.layout
    args = parse_args(export(plan, "megatron").text)
    tp, pp, cp = (int(args[f"--{k}-parallel-size"]) for k in ("tensor-model", "pipeline-model", "context"))
    assert (tp, pp, cp, int(args["--expert-model-parallel-size"])) == (lay.tp, lay.pp, lay.cp, lay.ep)
    assert plan.world_size % (tp * pp * cp) == 0
    dp = plan.world_size // (tp * pp * cp)  # how Megatron derives DP
    assert dp * tp * pp * cp == plan.world_size and dp == lay.dp
    mb, gb = int(args["--micro-batch-size"]), int(args["--global-batch-size"])
    assert gb % (mb * dp) == 0 and gb // (mb * dp) == lay.num_microbatches
    assert megatron_partition(args, MODEL.num_layers, pp) == lay.partition(MODEL.num_layers)
    assert ("--sequence-parallel" in args) == lay.sequence_parallel
    assert ("--use-distributed-optimizer" in args) == (lay.zero >= 1)
    assert args.get("--recompute-granularity", "none") == lay.recompute
    assert args.get("--num-distributed-optimizer-instances", "1") == str(lay.dp_replicate if lay.zero else 1)
    assert ("--use-tp-pp-dp-mapping" in args) == (lay.mesh_axes == ("dp_replicate", "dp_shard", "pp", "cp", "tp"))
    m = MODEL
    assert (args["--num-layers"], args["--hidden-size"], args["--num-attention-heads"], args["--num-query-groups"],
            args["--ffn-hidden-size"], args["--seq-length"]) == tuple(
        str(v) for v in (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.ffn_hidden_size, 8192))


def test_megatron_uneven_partition_flags(plans: dict[str, Plan]) -> None:
    uneven = parse_args(export(plans["uneven_1f1b"], "megatron").text)
    assert plans["uneven_1f1b"].layout.partition(32) != (8, 8, 8, 8)
    assert "--pipeline-model-parallel-layout" in uneven or "--decoder-first-pipeline-num-layers" in uneven
    even = parse_args(export(plans["even_interleaved"], "megatron").text)
    assert even["--num-layers-per-virtual-pipeline-stage"] == "4"
    assert "--pipeline-model-parallel-layout" not in even
    zb = export(plans["zb"], "megatron")
    assert any("ZB-H1" in w for w in zb.warnings)


def test_megatron_moe_args() -> None:
    model = load_model("mixtral-8x7b")
    plan = evaluate(model, hardware_profiles.cluster("dgx-h100", nodes=4), Workload(global_batch=64, seq_len=4096),
                    Layout(dp=8, tp=4, ep=8, num_microbatches=8, zero=1, dp_shard=8, recompute="full",
                           sequence_parallel=True), allow_oom=True, framework=None)
    args = parse_args(export(plan, "megatron").text)
    assert args["--expert-model-parallel-size"] == "8"
    assert (args["--num-experts"], args["--moe-router-topk"]) == (str(model.moe.num_experts), str(model.moe.top_k))
    assert args["--moe-ffn-hidden-size"] == str(model.moe.expert_ffn_hidden_size)


# DeepSpeed ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
def test_deepspeed_batch_identity(plans: dict[str, Plan], name: str) -> None:
    plan = plans[name]
    lay = plan.layout
    cfg = json.loads(export(plan, "deepspeed").text)
    dp = plan.world_size // (lay.tp * lay.pp * lay.cp)
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * dp
    assert (cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]) == (
        lay.global_batch, lay.micro_batch, lay.num_microbatches)
    assert cfg["zero_optimization"]["stage"] == lay.zero
    assert cfg["bf16"] == {"enabled": True}
    assert ("activation_checkpointing" in cfg) == (lay.recompute != "none")
    if lay.hsdp:
        assert cfg["zero_optimization"]["mics_shard_size"] == lay.dp_shard


# Launch lines ---------------------------------------------------------------------------------------------------
def test_torchrun_one_host_and_many(plans: dict[str, Plan]) -> None:
    one = export(plans["one_host"], "torchrun", plan_path="my plan.json").text
    line = shlex.split(one.splitlines()[-1])
    assert line[:2] == ["torchrun", "--standalone"]
    assert int(line[line.index("--nnodes") + 1]) * int(line[line.index("--nproc-per-node") + 1]) == 8
    assert line[-3:] == ["-m", "executor", "my plan.json"]
    many = export(plans["zero2"], "torchrun", plan_path="plan.json", rdzv_host="node001", rdzv_port=1234).text
    line = shlex.split(many.splitlines()[-1])
    assert line[line.index("--nnodes") + 1] == "2" and line[line.index("--nproc-per-node") + 1] == "8"
    assert line[line.index("--rdzv-backend") + 1] == "c10d"
    assert line[line.index("--rdzv-endpoint") + 1] == "node001:1234"
    default = export(plans["zero2"], "torchrun").text
    assert '--rdzv-endpoint "${MASTER_ADDR:?' in default and ':29500"' in default


def test_slurm_script(plans: dict[str, Plan]) -> None:
    text = export(plans["zero2"], "slurm", plan_path="plan.json").text
    assert text.startswith("#!/bin/bash\n")
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8"):
        assert line in text.splitlines()
    srun = next(ln for ln in text.splitlines() if ln.startswith("srun "))
    tokens = shlex.split(srun.replace('"$head_node:29500"', "HEAD:29500"))
    assert tokens[:2] == ["srun", "torchrun"]
    assert tokens[tokens.index("--nnodes") + 1] == "2" and tokens[tokens.index("--nproc-per-node") + 1] == "8"
    assert tokens[tokens.index("--rdzv-endpoint") + 1] == "HEAD:29500"
    assert 'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in text


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("target", ["torchrun", "slurm"])
def test_launch_scripts_are_valid_bash(plans: dict[str, Plan], target: str) -> None:
    text = export(plans["zero2"], target).text
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def test_torchrun_needs_even_hosts() -> None:
    plan = evaluate(MODEL, CLUSTER, Workload(global_batch=48, seq_len=8192),
                    Layout(dp=12, num_microbatches=4, zero=3, dp_shard=12), allow_oom=True)
    assert plan.prediction.idle_gpus == 4
    with pytest.raises(UserError, match="same count on each"):
        export(plan, "torchrun")


# CLI ------------------------------------------------------------------------------------------------------------
def test_cli_export(tmp_path, plans: dict[str, Plan]) -> None:
    src = tmp_path / "plan.json"
    src.write_text(plans["interleaved"].model_dump_json())
    run = lambda *a: CliRunner().invoke(app, ["export", str(src), *a], env=ENV)  # noqa: E731
    for target in TARGETS:
        result = run("--to", target)
        assert result.exit_code == 0, result.stderr
        expected = export(plans["interleaved"], target, plan_path=str(src))
        assert result.stdout == expected.text
        assert result.stderr == "".join(f"warning: {w}\n" for w in expected.warnings)
    out = tmp_path / "t.toml"
    assert run("--to", "torchtitan", "--out", str(out)).exit_code == 0
    assert tomllib.loads(out.read_text())["parallelism"]["tensor_parallel_degree"] == 2
    again = run("--to", "torchtitan", "--out", str(out))
    assert again.exit_code == 2 and "file exists" in again.stderr
    assert run("--to", "torchtitan", "--out", str(out), "--force").exit_code == 0
    doc = run("--to", "deepspeed", "--json", "-")
    assert doc.exit_code == 0
    data = json.loads(doc.stdout)
    assert data["target"] == "deepspeed" and json.loads(data["text"])["train_batch_size"] == 64
    assert run("--to", "nope").exit_code == 2
    src.write_text("{}")
    bad = run("--to", "megatron")
    assert bad.exit_code == 2 and bad.stderr.startswith("error: ") and bad.stderr.count("\n") == 1
