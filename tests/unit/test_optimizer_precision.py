"""Optimizer-state precision (`Workload.master_weights`, `Workload.optimizer_state_dtype`): the Workload fields,
the bytes they hold and move (hand-counted from the stacks' code, cited in planner/cost/optimizer_state.py), the
frameworks' rules, the exports and the CLI flags."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

import hardware_profiles
from planner.api import evaluate, make_context, search
from planner.cli.app import app
from planner.cli.main import _register_commands
from planner.cost import optimizer_state
from planner.errors import UserError
from planner.export import export
from planner.export.checks.shell_text import read_array, strip_comments
from planner.layout import Layout, Workload
from planner.model import load_model
from planner.plan import Plan

_register_commands()
MODEL = load_model("llama3-8b")
CLUSTER = hardware_profiles.cluster("dgx-h100", nodes=2)
REMAINDERS = {"master_weights": "remainders"}
NO_MASTER = {"master_weights": "none", "optimizer_state_dtype": "bf16"}


def ctx(runtime: str = "megatron", **workload):
    return make_context(MODEL, CLUSTER, Workload(global_batch=64, seq_len=8192, runtime=runtime, **workload),
                        framework="any")


def test_workload_fields_default_to_fp32_and_refuse_what_no_stack_runs() -> None:
    w = Workload()
    assert (w.master_weights, w.optimizer_state_dtype, w.master_weights_fp32) == ("fp32", "fp32", True)
    assert not optimizer_state.lowered(w)
    assert Workload(master_weights_fp32=False).master_weights == "none"  # the older boolean, now meaningful
    assert Workload(master_weights="remainders").master_weights_fp32  # remainders restore exact fp32 values
    lowered = Workload(**NO_MASTER)
    assert Workload(**lowered.model_dump()) == lowered  # plan JSON round trip
    with pytest.raises(ValidationError, match="contradicts"):
        Workload(master_weights="none", master_weights_fp32=True)
    for dtype in ("fp16", "fp32", "fp8"):
        with pytest.raises(ValidationError, match="bf16 training only"):
            Workload(dtype=dtype, **REMAINDERS)


@pytest.mark.parametrize(("workload", "state", "step"), [
    # Megatron-Core distributed optimizer, bf16 buffer: 4 master + 8 moments + the 4 B fp32 gradient copy; fused
    # Adam 28 B + the 6 B master-to-model copy.
    ({"grad_reduce_dtype": "bf16"}, 16, 34.0),
    # Apex DFA store_param_remainders (DGXC Llama rows): 2 + 8 + the 2 B bf16 grads_shard = 12 (4 + 12/d in all);
    # step: read the 2 B gradient, read+write bf16 weight and remainder (8), moments (16).
    ({"grad_reduce_dtype": "bf16", **REMAINDERS}, 12, 26.0),
    ({**REMAINDERS}, 14, 28.0),  # fp32 reduction: the shard at 4 B
    # Apex DFA optim.dtype bf16 (Nemotron-4 340B): 0 + 4 + 2 = 6 (4 + 6/d); step 2 + 4 + 8.
    ({"grad_reduce_dtype": "bf16", **NO_MASTER}, 6, 14.0),
])
def test_megatron_state_and_step_bytes_per_parameter(workload, state, step) -> None:
    c = ctx(**workload)
    assert (c.weight_bytes, c.optimizer_bytes) == (2, state)
    assert optimizer_state.step_bytes_per_param(c) == step


def test_eager_runtime_keeps_its_foreach_count_less_the_saving() -> None:
    assert ctx("pytorch").optimizer_bytes == 12 and optimizer_state.step_bytes_per_param(ctx("pytorch")) == 84.0
    no_master = ctx("pytorch", **NO_MASTER)
    assert no_master.optimizer_bytes == 4  # no gradient copy: the optimizer reads the gradients
    assert optimizer_state.step_bytes_per_param(no_master) == 84.0 - (28 - (4 + 4 + 8))


def test_lower_state_shrinks_memory_and_the_optimizer_step() -> None:
    lay = Layout(dp=16, num_microbatches=4, zero=1, dp_shard=16)
    base, low = (evaluate(MODEL, CLUSTER, Workload(global_batch=64, seq_len=8192, grad_reduce_dtype="bf16", **extra),
                          lay, allow_oom=True, framework="megatron") for extra in ({}, REMAINDERS))
    b, lo = base.prediction.memory_per_stage[0], low.prediction.memory_per_stage[0]
    assert lo.optimizer_bytes == pytest.approx(b.optimizer_bytes * 12 / 16, rel=1e-12)
    assert (lo.weights_bytes, lo.gradients_bytes) == (b.weights_bytes, b.gradients_bytes)
    assert low.prediction.breakdown.optimizer_s < base.prediction.breakdown.optimizer_s


def test_frameworks_run_only_their_settings() -> None:
    lay = Layout(dp=16, num_microbatches=4, zero=1, dp_shard=16)

    def ev(fw: str, layout: Layout = lay, **extra) -> Plan:
        return evaluate(MODEL, CLUSTER, Workload(global_batch=64, seq_len=8192, **extra), layout, allow_oom=True,
                        framework=fw)

    for fw, extra, rule in (("megatron", NO_MASTER, "megatron.master-weights-none"),
                            ("megatron", {"optimizer_state_dtype": "bf16"}, "megatron.precision-aware-remainders"),
                            ("deepspeed", REMAINDERS, "deepspeed.optimizer-precision"),
                            ("meshplan", REMAINDERS, "meshplan.optimizer-precision"),
                            ("torchtitan", {"optimizer_state_dtype": "bf16"}, "torchtitan.optimizer-precision")):
        with pytest.raises(UserError, match=rule.replace(".", r"\.")):
            ev(fw, **extra)
    with pytest.raises(UserError, match=r"megatron\.precision-aware-zero"):
        ev("megatron", Layout(dp=16, num_microbatches=4, zero=0), **REMAINDERS)
    with pytest.raises(UserError, match=r"deepspeed\.optimizer-precision"):
        ev("deepspeed", Layout(dp=16, num_microbatches=4, zero=0), **NO_MASTER)
    ev("any", **NO_MASTER)  # the cost model's whole space
    # The search for Megatron with remainders lists distributed-optimizer layouts only.
    plans = search(MODEL, CLUSTER, Workload(global_batch=64, seq_len=8192, **REMAINDERS), framework="megatron", top=5)
    assert plans and all(p.layout.zero >= 1 for p in plans)


def test_exports_write_the_setting() -> None:
    lay = Layout(dp=16, num_microbatches=4, zero=1, dp_shard=16)

    def tokens(**extra) -> list[str]:
        plan = evaluate(MODEL, CLUSTER, Workload(global_batch=64, seq_len=8192, **extra), lay, allow_oom=True,
                        framework="megatron")
        result = export(plan, "megatron")
        return read_array(result.text, "MEGATRON_ARGS") + [f"warning: {w}" for w in result.warnings]

    assert not any("precision-aware" in t or "exp-avg" in t for t in tokens())
    rem = tokens(**REMAINDERS)
    assert "--use-precision-aware-optimizer" in rem and "--exp-avg-dtype" not in rem
    assert any("Transformer Engine >= 2.1" in t for t in rem)
    bf16 = tokens(master_weights="remainders", optimizer_state_dtype="bf16")
    i, j = bf16.index("--exp-avg-dtype"), bf16.index("--exp-avg-sq-dtype")
    assert (bf16[i + 1], bf16[j + 1]) == ("bf16", "bf16")

    def ds(**extra) -> dict:
        plan = evaluate(MODEL, CLUSTER, Workload(global_batch=64, seq_len=8192, **extra), lay, allow_oom=True,
                        framework="deepspeed")
        return json.loads(strip_comments(export(plan, "deepspeed").text))["bf16"]

    assert ds() == {"enabled": True}
    assert ds(**NO_MASTER) == {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}


def test_cli_flags_reach_the_workload() -> None:
    def run(*args: str):  # noqa: ANN202
        return CliRunner().invoke(app, ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "2",
                                        "--global-batch", "64", "--framework", "megatron", *args],
                                  env={"COLUMNS": "200", "NO_COLOR": "1"})

    ok = run("--master-weights", "remainders", "--optimizer-state-dtype", "bf16", "--json", "-")
    assert ok.exit_code == 0, ok.stderr
    w = Plan.model_validate_json(ok.stdout).inputs.workload
    assert (w.master_weights, w.optimizer_state_dtype) == ("remainders", "bf16")
    refused = run("--master-weights", "none")
    assert refused.exit_code == 2 and "megatron.master-weights-none" in refused.stderr
    bad = run("--master-weights", "half")
    assert bad.exit_code == 2 and "--master-weights" in bad.stderr
