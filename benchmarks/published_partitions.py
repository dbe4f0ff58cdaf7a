"""How each source's framework splits decoder layers over pipeline stages (the published layout's partition).

The planner chooses the best layer partition itself (cost/partition.py: with the LM head and loss on the last
stage it gives that stage fewer layers). A published run used its framework's split, and when the head is a
sizeable share of a stage (large vocabularies, few layers per stage) that split is what sets the step time: Qi et
al.'s 1.5B model on 8 stages runs [2, 3, 3, 3, 3, 3, 3, 2]; the planner's own [3, ..., 3, 1] is predicted 18 %
faster. So the benchmark re-costs the published layout (and the framework's own pick) with the framework's rule:

  even            every model chunk gets num_layers / (pp x v) layers: Megatron-LM assigns
                  num_layers // pipeline_model_parallel_size layers per stage (and per virtual stage), and the
                  runs here set no uneven-stage option (Megatron-Core's --decoder-first/last-pipeline-num-layers
                  came later)
  ends-one-fewer  the first and the last chunk get one layer fewer than the others: Qi et al. 2024 (zero bubble,
                  Sec. 5: "both the initial and final pipeline stages possess one fewer transformer layer") and
                  the Llama 3 paper (Sec. 3.3.2: "reduce one Transformer layer each from the first and the last
                  stages"); with one layer per chunk (Qi et al.'s interleaved runs: the fork pads num_layers by one
                  at each end, --allow-padding-num-layers) the first and last chunk hold only the embedding and the head
  deepspeed-type:transformer / deepspeed-type:transformer|embedding
                  DeepSpeed's PipelineModule with partition_method "type:<regex>" on the Megatron-DeepSpeed GPT
                  pipeline (deepspeed_type_partition): the classes that match the regex weigh 1, the rest 0, and
                  DeepSpeed's partition_balanced splits them. With the transformer layers alone it is "even" when
                  pp divides the layers, and fills every stage but the last otherwise (78 layers on 12 stages: 7
                  on eleven stages and 1 on the last, as BigScience's tr11 chronicles note); with the embedding
                  and the tied head counted as a layer each the end stages hold one layer fewer (BLOOM: 70 layers
                  on 12 stages as 5, 6 x 10, 5)
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
    "megatron-lm-2023-zb": "ends-one-fewer", "meta-llama3-2024": "ends-one-fewer",
    # Microsoft's Megatron-DeepSpeed of 2021 (MT-NLG): GPTModelPipe passes partition_method='type:transformer'
    # (megatron/model/gpt_model.py line 253 at ec166f1c, 2021-09-02).
    "megatron-deepspeed-2021": "deepspeed-type:transformer",
    # BigScience's Megatron-DeepSpeed until 2022-02-28: GPTModelPipe passes partition_method='type:transformer'
    # (megatron/model/gpt_model.py line 308 at cf2d23a5, 2022-02-27); --pp-partition-method came in 785906a8.
    "megatron-deepspeed-2022-02": "deepspeed-type:transformer",
    # BLOOM's launch script: --pp-partition-method 'type:transformer|embedding' (bigscience
    # train/tr11-176B-ml/tr11-176B-ml.slurm line 104 at 053adafe, 2022-03-11).
    "megatron-deepspeed-2022": "deepspeed-type:transformer|embedding",
}

DEEPSPEED_TYPE_RULES: dict[str, bool] = {"deepspeed-type:transformer": False, "deepspeed-type:transformer|embedding": True}
"""DeepSpeed "type:" partition rules: whether the regex also matches the embedding (EmbeddingPipe) specs."""

DEEPSPEED_BALANCE_EPS = 1e-3
"""partition_balanced's default tolerance on the bottleneck (deepspeed/runtime/utils.py, 2022-02)."""


def _deepspeed_probe(prefix: np.ndarray, parts_n: int, bottleneck: float) -> tuple[list[int], bool]:
    """DeepSpeed's probe of one bottleneck: each stage ends before the first spec whose inclusive prefix weight
    reaches the stage's start weight plus the bottleneck, searched one window of len // parts specs at a time
    (the window moves on while its last prefix is below the target); success when the last stage fits."""
    n = len(prefix)
    window = n // parts_n
    bounds, target, end = [0] + [n] * parts_n, bottleneck, window
    for stage in range(1, parts_n):
        while end < n and prefix[end] < target:
            end += window
        lo, hi = end - window, min(end, n)
        bounds[stage] = lo + int(np.searchsorted(prefix[lo:hi], target, side="left"))
        if bounds[stage] == n:
            return bounds, prefix[-1] - prefix[bounds[stage - 1]] < bottleneck
        target = prefix[bounds[stage] - 1] + bottleneck
    return bounds, target >= prefix[-1]


def deepspeed_type_partition(num_layers: int, pp: int, embeddings_weighted: bool) -> tuple[int, ...] | None:
    """Decoder layers per stage that DeepSpeed's PipelineModule gives the Megatron-DeepSpeed GPT pipeline under
    partition_method "type:transformer" (or "type:transformer|embedding" with `embeddings_weighted`).

    GPTModelPipe's specs with the precomputed attention mask (pretrain_gpt.py sets args.attn_mask): a cast, the
    embedding, a transpose, the layers, a transpose, the final LayerNorm, the tied head embedding, a cast
    (megatron/model/gpt_model.py, cf2d23a5). DeepSpeed weighs a spec 1 when its class name matches the regex
    (case-insensitive) and bisects for the smallest bottleneck its probe accepts (pipe/module.py _partition_layers,
    runtime/utils.py partition_balanced, DeepSpeed 2151c787a, 2022-02-18; unchanged through 2022-04). None when a
    stage would hold no decoder layer: a layout meshplan cannot express."""
    if pp < 2 or pp > num_layers:
        return None
    end = 1.0 if embeddings_weighted else 0.0
    weights = np.array([0.0, end, 0.0] + [1.0] * num_layers + [0.0, 0.0, end, 0.0])
    prefix = np.cumsum(weights)
    lower, upper = prefix[-1] / pp, float(prefix[-1])
    while upper > lower + DEEPSPEED_BALANCE_EPS:
        mid = lower + (upper - lower) / 2
        if _deepspeed_probe(prefix, pp, mid)[1]:
            upper = mid
        else:
            lower = mid + DEEPSPEED_BALANCE_EPS
    bounds, fits = _deepspeed_probe(prefix, pp, upper)
    first_layer = 3
    layers = tuple(max(0, min(b, first_layer + num_layers) - max(a, first_layer)) for a, b in zip(bounds, bounds[1:]))
    return layers if fits and min(layers) > 0 else None


def rule_partition(rule: str | None, num_layers: int, pp: int, v: int) -> tuple[int, ...] | None:
    """Layers per model chunk under `rule` (None: the rule does not apply or cannot split these layers)."""
    chunks = pp * v
    if rule is None or pp == 1:
        return None
    if rule == "even":
        return (num_layers // chunks,) * chunks if num_layers % chunks == 0 else None
    if rule in DEEPSPEED_TYPE_RULES:
        return deepspeed_type_partition(num_layers, pp, DEEPSPEED_TYPE_RULES[rule]) if v == 1 else None
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
