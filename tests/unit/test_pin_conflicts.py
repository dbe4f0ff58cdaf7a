"""A refused pin names the rule that failed, with its numbers; a pin is honoured or refused, never ignored.

- `--tp 3` on llama3-8b (32 heads) said "change --global-batch"; `--pp 1000` and `--micro-batch 1000` too.
  Now the line names the knob, the rule in the request's numbers and the values that work, and those
  values are exactly the ones a search accepts (checked by searching each).
- Pins that are each valid but not together (tp=16 x pp=4 on 16 GPUs, virtual stages with 1F1B) are named
  as a pair or by their product.
- `--virtual-stages 2` returned a plan with virtual_stages 1 (pp = 1 ignored the pin): it is honoured now.
"""

from __future__ import annotations

import pytest
from cli_inputs import check_refusal, invoke

import hardware_profiles as hp
from planner import search
from planner.errors import InfeasibleError
from planner.model import preset
from planner.workload import Workload

A100 = ["plan", "--model", "llama3-8b", "--cluster", "dgx-a100", "--nodes", "2"]


@pytest.mark.parametrize(("pins", "needles"), [
    (["--tp", "3"], ("--tp 3 is not possible", "32 heads", "FFN width 14336", "8 KV heads", "tp can be 1, 2, 4, 8, 16")),
    (["--pp", "1000"], ("--pp 1000 is not possible", "pp <= 32 layers and <= 16 GPUs", "pp can be 1..16")),
    (["--micro-batch", "1000"], ("--micro-batch 1000 is not possible", "global batch 512", "micro_batch can be 1, 2, 4")),
    (["--cp", "3"], ("--cp 3", "8192 tokens must divide by 2 x cp",)),
    (["--ep", "2"], ("--ep 2", "it has none: ep is 1")),
    (["--tp", "16", "--pp", "4"], ("tp=16 x pp=4 need 64 GPUs but the cluster has 16",)),
    (["--virtual-stages", "2", "--schedule", "1f1b"], ("--schedule 1f1b and --virtual-stages 2", "interleaved")),
    (["--virtual-stages", "2", "--pp", "1"], ("--pp 1 and --virtual-stages 2", "pp > 1")),
    (["--sequence-parallel", "--tp", "1"], ("--tp 1 and --sequence-parallel", "needs tp > 1")),
])
def test_the_failed_rule_is_named(pins: list[str], needles: tuple[str, ...]) -> None:
    line = check_refusal(*invoke([*A100, *pins])[::2])
    for needle in needles:
        assert needle in line, f"{needle!r} missing from: {line}"
    assert "--global-batch" not in line, line  # not the cause in any of these


@pytest.mark.parametrize("knob", ["tp", "pp", "cp", "micro_batch", "dp"])
def test_the_listed_values_are_the_ones_a_search_accepts(knob: str) -> None:
    model, cluster = preset("tiny"), hp.cluster("local-cpu", gpus=4)
    workload = Workload(global_batch=8, seq_len=64, dtype="fp32")
    with pytest.raises(InfeasibleError) as info:
        search(model, cluster, workload, **{knob: 7})
    listed = str(info.value).split(f"so {knob} can be ")[1].split(";")[0]
    values = {int(v) for part in listed.split(", ") for v in (
        range(int(part.split("..")[0]), int(part.split("..")[1]) + 1) if ".." in part else [part])}
    accepted = set()
    for value in range(1, 17):
        try:
            search(model, cluster, workload, **{knob: value})
            accepted.add(value)
        except InfeasibleError:
            pass
    assert values == accepted, (listed, accepted)


def test_a_virtual_stages_pin_is_honoured() -> None:
    plan = search(preset("llama3-8b"), hp.cluster("dgx-a100", nodes=2), Workload(global_batch=512, seq_len=8192),
                  top=3, virtual_stages=2)
    assert all(p.layout.virtual_stages == 2 and p.layout.schedule == "interleaved" and p.layout.pp > 1 for p in plan)
    code, out, err = invoke([*A100, "--virtual-stages", "2", "--json", "-"])
    assert code == 0, err
    assert '"virtual_stages": 2' in out
