"""Framework profiles: the search returns only layouts a framework builds; each rule refuses exactly what its
release refuses (vectorised in the search, per plan at export); runtime costs follow the framework."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import hardware_profiles
import planner
from planner.api import evaluate, make_context, row_to_layout
from planner.cli.app import app
from planner.cli.main import _register_commands
from planner.cli.options import FrameworkChoice
from planner.errors import UserError
from planner.frameworks import NAMES, PROFILES, framework
from planner.layout import Layout, rules
from planner.layout.names import RECOMPUTE_NAMES
from planner.layout.rules import Facts
from planner.model import load_model
from planner.solver.exact import brute_force
from planner.solver.space import Pins, SearchLimits
from planner.workload import Workload

_register_commands()
LLAMA = load_model("llama3-8b")
MIXTRAL = load_model("mixtral-8x7b")
CLUSTER = hardware_profiles.cluster("dgx-h100", nodes=4)
WORKLOAD = Workload(global_batch=64, seq_len=4096)
DP_OUTER = ("dp_replicate", "dp_shard", "pp", "cp", "tp")


def test_the_cli_choices_are_the_profiles() -> None:
    assert tuple(c.value for c in FrameworkChoice) == NAMES == ("meshplan", "torchtitan", "megatron", "deepspeed")
    for name in NAMES:
        p = PROFILES[name]
        assert p.export_target and p.pip and set(p.allowed()["recompute"]) <= set(RECOMPUTE_NAMES)
    assert set(PROFILES) == {*NAMES, "any"} and not PROFILES["any"].rules  # "any": what-if studies, no rules


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("model", "pins"), [(LLAMA, {}), (LLAMA, {"pp": 4}), (MIXTRAL, {})])
def test_the_search_returns_only_layouts_the_framework_builds(name: str, model, pins: dict) -> None:
    plans = planner.search(model, CLUSTER, WORKLOAD, top=25, framework=name, **pins)
    assert plans
    profile = framework(name)
    for plan in plans:
        assert plan.framework == name
        assert profile.breaches(plan.layout, model, plan.inputs.workload) == [], plan.layout.describe()
        assert plan.inputs.workload.runtime == profile.runtime


@pytest.mark.parametrize("name", NAMES)
def test_the_vectorised_rules_agree_with_the_per_layout_check(name: str) -> None:
    """The same rule functions filter the search table and check one plan: on every row of a brute-force space
    without any framework's rules (dominated options included) the framework's mask keeps exactly the layouts
    with no breach."""
    ctx = make_context(MIXTRAL, hardware_profiles.cluster("dgx-h100", nodes=2), Workload(global_batch=16, seq_len=4096),
                       framework="any")
    table, _ = brute_force(ctx, Pins({}), SearchLimits(max_tp=4, max_cp=2, max_micro_batch=2))
    profile = framework(name)
    keep = rules.mask(table, Facts.of(ctx.model, ctx.workload), name)
    assert len(keep) > 100 and keep.any() and (name == "meshplan" or not keep.all())  # meshplan builds all of these
    rows = np.random.default_rng(0).choice(len(keep), size=min(len(keep), 300), replace=False)
    for i in rows:
        layout = row_to_layout({k: int(v[i]) for k, v in table.items()}, None)
        assert bool(keep[i]) == (not profile.breaches(layout, ctx.model, ctx.workload)), layout.describe()


@pytest.mark.parametrize(("name", "layout", "rule"), [
    ("torchtitan", Layout(dp=8, tp=2, num_microbatches=8), "torchtitan.ddp-1d"),
    ("torchtitan", Layout(dp=8, cp=2, tp=2, num_microbatches=8, zero=0, sequence_parallel=True), "torchtitan.cp-fsdp"),
    ("torchtitan", Layout(dp=8, tp=2, num_microbatches=8, zero=1, dp_shard=8, sequence_parallel=True), "torchtitan.zero"),
    ("torchtitan", Layout(dp=16, num_microbatches=4, zero=3, dp_shard=2, ep=4), "torchtitan.ep-group"),
    ("torchtitan", Layout(dp=8, tp=2, num_microbatches=8, zero=3, dp_shard=8, ep=8, sequence_parallel=True),
     "torchtitan.ep-tp"),
    ("torchtitan", Layout(dp=4, pp=4, num_microbatches=16, zero=3, dp_shard=4, mesh_axes=DP_OUTER),
     "torchtitan.mesh-order"),
    ("megatron", Layout(dp=4, pp=2, cp=2, num_microbatches=16, zero=1, dp_shard=4, mesh_axes=DP_OUTER),
     "megatron.dp-outer-order"),
    ("megatron", Layout(dp=8, pp=2, ep=2, num_microbatches=16, zero=1, dp_shard=8, mesh_axes=DP_OUTER),
     "megatron.dp-outer-order"),
    ("megatron", Layout(dp=16, ep=8, num_microbatches=4, zero=1, dp_shard=4), "megatron.hsdp-ep"),
    ("megatron", Layout(dp=4, pp=4, num_microbatches=16, schedule="zb-h1", zero=1, dp_shard=4), "megatron.schedule"),
    ("deepspeed", Layout(dp=8, cp=2, tp=2, num_microbatches=8, sequence_parallel=True), "deepspeed.cp"),
    ("deepspeed", Layout(dp=16, num_microbatches=4, zero=3, dp_shard=4), "deepspeed.hsdp"),
    ("deepspeed", Layout(dp=4, pp=4, num_microbatches=16, zero=2, dp_shard=4), "deepspeed.pp-zero"),
    ("meshplan", Layout(dp=2, cp=3, ep=2, num_microbatches=4), "meshplan.ep-group"),
])
def test_each_rule_refuses_what_its_release_refuses(name: str, layout: Layout, rule: str) -> None:
    """Each layout breaks the named rule (the failure the issue's review saw in the real tool)."""
    breaches = framework(name).breaches(layout, MIXTRAL, WORKLOAD)
    assert rule in [r.name for r, _ in breaches], [text for _, text in breaches]


def test_megatron_builds_dp_outer_when_cp_equals_ep() -> None:
    """initialize_model_parallel asserts edp == dp under the DP-outer order with pp > 1: dp*cp/ep == dp."""
    ok = Layout(dp=4, pp=2, cp=2, ep=2, num_microbatches=16, zero=1, dp_shard=4, mesh_axes=DP_OUTER)
    assert framework("megatron").breaches(ok, MIXTRAL, WORKLOAD) == []


def test_megatron_interleaves_two_stages_only_with_p2p_overlap() -> None:
    """arguments.py (core_v0.19.0, core_r0.8.0): interleaving with --no-overlap-p2p-communication asserts pp > 2;
    Megatron-LM before 2024-05 asserted pp > 2 whenever interleaving (it had no p2p overlap)."""
    two = Layout(dp=8, pp=2, num_microbatches=8, schedule="interleaved", virtual_stages=2, zero=1, dp_shard=8)
    blocking = Workload(global_batch=64, seq_len=4096, overlap_pp_comm=False)
    megatron = framework("megatron")
    assert "megatron.interleaved-two-stages" in [r.name for r, _ in megatron.breaches(two, LLAMA, blocking)]
    assert megatron.breaches(two, LLAMA, WORKLOAD) == []  # --overlap-p2p-communication (the default) builds it
    four = two.model_copy(update={"pp": 4, "dp": 4, "dp_shard": 4, "num_microbatches": 16})
    assert megatron.breaches(four, LLAMA, blocking) == []
    assert framework("meshplan").breaches(two, LLAMA, blocking) == []  # Megatron's rule, not meshplan run's
    plans = planner.search(LLAMA, CLUSTER, blocking, top=20, framework="megatron", pp=2)
    assert plans and all(p.layout.schedule != "interleaved" for p in plans)
    overlapped = planner.search(LLAMA, CLUSTER, WORKLOAD, top=20, framework="megatron", pp=2, schedule="interleaved")
    assert overlapped and all(p.layout.schedule == "interleaved" for p in overlapped)


def test_a_pinned_value_the_framework_lacks_is_refused_with_its_reason() -> None:
    with pytest.raises(UserError, match="TorchTitan has no ZeRO-1"):
        planner.search(LLAMA, CLUSTER, WORKLOAD, framework="torchtitan", zero=1)
    with pytest.raises(UserError, match="no zero-bubble schedule"):
        planner.search(LLAMA, CLUSTER, WORKLOAD, framework="megatron", pp=4, schedule="zb-h1")
    with pytest.raises(UserError, match="megatron.dp-outer-order"):
        evaluate(MIXTRAL, CLUSTER, WORKLOAD, Layout(dp=8, pp=2, cp=2, num_microbatches=8, zero=1, dp_shard=8,
                                                    mesh_axes=DP_OUTER), framework="megatron", allow_oom=True)
    with pytest.raises(UserError, match="unknown framework 'nemo'"):
        planner.search(LLAMA, CLUSTER, WORKLOAD, framework="nemo")


def test_torchtitan_without_zero1_still_searches_sharded_pipelines() -> None:
    """ZeRO-2/3 under PP are dominated by ZeRO-1 in meshplan's space; TorchTitan has no ZeRO-1, so they are searched."""
    plans = planner.search(LLAMA, CLUSTER, WORKLOAD, top=10, framework="torchtitan", pp=4)
    assert {p.layout.zero for p in plans} & {2, 3}
    assert all(p.layout.zero != 1 for p in plans)


def test_model_and_workload_rules() -> None:
    with pytest.raises(UserError, match="GELU MLP.*TorchTitan"):
        planner.search(load_model("gpt3-175b"), hardware_profiles.cluster("dgx-h100", nodes=64),
                       Workload(global_batch=1536, seq_len=2048), framework="torchtitan")
    with pytest.raises(UserError, match="meshplan run trains bf16"):
        planner.search(LLAMA, CLUSTER, Workload(global_batch=64, seq_len=4096, dtype="fp16"))


def test_runtime_costs_follow_the_framework_unless_set() -> None:
    shape = dict(dp=8, tp=2, pp=2, micro_batch=1, schedule="1f1b", zero=1, dp_shard=8, sequence_parallel=True)
    meg = planner.search(LLAMA, CLUSTER, WORKLOAD, framework="megatron", **shape)[0]
    ds = planner.search(LLAMA, CLUSTER, WORKLOAD, framework="deepspeed", **shape)[0]
    assert (meg.inputs.workload.runtime, ds.inputs.workload.runtime) == ("megatron", "pytorch")
    # Megatron-Core overlaps the gradient reduce-scatter with the last backward under PP; PyTorch-style does not.
    assert meg.prediction.breakdown.dp_comm_s < ds.prediction.breakdown.dp_comm_s
    explicit = planner.search(LLAMA, CLUSTER, Workload(global_batch=64, seq_len=4096, runtime="pytorch"),
                              framework="megatron", **shape)[0]
    assert explicit.inputs.workload.runtime == "pytorch"  # an explicit what-if wins
    # ... and drops the framework's TP-communication overlap, which the eager runtime cannot run
    assert not explicit.inputs.workload.tp_comm_overlap
    work = meg.inputs.workload
    assert (work.tp_comm_overlap, work.overlap_pp_comm) == (True, True)  # Megatron-Core's overlaps
    titan = planner.search(LLAMA, CLUSTER, WORKLOAD, framework="torchtitan", **{**shape, "zero": 2})[0]
    assert titan.inputs.workload.runtime == "pytorch" and not titan.inputs.workload.tp_comm_overlap


def test_cli_plan_replan_and_explain_with_a_framework(tmp_path) -> None:
    env = {"COLUMNS": "200", "NO_COLOR": "1"}
    base = ["--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "2", "--global-batch", "64", "--seq-len", "4096"]
    out = tmp_path / "p.json"
    result = CliRunner().invoke(app, ["plan", *base, "--framework", "megatron", "--json", str(out)], env=env)
    assert result.exit_code == 0, result.stderr
    data = json.loads(out.read_text())
    assert data["framework"] == "megatron" and data["inputs"]["workload"]["runtime"] == "megatron"
    new = tmp_path / "t.json"
    result = CliRunner().invoke(app, ["replan", str(out), "--framework", "torchtitan", "--json", str(new)], env=env)
    assert result.exit_code == 0, result.stderr
    replanned = json.loads(new.read_text())
    assert replanned["framework"] == "torchtitan" and replanned["inputs"]["workload"]["runtime"] == "pytorch"
    bad = CliRunner().invoke(app, ["plan", *base, "--framework", "torchtitan", "--zero", "1"], env=env)
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1 and "no ZeRO-1" in bad.stderr
    ev = CliRunner().invoke(app, ["evaluate", *base, "--framework", "deepspeed", "--cp", "2", "--tp", "2",
                                  "--sequence-parallel"], env=env)
    assert ev.exit_code == 2 and "[deepspeed.cp]" in ev.stderr


@pytest.mark.parametrize("name", NAMES)
def test_a_profile_pins_the_search_like_a_published_runs_entry(name: str) -> None:
    """`search_entry()` has the published-runs FRAMEWORKS shape; searching with its pins finds the framework's best."""
    entry = framework(name).search_entry()
    workload = WORKLOAD.model_copy(update=entry["workload"])
    pinned = planner.search(LLAMA, CLUSTER, workload, top=1, **entry["features"])[0]
    native = planner.search(LLAMA, CLUSTER, WORKLOAD, top=1, framework=name)[0]
    assert pinned.prediction.step_time_s <= native.prediction.step_time_s + 1e-12  # the rules only remove layouts


def test_cli_tp_comm_overlap_needs_a_runtime_that_has_it() -> None:
    env = {"COLUMNS": "200", "NO_COLOR": "1"}
    base = ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "2", "--global-batch", "64",
            "--seq-len", "4096", "--json", "-"]
    bad = CliRunner().invoke(app, [*base, "--tp-comm-overlap"], env=env)  # meshplan run: eager PyTorch
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1 and "--tp-comm-overlap" in bad.stderr
    ok = CliRunner().invoke(app, [*base, "--framework", "torchtitan", "--runtime", "pytorch-compile",
                                  "--tp-comm-overlap"], env=env)
    assert ok.exit_code == 0, ok.stderr
    work = json.loads(ok.stdout)["inputs"]["workload"]
    assert (work["runtime"], work["tp_comm_overlap"]) == ("pytorch-compile", True)
    off = CliRunner().invoke(app, [*base, "--framework", "megatron", "--no-tp-comm-overlap"], env=env)
    assert off.exit_code == 0 and json.loads(off.stdout)["inputs"]["workload"]["tp_comm_overlap"] is False


def test_search_limits_beyond_any_cluster_are_a_user_error() -> None:
    """--max-tp 99999999999999999999 once overflowed the candidate range (found by the CLI fuzz test)."""
    result = CliRunner().invoke(app, ["plan", "--model", "tiny", "--max-tp", "99999999999999999999"],
                                env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 2 and "--max-tp" in result.stderr and result.stderr.count("\n") == 1
