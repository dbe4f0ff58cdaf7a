"""The one rule set (planner.layout.rules): one predicate per rule serves the one-plan check and the search's
columns, violations are reported by name with their numbers and fix, frameworks select their rules, and the
workload defaults adapt to the model."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

import hardware_profiles
from planner.api import evaluate, search
from planner.cli.app import app
from planner.cli.main import _register_commands
from planner.errors import InfeasibleError, UserError
from planner.layout import COLUMNS, RECOMPUTE_NAMES, Layout, Workload, row_to_layout, rules
from planner.layout.rules import RULES, Facts
from planner.model import preset

_register_commands()


def _random_table(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {"dp": rng.integers(1, 9, n), "tp": rng.integers(1, 9, n), "pp": rng.integers(1, 9, n),
            "cp": rng.integers(1, 5, n), "ep": rng.integers(1, 9, n), "mb": rng.integers(1, 5, n),
            "m": rng.integers(1, 17, n), "sched": rng.integers(0, 4, n), "v": rng.integers(1, 4, n),
            "zero": rng.integers(0, 4, n), "dp_shard": rng.integers(1, 9, n), "rc": rng.integers(0, len(RECOMPUTE_NAMES), n),
            "sp": rng.integers(0, 2, n), "order": rng.integers(0, 120, n)}


def test_each_rule_gives_the_same_verdict_on_columns_and_on_one_row() -> None:
    rng = np.random.default_rng(11)
    table = _random_table(rng, 400)
    facts = Facts.of(preset("tiny-moe"), Workload(global_batch=96, seq_len=40, runtime="pytorch-compile",
                                                  overlap_pp_comm=False, grad_reduce_dtype="bf16",
                                                  master_weights="none", optimizer_state_dtype="bf16"), 32)
    # tiny-moe has no dense layers between its MoE layers; the same facts with that trait exercise the rules on it.
    mixed = dataclasses.replace(facts, traits=facts.traits | {"dense_layers_between_moe"})
    for r in RULES:
        cols = []
        for f in (facts, mixed):
            col = np.broadcast_to(np.asarray(r.holds(table, f), dtype=bool), (400,))
            one = [bool(np.all(r.holds({k: v[i:i + 1] for k, v in table.items()}, f))) for i in range(400)]
            assert col.tolist() == one, r.name
            cols.append(col)
        assert cols[0].sum() > 0 or not r.columns, r.name  # the cases exercise every rule both ways
        assert (~cols[0]).any() or (~cols[1]).any() or not r.columns, r.name


def test_check_names_every_broken_rule_with_its_numbers_and_fix() -> None:
    model = preset("llama3-8b")  # 32 heads, 8 KV heads, ffn 14336, 32 layers
    with pytest.raises(UserError) as exc:
        rules.check(Layout(tp=3, cp=3, pp=2, num_microbatches=2), model, Workload(global_batch=2, seq_len=4096), 64)
    text = str(exc.value)
    assert "tp=3: num_heads=32 is not divisible by tp [tp_divides_heads]" in text
    assert "tp=3: num_kv_heads=8 is not divisible by tp [tp_divides_kv_heads]" in text
    assert "cp=3: seq_len=4096 is not divisible by 2*cp=6 [cp_splits_sequence]" in text
    assert "fix: choose a tp that divides the heads" in text and "\n" not in text


def test_layout_runs_the_rules_that_need_no_model() -> None:
    with pytest.raises(ValidationError, match=r"dp_shard=3 must divide dp=4"):
        Layout(dp=4, zero=1, dp_shard=3)
    with pytest.raises(ValidationError, match=r"dp=2361183241434822606848 is larger than any layout can be"):
        Layout(dp=2**71)  # a plan file's number, not an overflow inside the rules' int64 columns
    with pytest.raises(ValidationError, match=r"layer_partition=4294967296 is larger"):
        Layout(pp=2, layer_partition=(1, 2**32))
    with pytest.raises(ValidationError, match=r"num_microbatches=2 < pp=4"):
        Layout(pp=4, num_microbatches=2)
    Layout(pp=4, num_microbatches=2, schedule="gpipe")  # GPipe needs no micro-batch per rank


def test_search_says_which_rule_removed_every_candidate() -> None:
    cluster = hardware_profiles.cluster("dgx-h100", nodes=1)
    with pytest.raises(InfeasibleError) as exc:
        search(preset("llama3-8b"), cluster, Workload(global_batch=8, seq_len=4096), tp=3)
    text = str(exc.value)
    assert "the pinned tp breaks a rule" in text and "tp=3: num_heads=32 is not divisible by tp" in text
    assert "[tp_divides_heads" in text and "--global-batch" not in text


def test_tp_must_divide_the_kv_heads_in_search_and_explain_alike() -> None:
    """llama3-70b has 8 KV heads: tp=16 (KV heads replicated) is never planned, on any framework."""
    cluster = hardware_profiles.cluster("dgx-h100", nodes=4)
    for framework in ("meshplan", None):
        plans = search(preset("llama3-70b"), cluster, Workload(global_batch=64, seq_len=4096), top=3, max_tp=32,
                       framework=framework)
        assert all(8 % p.layout.tp == 0 for p in plans)
    with pytest.raises(UserError, match=r"\[tp_divides_kv_heads\]"):
        evaluate(preset("llama3-70b"), cluster, Workload(global_batch=64, seq_len=4096), Layout(tp=16, dp=2))


def test_expert_parallel_groups_are_a_meshplan_rule_the_search_respects() -> None:
    """meshplan run builds EP groups as blocks of the data axes: the search never plans another, and a plan
    that is not one is refused by name; what-ifs without a framework's rules (framework="any") are not held to it."""
    model = preset("tiny-moe").model_copy(update={"moe": preset("tiny-moe").moe.model_copy(update={"num_experts": 6})})
    layout = Layout(dp=12, zero=3, dp_shard=4, ep=6, micro_batch=1)  # EP 6 over dp_shard 4: not a block
    workload = Workload(global_batch=12, seq_len=64)
    with pytest.raises(UserError, match=r"ep=6 is not a block of the data axes.*\[meshplan.ep-group\]"):
        rules.check(layout, model, workload, 12)
    rules.check(layout, model, workload, 12, framework="any")
    cluster = hardware_profiles.cluster("local-cpu", gpus=12)
    plans = search(model, cluster, workload, top=5, ep=6)
    assert plans and all(not rules.violations(p.layout, Facts.of(model, workload, 12)) for p in plans)
    with pytest.raises(UserError, match="unknown framework 'nosuch'"):
        search(model, cluster, workload, framework="nosuch")


