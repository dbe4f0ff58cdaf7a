"""Exports: every target names the plan's layout in the form its current release reads, starts with a header
naming that release, and refuses (or re-plans) a plan its framework cannot build."""

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
from planner.export.checks.shell_text import read_array, read_exports, read_heredoc, strip_comments
from planner.frameworks import framework
from planner.layout import SCHEDULES, Layout, Workload
from planner.layout.names import RECOMPUTE_EVERY
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
DP_OUTER = ("dp_replicate", "dp_shard", "pp", "cp", "tp")


def ev(lay: Layout, fw: str, model=MODEL, w=WORKLOAD, cluster=CLUSTER) -> Plan:
    return evaluate(model, cluster, w, lay, allow_oom=True, framework=fw)


@pytest.fixture(scope="module")
def titan() -> dict[str, Plan]:
    """TorchTitan layouts: FSDP, HSDP + TP/SP + full AC, interleaved PP with an uneven partition, zero-bubble, CP,
    FSDP + TP/SP + per-op selective AC."""
    return {
        "fsdp": search(MODEL, CLUSTER, WORKLOAD, framework="torchtitan", pp=1)[0],
        "hsdp": ev(Layout(dp=8, tp=2, num_microbatches=8, zero=3, dp_shard=4, recompute="full", sequence_parallel=True),
                   "torchtitan"),
        "interleaved": search(MODEL, CLUSTER, WORKLOAD, framework="torchtitan", tp=2, pp=2, schedule="interleaved")[0],
        "zb": ev(Layout(dp=4, pp=4, num_microbatches=16, schedule="zb-h1", zero=3, dp_shard=4), "torchtitan"),
        "cp": ev(Layout(dp=4, tp=2, cp=2, num_microbatches=16, zero=3, dp_shard=4, sequence_parallel=True), "torchtitan"),
        "op": ev(Layout(dp=8, tp=2, num_microbatches=8, zero=3, dp_shard=8, recompute="op", sequence_parallel=True),
                 "torchtitan"),
    }


@pytest.fixture(scope="module")
def megatron() -> dict[str, Plan]:
    """Megatron layouts: interleaved + DP-outer order, uneven 1F1B ends, even interleaved + selective, HSDP-style
    optimizer instances, Megatron-FSDP."""
    return {
        "dp_outer": ev(Layout(dp=2, tp=2, pp=4, num_microbatches=32, schedule="interleaved", virtual_stages=2,
                              zero=1, dp_shard=2, sequence_parallel=True, mesh_axes=DP_OUTER), "megatron"),
        "uneven_1f1b": ev(Layout(dp=2, tp=2, pp=4, num_microbatches=32, zero=1, dp_shard=2, sequence_parallel=True,
                                 layer_partition=(7, 9, 9, 7)), "megatron"),
        "even_interleaved": ev(Layout(dp=2, tp=4, pp=2, num_microbatches=32, schedule="interleaved", virtual_stages=4,
                                      layer_partition=(4,) * 8, recompute="selective", sequence_parallel=True), "megatron"),
        "instances": ev(Layout(dp=8, tp=2, num_microbatches=8, zero=1, dp_shard=4, sequence_parallel=True), "megatron"),
        "fsdp": ev(Layout(dp=16, num_microbatches=4, zero=3, dp_shard=16), "megatron"),
        "every2": ev(Layout(dp=16, num_microbatches=4, zero=1, dp_shard=16, recompute="every-2"), "megatron"),
        # 8 even chunks of 4 layers: the block method recomputes the first 2 of each
        "every2_interleaved": ev(Layout(dp=2, tp=2, pp=4, num_microbatches=32, schedule="interleaved",
                                        virtual_stages=2, zero=1, dp_shard=2, sequence_parallel=True,
                                        recompute="every-2"), "megatron"),
    }


@pytest.fixture(scope="module")
def meshplan_plans() -> dict[str, Plan]:
    return {"two_hosts": search(MODEL, CLUSTER, WORKLOAD)[0],
            "one_host": search(MODEL, hardware_profiles.cluster("dgx-h100", nodes=1), WORKLOAD, recompute="full")[0]}


