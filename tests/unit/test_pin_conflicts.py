"""A refused pin names the rule that failed, with its numbers; a pin is honoured or refused, never ignored.

- `--tp 3` on llama3-8b (32 heads) said "change --global-batch"; `--pp 1000` and `--micro-batch 1000` too.
  Now the line names the pinned knob and the rule of `planner.layout.rules` it breaks, in the request's
  numbers, and only the rules that read a pinned knob (not the unpinned candidates the search also tried).
- Pins that are each valid but not together (virtual stages with 1F1B or without a pipeline, sequence
  parallelism without TP) name the pair.
- `--virtual-stages 2` returned a plan with virtual_stages 1 (pp = 1 ignored the pin): it is honoured now.
"""

from __future__ import annotations

import pytest
from cli_inputs import check_refusal, invoke

import hardware_profiles as hp
from planner import search
from planner.errors import InfeasibleError
from planner.layout import Workload, rules
from planner.model import preset

A100 = ["plan", "--model", "llama3-8b", "--cluster", "dgx-a100", "--nodes", "2"]


@pytest.mark.parametrize(("pins", "needles"), [
    (["--tp", "3"], ("the pinned tp breaks a rule", "tp=3: num_heads=32 is not divisible by tp", "tp_divides_heads")),
    (["--pp", "1000"], ("the pinned pp breaks a rule", "pp=1000 exceeds num_layers=32", "pp_at_most_layers")),
    (["--micro-batch", "1000"], ("the pinned micro_batch", "dp*micro_batch=2*1000=2000 does not divide the global "
                                 "batch 512", "batch_matches")),
    (["--cp", "3"], ("the pinned cp", "seq_len=8192 is not divisible by 2*cp=6", "cp_splits_sequence")),
    (["--ep", "2"], ("the pinned ep", "a dense model: no experts to shard", "ep_divides_experts")),
    (["--tp", "16", "--pp", "4"], ("the pinned tp", "num_kv_heads=8 is not divisible by tp", "tp_divides_kv_heads")),
    (["--virtual-stages", "2", "--schedule", "1f1b"], ("the pinned schedule, virtual_stages break a rule",
                                                       "needs an interleaved schedule (got '1f1b')")),
    (["--virtual-stages", "2", "--pp", "1"], ("the pinned pp, virtual_stages", "virtual_stages=2 needs pp > 1")),
    (["--sequence-parallel", "--tp", "1"], ("the pinned sequence_parallel, tp", "needs tp > 1")),
])
def test_the_failed_rule_is_named(pins: list[str], needles: tuple[str, ...]) -> None:
    line = check_refusal(*invoke([*A100, *pins])[::2])
    for needle in needles:
        assert needle in line, f"{needle!r} missing from: {line}"
    assert "--global-batch" not in line, line  # not the cause in any of these


@pytest.mark.parametrize(("knob", "bad", "good"), [("tp", 3, 2), ("pp", 7, 2), ("cp", 3, 2), ("micro_batch", 3, 2)])
def test_the_named_rule_is_the_one_the_pin_breaks(knob: str, bad: int, good: int) -> None:
    """The rule the message names refuses the pinned value and accepts a value the search then plans with."""
    model, cluster = preset("tiny"), hp.cluster("local-cpu", gpus=4)
    workload = Workload(global_batch=8, seq_len=64, dtype="fp32")
    with pytest.raises(InfeasibleError) as info:
        search(model, cluster, workload, **{knob: bad})
    names = [r.name for r in rules.RULES if f"[{r.name}," in str(info.value)]
    assert names, str(info.value)
    assert search(model, cluster, workload, **{knob: good})[0].layout.model_dump()[knob] == good


def test_a_virtual_stages_pin_is_honoured() -> None:
    plan = search(preset("llama3-8b"), hp.cluster("dgx-a100", nodes=2), Workload(global_batch=512, seq_len=8192),
                  top=3, virtual_stages=2)
    assert all(p.layout.virtual_stages == 2 and p.layout.schedule == "interleaved" and p.layout.pp > 1 for p in plan)
    code, out, err = invoke([*A100, "--virtual-stages", "2", "--json", "-"])
    assert code == 0, err
    assert '"virtual_stages": 2' in out