def test_expert_mlp_width_is_checked_against_tp() -> None:
    spec = preset("tiny-moe").model_copy(update={"moe": preset("tiny-moe").moe.model_copy(
        update={"expert_ffn_hidden_size": 98})})
    with pytest.raises(UserError, match=r"tp=4: expert_ffn_hidden_size=98 is not divisible by tp"):
        rules.check(Layout(tp=4, dp=2), spec, Workload(global_batch=2, seq_len=64), 8)


def test_rows_round_trip_through_the_table_encoding() -> None:
    lay = Layout(dp=4, tp=2, pp=2, num_microbatches=4, schedule="interleaved", virtual_stages=2, zero=3, dp_shard=2,
                 recompute="selective", sequence_parallel=True,
                 mesh_axes=("dp_replicate", "dp_shard", "pp", "cp", "tp"))
    from planner.layout import layout_to_row

    row = {k: int(v[0]) for k, v in layout_to_row(lay).items()}
    assert tuple(row) == COLUMNS
    assert row_to_layout(row) == lay


@pytest.mark.parametrize(("model", "given", "seq_len", "batch"), [
    ("tiny", {}, 64, 512),  # 8192 capped at max_seq_len 64; 512 sequences of it
    ("llama3-70b", {}, 8192, 512),  # 4 Mi tokens
    ("llama3-70b", {"seq_len": 2048}, 2048, 2048),  # the same 4 Mi-token budget
    ("gpt3-175b", {}, 2048, 512),
    ("llama3-70b", {"seq_len": 3000}, 3000, 512 * 8192 // 3000),  # whole sequences of the budget
    ("tiny", {"global_batch": 8}, 64, 8),
])
def test_workload_defaults_adapt_to_the_model(model: str, given: dict, seq_len: int, batch: int) -> None:
    w = Workload.for_model(preset(model), **given)
    assert (w.seq_len, w.batch) == (seq_len, batch)
    assert w.seq_len <= preset(model).max_seq_len


def test_cli_plans_the_tiny_model_with_its_defaults() -> None:
    res = CliRunner().invoke(app, ["plan", "--model", "tiny", "--cluster", "local-cpu", "--gpus", "4", "--json", "-"],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert plan["inputs"]["workload"]["seq_len"] == 64 and plan["inputs"]["workload"]["global_batch"] == 512


def test_end_chunks_without_a_layer_only_outside_the_real_frameworks() -> None:
    """pp*v may reach num_layers + 2 (embedding-only and head-only end chunks, as padded Megatron forks run
    interleaving) for framework "any"; every framework meshplan plans for needs a decoder layer per chunk."""
    model = preset("tiny")  # 4 layers
    layout = Layout(dp=2, pp=2, virtual_stages=3, schedule="interleaved", micro_batch=32, num_microbatches=8)
    workload = Workload.for_model(model, dtype="fp32")
    rules.check(layout, model, workload, 4, framework="any")
    for framework in ("meshplan", "torchtitan", "megatron", "deepspeed"):
        with pytest.raises(UserError, match="chunks_hold_a_layer"):
            rules.check(layout, model, workload, 4, framework=framework)
    with pytest.raises(UserError, match="chunks_at_most_layers"):
        rules.check(layout.model_copy(update={"virtual_stages": 4, "num_microbatches": 8}), model, workload, 4,
                    framework="any")