def test_every_export_starts_with_the_release_it_targets(titan, megatron, meshplan_plans) -> None:
    cases = [(titan["fsdp"], "torchtitan", "TorchTitan 0.3.0"), (megatron["fsdp"], "megatron", "Megatron-LM core_v0.19.0"),
             (megatron["fsdp"], "deepspeed", "DeepSpeed 0.19.8"), (meshplan_plans["two_hosts"], "torchrun", "meshplan run"),
             (meshplan_plans["two_hosts"], "slurm", "meshplan run")]
    for plan, target, release in cases:
        text = export(plan, target).text
        first = next(line for line in text.splitlines() if line.startswith("# "))
        assert first.startswith(f"# meshplan export for {release} ("), (target, first)
    toml = export(titan["fsdp"], "torchtitan", torchtitan_version="0.2").text
    assert toml.startswith("# meshplan export for TorchTitan 0.2.2 (pip install torchtitan==0.2.2)")


# TorchTitan 0.3 ---------------------------------------------------------------------------------------------------
def titan_args(text: str) -> dict[str, str | bool]:
    tokens = read_array(text, "TITAN_ARGS")
    out: dict[str, str | bool] = {}
    for i, tok in enumerate(tokens):
        if tok.startswith("--") or ":" in tok:
            nxt = tokens[i + 1] if i + 1 < len(tokens) else "--"
            out[tok] = True if nxt.startswith("--") or ":" in nxt else nxt
    return out


TITAN_AC = {"none": "none", "full": "full", "op": "selective"}
"""TorchTitan 0.3's activation-checkpoint subcommands (ActivationCheckpointingConfig: SelectiveAC is per-op)."""


