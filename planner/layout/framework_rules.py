"""What each training framework cannot build, as rules of the one rule set (`Rule(frameworks={name})`).

A framework (`planner.layout.names.FRAMEWORK_NAMES`; its profile, runtime and exporter are in
`planner.frameworks`) runs a subset of the layout vocabulary and builds some compositions differently:

- `FEATURES`: the values of the set-valued knobs it runs (recomputation policies and ZeRO stages, with what
  each means there; pipeline schedules come from the schedule registry, `schedules.name_in`) and the mesh
  axis orders it can build. Each gap becomes a rule (`<framework>.recompute`, `.zero`, `.schedule`,
  `.mesh-order`), so the search never lists what the framework lacks and a pinned value it lacks is refused
  with the framework's reason (`choices.refuse_pins`).
- `FRAMEWORK_RULES`: those feature rules plus what each release refuses or cannot express, read from its
  source (cited in each profile module of `planner.frameworks` and in the rule's `why`).

`planner.layout.rules.rules_for(framework)` selects the generic rules plus the framework's; "any" selects
the generic rules only. Every rule here is one vectorised predicate: the search applies it to its tables,
`check`/`violations` to one plan, the executor (framework "meshplan") to the plan it runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from planner.layout.expert_groups import data_axes_inner_first, ep_parts, not_a_block
from planner.layout.names import (
    DEFAULT_MESH_AXES,
    FRAMEWORK_NAMES,
    RECOMPUTE_EVERY,
    RECOMPUTE_MEANINGS,
    RECOMPUTE_NAMES,
    ordinal,
)
from planner.layout.numeric import sorted_unique
from planner.layout.optimizer_rules import OPTIMIZER_RULES
from planner.layout.rule import TRAITS, Columns, Rule
from planner.layout.schedules import BY_CODE, SCHEDULES, ScheduleCode, missing_in, name_in
from planner.layout.table import MESH_ORDERS, SEARCHED_ORDERS, axis_sizes

ORDER = ",".join  # an axis order as users write it: pp,dp_replicate,dp_shard,cp,tp


@dataclass(frozen=True)
class Features:
    """The values of the set-valued knobs one framework runs, and the mesh orders it builds."""

    recompute: Mapping[str, str]
    """Recomputation policy -> the framework's setting and what exactly it recomputes."""
    zero: Mapping[int, str]
    """ZeRO stage -> how the framework shards (stages absent here do not exist in it)."""
    missing: Mapping[str, str]
    """'knob=value' -> why the framework cannot run it (the refusal's text)."""
    mesh_orders: tuple[tuple[str, ...], ...] | None = None
    """Mesh axis orders it can build (outermost first); None: any order."""
    mesh_text: str = ""
    """How the framework orders its ranks (the mesh-order refusal's text)."""


