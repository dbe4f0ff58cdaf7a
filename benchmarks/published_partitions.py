"""How each source's framework splits decoder layers over pipeline stages (the published layout's partition).

The planner chooses the best layer partition itself (cost/partition.py: with the LM head and loss on the last
stage it gives that stage fewer layers). A published run used its framework's split, and when the head is a
sizeable share of a stage (large vocabularies, few layers per stage) that split is what sets the step time: Qi et
al.'s 1.5B model on 8 stages runs [2, 3, 3, 3, 3, 3, 3, 2]; the planner's own [3, ..., 3, 1] is predicted 18 %
faster. So the benchmark re-costs the published layout (and the framework's own pick) with the framework's rule:

  even            every model chunk gets num_layers / (pp x v) layers: Megatron-LM assigns
                  num_layers // pipeline_model_parallel_size layers per stage (and per virtual stage), and the
                  runs here set no uneven-stage option (Megatron-Core's --decoder-first/last-pipeline-num-layers
                  came later); DeepSpeed's pipeline engine with partition_method "type:transformer" likewise
  ends-one-fewer  the first and the last chunk get one layer fewer than the others: Qi et al. 2024 (zero bubble,
                  Sec. 5: "both the initial and final pipeline stages possess one fewer transformer layer") and
                  the Llama 3 paper (Sec. 3.3.2: "reduce one Transformer layer each from the first and the last
                  stages"); with one layer per chunk (Qi et al.'s interleaved runs: the fork pads num_layers by one
                  at each end, --allow-padding-num-layers) the first and last chunk hold only the embedding and the head
  (absent)        the framework takes any split (TorchTitan's split points, DeepSeek's DualPipe): the planner's.
When the layers do not divide as the rule needs, the planner's split stays (the rule could not have run them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from planner.layout import rules
from planner.layout.framework_rules import MEGATRON_INTERLEAVED_TWO_STAGES
from planner.layout.rule import Facts

PARTITION_RULES: dict[str, str] = {
    "megatron-lm-2021": "even", "megatron-lm-2022": "even", "megatron-core-0.8": "even", "megatron-lm-2023": "even",
    "megascale-2023": "even", "megatron-core-2025-moe": "even", "megatron-core-2025-moe-folding": "even",
    "megatron-deepspeed-2022": "even", "megatron-lm-2023-zb": "ends-one-fewer", "meta-llama3-2024": "ends-one-fewer",
}


def rule_partition(rule: str | None, num_layers: int, pp: int, v: int) -> tuple[int, ...] | None:
    """Layers per model chunk under `rule` (None: the rule does not apply or cannot split these layers)."""
    chunks = pp * v
    if rule is None or pp == 1:
        return None
    if rule == "even":
        return (num_layers // chunks,) * chunks if num_layers % chunks == 0 else None
    if rule == "ends-one-fewer":
        if (num_layers + 2) % chunks:
            return None
        per = (num_layers + 2) // chunks
        return (per - 1,) + (per,) * (chunks - 2) + (per - 1,)
    raise ValueError(f"unknown partition rule {rule!r}")


SPLIT_ASSERTED: frozenset[str] = frozenset({"megatron-lm-2021", "megatron-lm-2022", "megatron-lm-2023", "megatron-core-0.8"})
"""Megatron releases that refuse a split other than their "even" rule at start-up (arguments.py: "number of layers
of the model must be divisible pipeline model parallel size", and the layers per stage by the layers per virtual
stage); the first/last-stage layer options that relax it came later. Not DeepSpeed's pipeline engine (BLOOM ran
70 layers on 12 stages) and not the 2025 Megatron-Core MoE stacks, which have those options."""

MEGATRON_RELEASES: frozenset[str] = SPLIT_ASSERTED | {"megatron-lm-2023-zb", "megascale-2023", "megatron-core-2025-moe",
                                                      "megatron-core-2025-moe-folding"}
"""Releases built on Megatron-LM's pipeline schedules, which obey Megatron's rule on interleaving 2 stages
(planner.layout.framework_rules.MEGATRON_INTERLEAVED_TWO_STAGES; each release's workload says whether it overlaps
stage-boundary sends: the 2021-2023 ones could not)."""


def framework_builds(framework: str, num_layers: int, pp: int, v: int, sched: int | None = None,
                     workload: Any = None) -> bool:
    """Whether the framework can split `num_layers` layers over pp stages of v model chunks (a layout its asserted
    rule cannot split is one the framework refuses, not one to re-cost with meshplan's own split) and, given the
    row's schedule code and the release's workload, whether a Megatron release builds that schedule on pp stages
    (the rule set's Megatron rule, with the release's p2p overlap)."""
    if framework in MEGATRON_RELEASES and sched is not None and workload is not None:
        columns = {"pp": np.asarray([pp]), "sched": np.asarray([sched])}
        if not rules.mask(columns, Facts.of(None, workload), rules=(MEGATRON_INTERLEAVED_TWO_STAGES,))[0]:
            return False
    if framework not in SPLIT_ASSERTED or pp == 1:
        return True
    return rule_partition(PARTITION_RULES[framework], num_layers, pp, v) is not None


def with_framework_partition(plan: Any, framework: str, model: Any, cluster: Any, work: Any) -> Any:
    """The plan re-costed with its framework's layer split (the plan itself when the rule leaves it as it is)."""
    from planner.api import evaluate

    part = rule_partition(PARTITION_RULES.get(framework), model.num_layers, plan.layout.pp, plan.layout.virtual_stages)
    if part is None or part == plan.layout.partition(model.num_layers):
        return plan
    return evaluate(model, cluster, work, plan.layout.model_copy(update={"layer_partition": part}), allow_oom=True,
                    framework="any")