@pytest.mark.parametrize("name", ["fsdp", "hsdp", "interleaved", "zb", "cp", "op"])
def test_torchtitan_command_line_names_the_layout(titan, name: str) -> None:
    plan = titan[name]
    lay = plan.layout
    text = export(plan, "torchtitan").text
    args = titan_args(text)
    shard = lay.dp_shard if lay.zero else 1
    degrees = tuple(int(args[f"--parallelism.{k}"]) for k in (
        "data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
        "pipeline_parallel_degree", "context_parallel_degree"))
    assert degrees == (lay.dp // shard, shard, lay.tp, lay.pp, lay.cp)
    assert int(args["--training.global_batch_size"]) == lay.global_batch
    assert int(args["--training.seq_len"]) == plan.inputs.workload.seq_len
    ac = f"activation-checkpoint:{TITAN_AC[lay.recompute]}"
    assert (ac in args) and not any(k.startswith("activation-checkpoint:") and k != ac for k in args)
    assert read_array(text, "TITAN_ARGS")[-1].startswith("activation-checkpoint:")  # tyro: the subcommand comes last
    if lay.zero == 3:
        assert args["--parallelism.fsdp_reshard_after_forward"] == ("always" if lay.pp == 1 else "default")
    entry = read_heredoc(text, "PY")
    if lay.pp > 1:
        assert args["--parallelism.pipeline_parallel_schedule"] == SCHEDULES[lay.schedule].torchtitan
        assert int(args["--training.local_batch_size"]) == lay.micro_batch * lay.num_microbatches
        assert int(args["--parallelism.pipeline_parallel_microbatch_size"]) == lay.micro_batch
        assert "--training.disable_cuda_graphs" in args
        # The exact partition goes into the config-registry entry (module_fqns_per_model_part).
        assert entry is not None and args["--module"] == "meshplan_titan"
        compile(entry, "meshplan_titan.py", "exec")
        parts = eval(re.search(r"module_fqns_per_model_part = (\[.*\])", entry).group(1))  # noqa: S307 (our own literal)
        layers = [[int(n.split(".")[1]) for n in part if n.startswith("layers.")] for part in parts]
        assert tuple(map(len, layers)) == lay.partition(MODEL.num_layers)
        assert sum(layers, []) == list(range(MODEL.num_layers))
        assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "lm_head"]
    else:
        assert entry is None and (args["--module"], args["--config"]) == ("llama3", "llama3_8b")
        assert int(args["--training.local_batch_size"]) == lay.micro_batch  # TorchTitan accumulates the rest
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def test_torchtitan_moe_and_custom_models_get_a_registry_entry() -> None:
    mixtral = load_model("mixtral-8x7b")
    plan = ev(Layout(dp=16, tp=1, ep=4, num_microbatches=4, zero=3, dp_shard=16), "torchtitan", model=mixtral,
              w=Workload(global_batch=64, seq_len=4096))
    result = export(plan, "torchtitan")
    entry = read_heredoc(result.text, "PY")
    compile(entry, "meshplan_titan.py", "exec")
    assert "num_experts=8, top_k=2" in entry and "theta=1000000.0" in entry
    args = titan_args(result.text)
    assert args["--parallelism.expert_parallel_degree"] == "4" and "--training.disable_cuda_graphs" in args
    # With TP the experts are not split: TorchTitan's EP borrows the TP ranks.
    tp_plan = ev(Layout(dp=8, tp=2, ep=4, num_microbatches=8, zero=3, dp_shard=8, sequence_parallel=True), "torchtitan",
                 model=mixtral, w=Workload(global_batch=64, seq_len=4096))
    assert titan_args(export(tp_plan, "torchtitan").text)["--parallelism.expert_parallel_degree"] == "8"
    assert any("ep x tp" in n for n in tp_plan.notes)
    # Llama 3 405B: the built-in config trains Float8; the entry builds the plain bf16 flavor.
    big = load_model("llama3-405b")
    p405 = ev(Layout(dp=4, tp=8, pp=4, num_microbatches=32, zero=3, dp_shard=4, sequence_parallel=True,
                     recompute="full"), "torchtitan", model=big, cluster=hardware_profiles.cluster("dgx-h100", nodes=16),
              w=Workload(global_batch=128, seq_len=8192))
    assert 'L.model_registry("405B")' in read_heredoc(export(p405, "torchtitan").text, "PY")