FEATURES: dict[str, Features] = {
    "meshplan": Features(
        recompute={"none": "nothing recomputed", "selective": "the attention core softmax(QK^T)V of every layer "
                   "(executor.ac)", "full": "every decoder layer from its input (executor.ac)",
                   "op": "per-op selective checkpointing of every decoder layer: every second matmul and all "
                   "element-wise ops recomputed (executor.ac)",
                   **{name: f"{RECOMPUTE_MEANINGS[name]} (executor.ac)" for name in RECOMPUTE_EVERY}},
        zero={0: "FSDP2 replicate (DDP) over DP x CP", 1: "fully_shard(reshard_after_forward=False) over "
              "dp_shard x cp, one reduction per step", 2: "fully_shard(reshard_after_forward=False) over "
              "dp_shard x cp, reduce-scatter every micro-batch",
              3: "fully_shard(reshard_after_forward=True) over dp_shard x cp; HSDP on (dp_replicate, dp_shard x cp)"},
        missing={}),
    "torchtitan": Features(
        recompute={"none": "--activation-checkpoint:none", "full": "--activation-checkpoint:full (FullAC: every block)",
                   "op": "--activation-checkpoint:selective (SelectiveAC: per-op, every second mm recomputed)"},
        zero={0: "DDP (data_parallel_replicate_degree = dp), only as the sole parallelism",
              2: "FSDP2 with fsdp_reshard_after_forward=never (weights gathered from forward to backward)",
              3: "FSDP2 over the dp_shard_cp mesh (HSDP with data_parallel_replicate_degree > 1)"},
        missing={"zero=1": "TorchTitan has no ZeRO-1: FSDP2 always shards gradients too (ZeRO-2 is "
                           "fsdp_reshard_after_forward=never)",
                 "recompute=selective": "TorchTitan's selective AC keeps matmul outputs per op or recomputes every "
                                        "n-th layer; neither is the plan's attention-core recomputation",
                 **{f"recompute={name}": "TorchTitan 0.3 has no layer-wise activation checkpointing (FullAC, per-op "
                                         "SelectiveAC and MemoryBudgetAC only; 0.2's selective_ac_option = \"k\", every "
                                         "k-th block, is gone)" for name in RECOMPUTE_EVERY}},
        mesh_orders=(DEFAULT_MESH_AXES,), mesh_text="TorchTitan 0.3.0 builds its mesh in one order "
        "(ParallelDims.build_mesh)"),
    "megatron": Features(
        recompute={"none": "no recomputation",
                   "selective": "--recompute-granularity selective: the attention core (core_attn), as costed",
                   "full": "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
                   **{name: f"--recompute-granularity full --recompute-method block --recompute-num-layers "
                            f"(layers per chunk)/{k}: the first 1/{k} of each model chunk's layers recomputed whole"
                      for name, k in RECOMPUTE_EVERY.items()}},
        missing={"recompute=op": "Megatron-LM has no per-op matmul checkpointing: --recompute-granularity selective "
                                 "recomputes whole modules (--recompute-modules), not every second matmul"},
        zero={0: "DDP (--overlap-grad-reduce)", 1: "--use-distributed-optimizer (shards over dp x cp)",
              2: "Megatron-FSDP --data-parallel-sharding-strategy optim_grads",
              3: "Megatron-FSDP --data-parallel-sharding-strategy optim_grads_params"},
        mesh_orders=SEARCHED_ORDERS,  # tp-cp-ep-dp-pp (default); tp-cp-ep-pp-dp (--use-tp-pp-dp-mapping)
        mesh_text="Megatron-LM core_v0.19 orders its ranks tp-cp-ep-dp-pp or, with --use-tp-pp-dp-mapping, "
        "tp-cp-ep-pp-dp"),
    "deepspeed": Features(
        recompute={"none": "no recomputation",
                   "full": "deepspeed.checkpointing.checkpoint around every transformer layer (model code)",
                   **{name: f"deepspeed.checkpointing.checkpoint around every {ordinal(k)} transformer layer "
                            "(model code)" for name, k in RECOMPUTE_EVERY.items()}},
        zero={0: "plain data parallel (allreduce)", 1: "ZeRO stage 1", 2: "ZeRO stage 2", 3: "ZeRO stage 3"},
        missing={"recompute=selective": "DeepSpeed has no attention-core recomputation of its own",
                 "recompute=op": "DeepSpeed's activation checkpointing (deepspeed.checkpointing) recomputes whole "
                                 "layers; it has no per-op selective policy"},
        mesh_orders=(DEFAULT_MESH_AXES,), mesh_text="DeepSpeed 0.19.8 takes its ranks from the mpu in one order"),
}
"""Per framework name (`names.FRAMEWORK_NAMES`), what it runs; "any" runs everything."""


def runs_schedules(framework: str) -> tuple[str, ...]:
    """Plan names of the pipeline schedules `framework` runs (the registry's `name_in`)."""
    return tuple(name for name, s in SCHEDULES.items() if name_in(s, framework) is not None)


def _or(values) -> str:
    return " or ".join(map(str, values))