@pytest.mark.parametrize("name", ["fsdp", "hsdp", "interleaved", "zb", "cp", "op"])
def test_torchtitan_0_2_toml_names_the_layout(titan, name: str) -> None:
    plan = titan[name]
    lay = plan.layout
    cfg = tomllib.loads(export(plan, "torchtitan", torchtitan_version="0.2").text)
    par, train = cfg["parallelism"], cfg["training"]
    shard = lay.dp_shard if lay.zero else 1
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"], par["tensor_parallel_degree"],
            par["pipeline_parallel_degree"], par["context_parallel_degree"]) == (lay.dp // shard, shard, lay.tp, lay.pp, lay.cp)
    assert train["global_batch_size"] == lay.global_batch
    # 0.2.2 ActivationCheckpoint: per-op SAC is mode "selective" with selective_ac_option "op".
    assert cfg["activation_checkpoint"] == ({"mode": "selective", "selective_ac_option": "op"} if lay.recompute == "op"
                                            else {"mode": lay.recompute})
    if lay.pp > 1:
        parts = par["module_fqns_per_model_part"]
        assert tuple(sum(n.startswith("layers.") for n in p) for p in parts) == lay.partition(MODEL.num_layers)
    assert cfg["model"] == {"name": "llama3", "flavor": "8B"}


# Megatron-LM core_v0.19 --------------------------------------------------------------------------------------------
def megatron_args(text: str) -> dict[str, str | bool]:
    tokens = read_array(text, "MEGATRON_ARGS")
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
        each = rest // middle
        return (int(first or each), *([each] * (pp - 2)), int(last or each))
    if "--num-layers-per-virtual-pipeline-stage" in args:
        n = int(args["--num-layers-per-virtual-pipeline-stage"])
        return (n,) * (num_layers // n)
    return (num_layers // pp,) * pp


@pytest.mark.parametrize("name", ["dp_outer", "uneven_1f1b", "even_interleaved", "instances", "fsdp", "every2",
                                  "every2_interleaved"])
def test_megatron_args_name_the_layout(megatron, name: str) -> None:
    plan = megatron[name]
    lay = plan.layout
    text = export(plan, "megatron").text
    args = megatron_args(text)
    tp, pp, cp = (int(args[f"--{k}-parallel-size"]) for k in ("tensor-model", "pipeline-model", "context"))
    assert (tp, pp, cp, int(args["--expert-model-parallel-size"])) == (lay.tp, lay.pp, lay.cp, lay.ep)
    dp = plan.world_size // (tp * pp * cp)  # how Megatron derives DP
    assert dp == lay.dp
    mb, gb = int(args["--micro-batch-size"]), int(args["--global-batch-size"])
    assert gb // (mb * dp) == lay.num_microbatches
    assert megatron_partition(args, MODEL.num_layers, pp) == lay.partition(MODEL.num_layers)
    assert ("--sequence-parallel" in args) == lay.sequence_parallel
    assert ("--use-distributed-optimizer" in args) == (lay.zero >= 1)
    assert ("--use-megatron-fsdp" in args) == (lay.zero >= 2)
    if lay.recompute in RECOMPUTE_EVERY:  # whole layers: the first 1/k of each (even) model chunk's
        assert (args["--recompute-granularity"], args["--recompute-method"]) == ("full", "block")
        chunks = lay.partition(MODEL.num_layers)
        assert all(int(args["--recompute-num-layers"]) * RECOMPUTE_EVERY[lay.recompute] == n for n in chunks)
    else:
        assert args.get("--recompute-granularity", "none") == lay.recompute
    assert args.get("--num-distributed-optimizer-instances", "1") == str(lay.dp_replicate if lay.zero else 1)
    assert ("--use-tp-pp-dp-mapping" in args) == (lay.mesh_axes == DP_OUTER)
    # Costed with overlapped data-parallel traffic: the flags that make Megatron overlap it.
    assert "--overlap-grad-reduce" in args
    assert ("--overlap-param-gather" in args) == (lay.zero >= 1)
    assert read_exports(text).get("CUDA_DEVICE_MAX_CONNECTIONS") == ("1" if (tp > 1 or cp > 1) and lay.zero < 2 else None)
    m = MODEL
    assert (args["--num-layers"], args["--hidden-size"], args["--num-attention-heads"], args["--num-query-groups"],
            args["--ffn-hidden-size"], args["--seq-length"]) == tuple(
        str(v) for v in (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.ffn_hidden_size, 8192))
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


@pytest.mark.parametrize(("preset", "base"), [("llama3-8b", "500000"), ("llama3-405b", "500000"),
                                               ("mixtral-8x7b", "1000000")])
def test_megatron_states_the_rope_base_and_no_dropout(preset: str, base: str) -> None:
    """Megatron's defaults are --rotary-base 10000 and dropout 0.1; Llama 3 and Mixtral train with neither."""
    model = load_model(preset)
    plan = search(model, hardware_profiles.cluster("dgx-h100", nodes=16), Workload(global_batch=256, seq_len=4096),
                  framework="megatron")[0]
    args = megatron_args(export(plan, "megatron").text)
    assert args["--rotary-base"] == base
    assert (args["--attention-dropout"], args["--hidden-dropout"]) == ("0.0", "0.0")


def test_megatron_moe_args() -> None:
    model = load_model("mixtral-8x7b")
    plan = ev(Layout(dp=8, tp=4, ep=8, num_microbatches=8, zero=1, dp_shard=8, recompute="full", sequence_parallel=True),
              "megatron", model=model, cluster=hardware_profiles.cluster("dgx-h100", nodes=4),
              w=Workload(global_batch=64, seq_len=4096))
    args = megatron_args(export(plan, "megatron").text)
    assert args["--expert-model-parallel-size"] == "8"
    assert (args["--num-experts"], args["--moe-router-topk"]) == (str(model.moe.num_experts), str(model.moe.top_k))
    assert args["--moe-ffn-hidden-size"] == str(model.moe.expert_ffn_hidden_size)
    assert args["--moe-token-dispatcher-type"] == "alltoall"


def test_megatron_context_parallel_runs_ring_attention() -> None:
    plan = ev(Layout(dp=4, tp=2, cp=2, num_microbatches=16, zero=1, dp_shard=4, sequence_parallel=True), "megatron")
    args = megatron_args(export(plan, "megatron").text)
    assert args["--cp-comm-type"] == "p2p"  # ring attention, as the megatron runtime costs CP
    assert any("dp x cp" in n for n in plan.notes)  # the distributed optimizer's larger shard group, stated
    # The megatron profile costs TP-communication overlap (with SP) and overlapped stage-boundary sends: the script
    # asks for the first (--tp-comm-overlap) and leaves the second on (Megatron's default).
    assert plan.inputs.workload.tp_comm_overlap and plan.inputs.workload.overlap_pp_comm
    assert args["--tp-comm-overlap"] is True and "--no-overlap-p2p-communication" not in args


def test_megatron_script_follows_the_workloads_overlap_settings() -> None:
    lay = Layout(dp=2, tp=2, pp=4, virtual_stages=2, schedule="interleaved", num_microbatches=32, zero=1, dp_shard=2,
                 sequence_parallel=True)
    blocking = Workload(global_batch=64, seq_len=8192, tp_comm_overlap=False, overlap_pp_comm=False)
    args = megatron_args(export(ev(lay, "megatron", w=blocking), "megatron").text)
    assert "--tp-comm-overlap" not in args and args["--no-overlap-p2p-communication"] is True


def test_torchtitan_compiled_runtime_and_async_tp() -> None:
    lay = Layout(dp=8, tp=2, num_microbatches=8, zero=3, dp_shard=8, sequence_parallel=True)
    eager = titan_args(export(ev(lay, "torchtitan"), "torchtitan").text)
    assert "--compile.enable" not in eager  # TorchTitan's default runtime: eager (pytorch)
    compiled = Workload(global_batch=64, seq_len=8192, runtime="pytorch-compile", tp_comm_overlap=True)
    plan = ev(lay, "torchtitan", w=compiled)
    args = titan_args(export(plan, "torchtitan").text)
    assert args["--compile.enable"] is True and args["--compile.enable_async_tensor_parallel"] is True
    # a compiled zero-bubble pipeline is refused by PyTorch: TorchTitan's rule names it
    with pytest.raises(UserError, match=r"torchtitan\.zb-compile"):
        evaluate(MODEL, CLUSTER, compiled, Layout(dp=4, pp=4, num_microbatches=16, schedule="zb-h1", zero=3,
                                                  dp_shard=4), framework="torchtitan")
    plans = search(MODEL, CLUSTER, compiled, framework="torchtitan", pp=4, top=10)
    assert plans and all(p.layout.schedule != "zb-h1" for p in plans)


def test_bf16_gradient_reduction_per_framework() -> None:
    """Workload.grad_reduce_dtype bf16: Megatron --grad-reduce-in-bf16 (only with --bf16), DeepSpeed
    communication_data_type (always stated: unset, a bf16 run would reduce bf16 whatever was costed), TorchTitan
    refuses it (mixed_precision_reduce is Literal["float32"] in 0.3.0)."""
    bf16 = Workload(global_batch=64, seq_len=8192, grad_reduce_dtype="bf16")
    lay = Layout(dp=2, tp=2, pp=4, num_microbatches=32, zero=1, dp_shard=2, sequence_parallel=True)
    assert megatron_args(export(ev(lay, "megatron", w=bf16), "megatron").text)["--grad-reduce-in-bf16"] is True
    assert "--grad-reduce-in-bf16" not in megatron_args(export(ev(lay, "megatron"), "megatron").text)
    with pytest.raises(UserError, match=r"megatron\.grad-reduce-dtype"):
        ev(lay, "megatron", w=bf16.model_copy(update={"dtype": "fp32"}))
    fsdp = Layout(dp=16, num_microbatches=4, zero=3, dp_shard=16)
    for w, want in ((bf16, "bf16"), (WORKLOAD, "fp32")):
        cfg = json.loads(strip_comments(export(ev(fsdp, "deepspeed", w=w), "deepspeed").text))
        assert cfg["communication_data_type"] == want
    with pytest.raises(UserError, match=r"torchtitan\.grad-reduce-dtype"):
        ev(fsdp, "torchtitan", w=bf16)
    plans = search(MODEL, CLUSTER, bf16, framework="torchtitan", top=3)
    assert plans and all(p.layout.dp * p.layout.cp == 1 for p in plans)  # only layouts with nothing to reduce


# DeepSpeed 0.19.8 ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", [
    Layout(dp=16, num_microbatches=4, zero=2, dp_shard=16),
    Layout(dp=16, num_microbatches=4, zero=3, dp_shard=16, recompute="full"),
    Layout(dp=16, num_microbatches=4, zero=3, dp_shard=16, recompute="every-4"),
    Layout(dp=4, pp=4, num_microbatches=16, zero=1, dp_shard=4),
    Layout(dp=4, tp=2, pp=2, num_microbatches=16, zero=1, dp_shard=4, sequence_parallel=True),
])
def test_deepspeed_batch_counts_dp_as_deepspeed_does(layout: Layout) -> None:
    plan = ev(layout, "deepspeed")
    lay = plan.layout
    result = export(plan, "deepspeed")
    cfg = json.loads(strip_comments(result.text))
    dp = plan.world_size // (lay.tp * lay.pp)  # DeepSpeed's data-parallel size (an mpu's, with TP/PP)
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * dp
    assert cfg["train_batch_size"] == lay.global_batch
    assert cfg["zero_optimization"]["stage"] == lay.zero
    assert "mics" not in result.text  # removed in DeepSpeed 0.19.7
    whole_layers = lay.recompute == "full" or lay.recompute in RECOMPUTE_EVERY
    assert ("activation_checkpointing" in cfg) == whole_layers
    which = {"full": "wrap every transformer layer", "every-4": "wrap every 4th transformer layer (the 4th, 8th, ..."}
    assert [w for w in result.warnings if w.startswith("recompute=")] == (
        [w for w in result.warnings if which.get(lay.recompute, "-") in w] if whole_layers else [])
    assert any(w.startswith("recompute=") for w in result.warnings) == whole_layers
    assert any("need an mpu" in w for w in result.warnings) == (lay.tp > 1 or lay.pp > 1)


# Framework rules at export time ----------------------------------------------------------------------------------------
def test_a_plan_for_another_framework_is_refused_with_the_rule_or_replanned(megatron) -> None:
    plan = megatron["dp_outer"]  # ZeRO-1, DP-outer order: TorchTitan has neither
    with pytest.raises(UserError) as info:
        export(plan, "torchtitan")
    text = str(info.value)
    assert "TorchTitan 0.3.0 cannot run this plan (made for Megatron-LM core_v0.19.0)" in text
    assert "[torchtitan.zero]" in text and "[torchtitan.mesh-order]" in text and "--replan" in text
    result = export(plan, "torchtitan", replan=True)
    assert result.plan is not None and result.plan.framework == "torchtitan"
    assert framework("torchtitan").breaches(result.plan.layout, MODEL, result.plan.inputs.workload) == []
    assert any(w.startswith("re-planned for TorchTitan 0.3.0") for w in result.warnings)


@pytest.mark.parametrize("made_for, plan_name, target, policies", [
    ("titan", "op", "megatron", ("op",)), ("titan", "op", "deepspeed", ("op",)),
    ("megatron", "every2", "torchtitan", tuple(RECOMPUTE_EVERY)),
])
def test_a_recompute_policy_a_framework_lacks_never_reaches_its_export(request, made_for, plan_name, target,
                                                                        policies) -> None:
    """Per-op checkpointing never reaches Megatron or DeepSpeed, every-k never TorchTitan 0.3: refused
    with the framework's reason, or re-planned without it."""
    plan = request.getfixturevalue(made_for)[plan_name]
    with pytest.raises(UserError) as info:
        export(plan, target)
    assert f"[{target}.recompute]" in str(info.value)
    replanned = export(plan, target, replan=True).plan
    assert replanned is not None and replanned.layout.recompute not in policies


def test_expert_groups_meshplan_run_cannot_build_are_refused() -> None:
    """meshplan run builds EP groups as blocks of the data axes (planner.layout.expert_groups); Megatron builds this one."""
    mixtral = load_model("mixtral-8x7b")
    plan = ev(Layout(dp=2, cp=3, ep=2, num_microbatches=4), "megatron", model=mixtral,  # EP inside CP: 2 of 3
              cluster=hardware_profiles.cluster("dgx-h100", gpus=6), w=Workload(global_batch=8, seq_len=6144))
    for target in ("torchrun", "slurm"):
        with pytest.raises(UserError, match=r"ep=2 is not a block of the data axes .*\[meshplan.ep-group\]"):
            export(plan, target)
    ok = ev(Layout(dp=16, ep=4, num_microbatches=4, zero=1, dp_shard=16), "meshplan", model=mixtral,
            w=Workload(global_batch=64, seq_len=4096))
    assert "meshplan run" in export(ok, "torchrun").text  # EP plans meshplan run builds are exported


def test_a_compatible_plan_from_another_framework_warns_about_its_runtime(meshplan_plans) -> None:
    plan = meshplan_plans["two_hosts"]
    assert plan.framework == "meshplan"
    assert export(plan, "torchtitan").warnings == ()  # same runtime (pytorch)
    if not framework("megatron").breaches(plan.layout, MODEL, plan.inputs.workload):
        assert any("costed with its runtime (pytorch)" in w for w in export(plan, "megatron").warnings)


# Launch scripts: meshplan run ---------------------------------------------------------------------------------------------
def test_torchrun_starts_meshplan_run_with_checkpoints_and_restarts(meshplan_plans) -> None:
    one = export(meshplan_plans["one_host"], "torchrun", plan_path="my plan.json").text
    line = shlex.split(one.splitlines()[-1])
    assert line[:3] == ["meshplan", "run", "my plan.json"]
    for flag in ("--steps", "--checkpoint-dir", "--checkpoint-every", "--max-restarts"):
        assert flag in line
    assert "--nnodes" not in line
    many = export(meshplan_plans["two_hosts"], "torchrun", plan_path="plan.json", rdzv_host="node001", rdzv_port=1234,
                  steps=50, max_restarts=5, data="tokens.bin").text
    line = shlex.split(many.splitlines()[-1].replace('"${NODE_RANK:?set NODE_RANK}"', "RANK"))
    assert line[line.index("--nnodes") + 1] == "2" and line[line.index("--nproc") + 1] == "8"
    assert line[line.index("--rdzv-endpoint") + 1] == "node001:1234" and line[line.index("--node-rank") + 1] == "RANK"
    assert (line[line.index("--steps") + 1], line[line.index("--max-restarts") + 1]) == ("50", "5")
    assert line[line.index("--data") + 1] == "tokens.bin"
    assert '--rdzv-endpoint "${MASTER_ADDR:?' in export(meshplan_plans["two_hosts"], "torchrun").text


def test_slurm_script(meshplan_plans) -> None:
    text = export(meshplan_plans["two_hosts"], "slurm", plan_path="plan.json").text
    assert text.startswith("#!/bin/bash\n")
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8"):
        assert line in text.splitlines()
    srun = next(ln for ln in text.splitlines() if ln.startswith("srun "))
    inner = shlex.split(shlex.split(srun)[-1])
    assert inner[:3] == ["meshplan", "run", "plan.json"]
    assert inner[inner.index("--node-rank") + 1] == "$SLURM_NODEID"
    assert inner[inner.index("--rdzv-endpoint") + 1] == "$head_node:29500"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("target", ["torchrun", "slurm"])
def test_launch_scripts_are_valid_bash(meshplan_plans, target: str) -> None:
    subprocess.run(["bash", "-n"], input=export(meshplan_plans["two_hosts"], target).text, text=True, check=True)


def test_torchrun_needs_even_hosts() -> None:
    plan = evaluate(MODEL, CLUSTER, Workload(global_batch=48, seq_len=8192),
                    Layout(dp=12, num_microbatches=4, zero=3, dp_shard=12), allow_oom=True)
    assert plan.prediction.idle_gpus == 4
    with pytest.raises(UserError, match="same count on each"):
        export(plan, "torchrun")


# CLI ------------------------------------------------------------------------------------------------------------
def test_cli_export(tmp_path, megatron) -> None:
    src = tmp_path / "plan.json"
    plan = megatron["fsdp"]
    src.write_text(plan.model_dump_json())
    run = lambda *a: CliRunner().invoke(app, ["export", str(src), *a], env=ENV)  # noqa: E731
    for target in ("megatron", "deepspeed", "torchtitan"):
        result = run("--to", target)
        assert result.exit_code == 0, result.stderr
        expected = export(plan, target, plan_path=str(src))
        assert result.stdout == expected.text
        assert result.stderr == "".join(f"warning: {w}\n" for w in expected.warnings)
    src.write_text(megatron["instances"].model_dump_json())
    refused = run("--to", "torchtitan")  # ZeRO-1 and HSDP-style instances: not TorchTitan's
    assert refused.exit_code == 2 and refused.stderr.count("\n") == 1 and "[torchtitan.zero]" in refused.stderr
    replanned = run("--to", "torchtitan", "--replan", "--json", "-")
    assert replanned.exit_code == 0 and json.loads(replanned.stdout)["framework"] == "torchtitan"
    out = tmp_path / "m.sh"
    assert run("--to", "megatron", "--out", str(out)).exit_code == 0
    assert megatron_args(out.read_text())["--tensor-model-parallel-size"] == "2"
    src.write_text(plan.model_dump_json())
    again = run("--to", "megatron", "--out", str(out))
    assert again.exit_code == 2 and "file exists" in again.stderr
    doc = run("--to", "deepspeed", "--json", "-")
    data = json.loads(doc.stdout)
    assert data["target"] == "deepspeed" and json.loads(strip_comments(data["text"]))["train_batch_size"] == 64
    assert data["check"] is None
    assert run("--to", "nope").exit_code == 2
    src.write_text("{}")
    bad = run("--to", "megatron")
    assert bad.exit_code == 2 and bad.stderr.startswith("error: ") and bad.stderr.count("\n") == 1
    assert set(TARGETS) == {t.value for t in __import__("planner.cli.export", fromlist=["Target"]).Target}


def test_cli_check_says_when_the_framework_is_missing(tmp_path, megatron, monkeypatch) -> None:
    """Without the framework importable here (and no --python), --check exits 2 with the pip command."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed" else real(name, *a))
    src = tmp_path / "plan.json"
    src.write_text(megatron["fsdp"].model_dump_json())
    result = CliRunner().invoke(app, ["export", str(src), "--to", "deepspeed", "--check"], env=ENV)
    assert result.exit_code == 2
    assert "DS_BUILD_OPS=0 pip install deepspeed==0.19.8" in result.stderr.splitlines()[-1]
    assert result.stderr.splitlines()[-1].startswith("error: check failed: DeepSpeed 0.19.8 is not installed")
    no_python = CliRunner().invoke(app, ["export", str(src), "--to", "deepspeed", "--check", "--python",
                                         str(tmp_path / "nope")], env=ENV)
    assert no_python.exit_code == 2 and "--python" in no_python.stderr