def _feature_rules(framework: str, f: Features) -> list[Rule]:
    """A rule for every knob value and mesh order `framework` lacks."""
    only = frozenset({framework})
    out = []
    runs = runs_schedules(framework)
    if len(runs) < len(SCHEDULES):
        codes = [SCHEDULES[n].code for n in runs]
        out.append(Rule(
            f"{framework}.schedule", ("sched", "pp"), (), lambda c, _, codes=codes: (c["pp"] == 1) | np.isin(c["sched"], codes),
            lambda r, _: missing_in(BY_CODE[r["sched"]], framework), f"use schedule {_or(runs)}",
            "its pipeline schedules (with one pipeline rank the schedule is only a label)", only))
    lacks = [r for r in RECOMPUTE_NAMES if r not in f.recompute]
    if lacks:
        codes = [RECOMPUTE_NAMES.index(r) for r in f.recompute]
        out.append(Rule(
            f"{framework}.recompute", ("rc",), (), lambda c, _, codes=codes: np.isin(c["rc"], codes),
            lambda r, _: f.missing[f"recompute={RECOMPUTE_NAMES[r['rc']]}"], f"use recompute {_or(f.recompute)}",
            "its activation-checkpointing policies", only))
    if len(f.zero) < 4:
        stages = list(f.zero)
        out.append(Rule(
            f"{framework}.zero", ("zero",), (), lambda c, _, stages=stages: np.isin(c["zero"], stages),
            lambda r, _: f.missing[f"zero={r['zero']}"], f"use zero {_or(stages)}", "its sharding stages", only))
    if f.mesh_orders is not None:
        orders = f.mesh_orders
        out.append(Rule(
            f"{framework}.mesh-order", ("pp", "dp", "dp_shard", "cp", "tp", "order"), (),
            lambda c, _, orders=orders: order_allowed(c, orders),
            lambda r, _: f"{f.mesh_text}, not {ORDER(MESH_ORDERS[r['order']])}",
            "plan with --framework to search its orders only", "the rank orders it builds", only))
    return out


def order_allowed(c: Columns, orders: tuple[tuple[str, ...], ...]) -> np.ndarray:
    """Rows whose mesh order is one of `orders`, or equivalent to one: axes of size 1 do not change the rank
    grid, so an order counts as allowed when the axes larger than 1 come in an allowed relative order."""
    sizes = axis_sizes(c)
    ok = np.zeros(len(c["order"]), dtype=bool)
    for code in sorted_unique(c["order"]).tolist():
        rows = c["order"] == code
        order = MESH_ORDERS[int(code)]
        for allowed in orders:
            same = np.ones(int(rows.sum()), dtype=bool)
            for i, a in enumerate(order):
                for b in order[i + 1:]:
                    if allowed.index(a) > allowed.index(b):  # a and b swapped: fine only if one has size 1
                        same &= (sizes[a][rows] == 1) | (sizes[b][rows] == 1)
            ok[rows] |= same
    return ok


def dp_outer(c: Columns) -> np.ndarray:
    """Rows whose pipeline axis sits inside the data-parallel axes (DP outermost): Megatron's tp-cp-ep-pp-dp,
    the planner's ('dp_replicate', 'dp_shard', 'pp', 'cp', 'tp'), with pp > 1 and dp > 1."""
    codes = [i for i, o in enumerate(MESH_ORDERS) if o.index("pp") > max(o.index("dp_replicate"), o.index("dp_shard"))]
    return np.isin(c["order"], codes) & (c["pp"] > 1) & (c["dp"] > 1)


def _ep_blocks(c: Columns) -> np.ndarray:
    """Per row: ep == 1, or its EP group is a block of the data axes in the row's axis order (expert_groups)."""
    ep, dp, shard, cp, order = (np.asarray(c[k]) for k in ("ep", "dp", "dp_shard", "cp", "order"))
    ok = np.ones(ep.shape, dtype=bool)
    grouped = ep != 1  # rows with ep == 1 pass whatever their blocks are (below); a dense model has none to check
    if not grouped.any():
        return ok | (ep == 1)
    for code in sorted_unique(order[grouped]).tolist():
        sel = grouped & (order == code)
        # dp_replicate >= 1 even where dp_shard does not divide dp (dp_shard_divides_dp reports that row)
        sizes = {"dp_replicate": np.maximum(dp[sel] // shard[sel], 1), "dp_shard": shard[sel], "cp": cp[sel]}
        ok[sel] = ep_parts(ep[sel], sizes, data_axes_inner_first(MESH_ORDERS[code]))[1]
    return ok | (ep == 1)


def _ep_text(r: Mapping[str, int]) -> str:
    sizes = {"dp_replicate": max(r["dp"] // r["dp_shard"], 1), "dp_shard": r["dp_shard"], "cp": r["cp"]}
    return not_a_block(r["ep"], sizes, data_axes_inner_first(MESH_ORDERS[r["order"]]))


def _replicas(c: Columns) -> np.ndarray:
    """dp_replicate (at least 1 where dp_shard does not divide dp: dp_shard_divides_dp reports that row)."""
    return np.maximum(c["dp"] // c["dp_shard"], 1)


def _titan_shard(c: Columns) -> np.ndarray:
    """TorchTitan's data_parallel_shard_degree: the FSDP group (1 under ZeRO-0, which is DDP)."""
    return c["dp_shard"] * (c["zero"] > 0) + (c["zero"] == 0)


def _lacks(traits: frozenset[str]) -> str:
    return ", ".join(TRAITS[t][0] for t in TRAITS if t in traits)


def _dtype_rule(framework: str, refused: tuple[str, ...], says: str, fix: str, why: str) -> Rule:
    return Rule(f"{framework}.dtype", (), ("dtype",), lambda c, f: f.dtype not in refused,
                lambda r, f: says.format(dtype=f.dtype), fix, why, frozenset({framework}))


MESHPLAN = frozenset({"meshplan"})
TORCHTITAN = frozenset({"torchtitan"})
MEGATRON = frozenset({"megatron"})
DEEPSPEED = frozenset({"deepspeed"})

MEGATRON_INTERLEAVED_TWO_STAGES = Rule(
    "megatron.interleaved-two-stages", ("sched", "pp"), ("overlap_pp_comm",),
    lambda c, f: (c["pp"] != 2) | (c["sched"] != ScheduleCode.INTERLEAVED) | bool(f.overlap_pp_comm),
    lambda r, f: "Megatron interleaves 2 pipeline stages only with --overlap-p2p-communication (\"pipeline-model-"
    "parallel size should be greater than 2 to avoid having multiple p2p sends and recvs between same 2 ranks per "
    "communication batch\"); this plan blocks on stage-boundary sends", "use pp > 2, schedule 1f1b, or overlapped "
    "stage-boundary sends", "megatron/training/arguments.py validate_args, core_v0.19.0 lines 966-975 (core_r0.8.0 "
    "lines 254-263): with --no-overlap-p2p-communication interleaving asserts pp > 2. Releases before Megatron-LM "
    "3ee489d9 (2024-05-31, \"Enable virtual pipelining and P2P communication overlap at PP=2\") assert pp > 2 "
    "whenever interleaving (megatron/arguments.py of aed2f75e 2021-04, 83b1e42f 2022-02, 285068c8 2023-01; "
    "core/parallel_state.py raises it too from e7e99721, 2022-09); they had no p2p overlap, which "
    "Workload.overlap_pp_comm=False describes", MEGATRON)
"""Megatron's one condition on interleaving with 2 stages (in the rule set for --framework megatron; the published-run
benchmark applies it to the historical Megatron releases, whose workloads say whether they overlap p2p sends)."""

FRAMEWORK_RULES: tuple[Rule, ...] = (
    *(rule for name, f in FEATURES.items() for rule in _feature_rules(name, f)),
    # Every framework meshplan plans for gives each model chunk at least one decoder layer; the generic rule
    # (chunks_at_most_layers) also admits the embedding-only and head-only end chunks of padded Megatron forks.
    Rule("chunks_hold_a_layer", ("pp", "v"), ("num_layers",),
         lambda c, f: (c["v"] == 1) | (c["pp"] * c["v"] <= f.num_layers),
         lambda r, f: f"pp*virtual_stages={r['pp'] * r['v']} exceeds num_layers={f.num_layers}",
         "use fewer virtual stages", "meshplan run, TorchTitan, Megatron-Core as exported and DeepSpeed split the "
         "decoder layers over the model chunks: every chunk holds at least one", frozenset(FRAMEWORK_NAMES)),
    # meshplan run (executor/): how it composes expert parallelism with the data axes, and its precisions.
    Rule("meshplan.ep-group", ("ep", "dp", "dp_shard", "cp", "order"), (), lambda c, f: _ep_blocks(c),
         lambda r, f: _ep_text(r), "choose another ep or reorder mesh_axes",
         "meshplan run builds EP groups as ep consecutive ranks of dp_replicate x dp_shard x cp, TorchTitan-style "
         "(planner.layout.expert_groups)", MESHPLAN),
    _dtype_rule("meshplan", ("fp16", "fp8"), "meshplan run trains bf16 (GPU) or fp32, not {dtype} "
                "(executor.train.param_dtype_for)", "plan with dtype bf16 or fp32", "the executor's precisions"),
    # TorchTitan 0.3.0 (planner/frameworks/torchtitan.py cites the source of each).
    Rule("torchtitan.architecture", (), ("traits",), lambda c, f: not f.traits,
         lambda r, f: f"{f.model_name} has {_lacks(f.traits)}; TorchTitan's Llama 3 and Qwen3-MoE blocks (which the "
         "export builds) have none of these", "plan for another framework (--framework) or model",
         "TorchTitan builds Llama 3 blocks (RMSNorm, SwiGLU, RoPE, no biases, untied head, GQA) and Qwen3-MoE "
         "blocks (every layer MoE, no shared expert)", TORCHTITAN),
    _dtype_rule("torchtitan", ("fp16", "fp8"), "dtype {dtype}: TorchTitan trains bf16 mixed precision (fp8 needs "
                "its torchao Float8 converter, which the export does not set up)", "plan with --dtype bf16",
                "the precisions the export sets up", ),
    Rule("torchtitan.ddp-1d", ("zero", "dp", "tp", "pp", "cp"), (),
         lambda c, f: ~((c["zero"] == 0) & (c["dp"] > 1) & ((c["tp"] > 1) | (c["pp"] > 1) | (c["cp"] > 1))),
         lambda r, f: "TorchTitan runs ZeRO-0 as DDP, which it allows only as the sole parallelism (\"DDP has not "
         f"supported > 1D parallelism\"); this layout has dp={r['dp']} with tp={r['tp']}, pp={r['pp']}, cp={r['cp']}",
         "use FSDP (zero 2 or 3) or HSDP", "models/llama3/parallelize.py", TORCHTITAN),
    Rule("torchtitan.cp-fsdp", ("cp", "zero"), (), lambda c, f: ~((c["cp"] > 1) & (c["zero"] == 0)),
         lambda r, f: f"TorchTitan applies FSDP over the CP ranks whenever cp > 1, so ZeRO-0 with cp={r['cp']} would "
         "silently become FSDP", "use zero 2 or 3 with context parallelism", "distributed/parallel_dims.py", TORCHTITAN),
    Rule("torchtitan.ep-group", ("ep", "dp_shard", "zero", "cp"), (),
         lambda c, f: (c["ep"] == 1) | ((_titan_shard(c) * c["cp"]) % c["ep"] == 0),
         lambda r, f: f"TorchTitan forms EP groups inside one FSDP group x cp (efsdp = dp_shard*cp*tp/ep); ep={r['ep']} "
         "does not divide its sharding group x cp, so the expert mesh would span data-parallel replicas (a mesh "
         "dimension of size 0 in build_mesh)", "shard over more ranks (a larger FSDP group, not HSDP/ZeRO-0) or use "
         "a smaller ep", "ParallelDims: EP borrows ranks from dp_shard x cp x tp", TORCHTITAN),
    Rule("torchtitan.zb-compile", ("sched", "pp"), ("runtime",),
         lambda c, f: (c["pp"] == 1) | (c["sched"] != ScheduleCode.ZB_H1) | (f.runtime != "pytorch-compile"),
         lambda r, f: "TorchTitan under torch.compile (runtime pytorch-compile) cannot run the zero-bubble schedule: "
         "PyTorch's ScheduleInterleavedZeroBubble refuses compiled stages (\"we don't support input/weight backward "
         "split with torch.compile\", _check_torch_compile_compatibility)", "use schedule 1f1b or interleaved, or "
         "runtime pytorch (eager)", "torch/distributed/pipelining/schedules.py (torch 2.14)", TORCHTITAN),
    Rule("torchtitan.grad-reduce-dtype", ("dp", "cp"), ("grad_reduce_dtype",),
         lambda c, f: (f.grad_reduce_dtype != "bf16") | (c["dp"] * c["cp"] == 1),
         lambda r, f: "TorchTitan 0.3.0 reduces gradients in fp32 only (training.mixed_precision_reduce accepts "
         "\"float32\" alone); this plan reduces them in bf16", "plan with --grad-reduce-dtype fp32 (or for another "
         "framework: --framework megatron, deepspeed or meshplan)",
         "config/configs.py TrainingConfig.mixed_precision_reduce: Literal[\"float32\"] (the same in 0.2.x "
         "config/job_config.py)", TORCHTITAN),
    Rule("torchtitan.ep-tp", ("ep", "tp"), ("num_experts",),
         lambda c, f: (c["ep"] == 1) | (c["tp"] == 1) | (f.num_experts % (c["ep"] * c["tp"]) == 0),
         lambda r, f: f"TorchTitan does not split experts by TP: EP borrows the TP ranks, so expert_parallel_degree = "
         f"ep x tp = {r['ep']}x{r['tp']} must divide the {f.num_experts} experts", "use a smaller tp or ep",
         "models/common/moe_sharding.py", TORCHTITAN),
    # Megatron-LM core_v0.19 (planner/frameworks/megatron.py).
    _dtype_rule("megatron", ("fp8",), "dtype {dtype}: Megatron trains fp8 only through Transformer Engine recipes "
                "the export does not set; plan bf16", "plan with --dtype bf16", "the precisions the export sets up"),
    MEGATRON_INTERLEAVED_TWO_STAGES,
    Rule("megatron.grad-reduce-dtype", (), ("grad_reduce_dtype", "dtype"),
         lambda c, f: (f.grad_reduce_dtype != "bf16") | (f.dtype in ("bf16", "fp8")),
         lambda r, f: f"Megatron reads --grad-reduce-in-bf16 only for --bf16 runs; a {f.dtype} run would ignore it and "
         "reduce in its own precision", "plan with --grad-reduce-dtype fp32, or train bf16",
         "megatron/training/arguments.py validate_args (core_v0.19.0 lines 1181-1193: grad_reduce_in_bf16 is read "
         "inside `if args.bf16`)", MEGATRON),
    Rule("megatron.dp-outer-order", ("order", "pp", "dp", "cp", "ep"), (),
         lambda c, f: ~(dp_outer(c) & (c["cp"] != c["ep"])),
         lambda r, f: "Megatron builds the DP-outer order (--use-tp-pp-dp-mapping) with pp > 1 only when the expert "
         f"data-parallel size equals the data-parallel size (cp == ep); cp={r['cp']}, ep={r['ep']} fail in "
         "initialize_model_parallel", "use the default order (pp outermost)", "parallel_state.py", MEGATRON),
    Rule("megatron.hsdp-ep", ("zero", "dp", "dp_shard", "cp", "ep"), (),
         lambda c, f: ~((c["zero"] > 0) & (_replicas(c) > 1) & ((c["dp"] * c["cp"] // c["ep"]) % _replicas(c) != 0)),
         lambda r, f: f"Megatron's distributed-optimizer instances ({r['dp'] // r['dp_shard']}) must divide the expert "
         f"data-parallel size dp*cp/ep; with ep={r['ep']} the EP group would span instances (\"Expert data parallel "
         "size should be divisible by partial DistOpt shard factor\")", "use a larger sharding group or a smaller ep",
         "parallel_state.py", MEGATRON),
    # DeepSpeed 0.19.8 (planner/frameworks/deepspeed.py).
    Rule("deepspeed.cp", ("cp",), (), lambda c, f: c["cp"] == 1,
         lambda r, f: f"DeepSpeed 0.19.8 has no ring or all-gather context parallelism (cp={r['cp']}); its Ulysses "
         "sequence parallelism is a different algorithm", "plan with cp=1", "runtime/ (no CP)", DEEPSPEED),
    Rule("deepspeed.hsdp", ("zero", "dp_shard", "dp"), (), lambda c, f: (c["zero"] == 0) | (c["dp_shard"] == c["dp"]),
         lambda r, f: f"DeepSpeed 0.19.8 removed MiCS: ZeRO shards over all {r['dp']} data-parallel ranks, not groups "
         f"of {r['dp_shard']}", "use a sharding group equal to dp (no HSDP)", "runtime/zero/config.py", DEEPSPEED),
    Rule("deepspeed.pp-zero", ("pp", "zero"), (), lambda c, f: (c["pp"] == 1) | (c["zero"] < 2),
         lambda r, f: f"DeepSpeed's pipeline engine supports ZeRO stage 0 or 1 only, not {r['zero']}",
         "use zero 0 or 1 with pp > 1", "runtime/pipe/engine.py", DEEPSPEED),
    *OPTIMIZER_RULES,
)
"""Every framework's rules (each names its framework)."""

__all__ = ["FEATURES", "FRAMEWORK_RULES", "MEGATRON_INTERLEAVED_TWO_STAGES", "Features", "dp_outer", "order_allowed", "runs_schedules"]
