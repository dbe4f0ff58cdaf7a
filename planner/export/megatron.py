"""Megatron-LM arguments for a plan (one per line, ready to append to `pretrain_gpt.py`).

Megatron derives DP = world size / (TP x PP x CP) from the launch, and the number of micro-batches from
--global-batch-size / (--micro-batch-size x DP). Its rank order is tp-cp-ep-dp-pp (TP fastest), the planner's
default, or tp-cp-ep-pp-dp with --use-tp-pp-dp-mapping. Uneven pipeline stages use
--decoder-first/last-pipeline-num-layers when only the end stages differ, else --pipeline-model-parallel-layout
("E" embedding, "t" a decoder layer, "L" loss; chunks separated by "|", dealt to ranks round-robin).
ZeRO: 1 -> --use-distributed-optimizer; 2/3 -> Megatron-FSDP (--data-parallel-sharding-strategy optim_grads /
optim_grads_params); HSDP -> --num-distributed-optimizer-instances (replicas).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from planner.export import ExportResult, header
from planner.layout import SCHEDULES

if TYPE_CHECKING:
    from planner.plan import Plan

ORDERS = {
    ("pp", "dp_replicate", "dp_shard", "cp", "tp"): [],
    ("dp_replicate", "dp_shard", "pp", "cp", "tp"): ["--use-tp-pp-dp-mapping"],
}


def pipeline_args(num_layers: int, partition: tuple[int, ...], pp: int, v: int) -> list[str]:
    """Arguments that reproduce the layer partition exactly (nothing when it is even)."""
    if pp == 1:
        return []
    if len(set(partition)) == 1:
        return ["--num-layers-per-virtual-pipeline-stage", str(partition[0])] if v > 1 else []
    mid = partition[1:-1]
    if v == 1 and len(set(mid)) <= 1:
        args = []
        middle = mid[0] if mid else None
        if partition[0] != middle:
            args += ["--decoder-first-pipeline-num-layers", str(partition[0])]
        if middle is not None and partition[-1] != middle:
            args += ["--decoder-last-pipeline-num-layers", str(partition[-1])]
        return args
    chunks = []
    for c, n in enumerate(partition):
        text = ("E" if c == 0 else "") + (f"t*{n}" if n else "") + ("L" if c == len(partition) - 1 else "")
        chunks.append(text)
    return ["--pipeline-model-parallel-layout", "|".join(chunks)]


def model_args(plan: Plan) -> list[str]:
    m, w = plan.inputs.model, plan.inputs.workload
    args = ["--num-layers", str(m.num_layers), "--hidden-size", str(m.hidden_size),
            "--num-attention-heads", str(m.num_heads)]
    if m.num_kv_heads != m.num_heads:
        args += ["--group-query-attention", "--num-query-groups", str(m.num_kv_heads)]
    if m.attention == "mha_gqa" and m.head_dim * m.num_heads != m.hidden_size:
        args += ["--kv-channels", str(m.head_dim)]
    args += ["--ffn-hidden-size", str(m.ffn_hidden_size), "--seq-length", str(w.seq_len),
             "--max-position-embeddings", str(m.max_seq_len)]
    if m.mlp == "swiglu":
        args.append("--swiglu")
    if m.norm == "rmsnorm":
        args += ["--normalization", "RMSNorm"]
    args += ["--position-embedding-type", "rope" if m.position == "rope" else "learned_absolute"]
    if not m.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if not m.linear_bias:
        args.append("--disable-bias-linear")
        if m.qkv_bias:
            args.append("--add-qkv-bias")
    if m.attention == "mla" and m.mla is not None:
        args += ["--multi-latent-attention", "--kv-lora-rank", str(m.mla.kv_lora_rank),
                 "--qk-head-dim", str(m.mla.qk_nope_head_dim), "--qk-pos-emb-head-dim", str(m.mla.qk_rope_head_dim),
                 "--v-head-dim", str(m.mla.v_head_dim)]
        if m.mla.q_lora_rank is not None:
            args += ["--q-lora-rank", str(m.mla.q_lora_rank)]
    if m.moe is not None:
        e = m.moe
        args += ["--num-experts", str(e.num_experts), "--moe-router-topk", str(e.top_k),
                 "--moe-ffn-hidden-size", str(e.expert_ffn_hidden_size)]
        if e.num_shared_experts:
            args += ["--moe-shared-expert-intermediate-size", str(e.num_shared_experts * e.expert_ffn_hidden_size)]
        pattern = [int(bool(m.is_moe_layer(i))) for i in range(m.num_layers)]
        if not all(pattern):
            args += ["--moe-layer-freq", "[" + ",".join(map(str, pattern)) + "]"]
    args.append({"bf16": "--bf16", "fp16": "--fp16"}.get(w.dtype, "--bf16" if w.dtype == "fp8" else ""))
    return [a for a in args if a]


def arguments(plan: Plan) -> tuple[list[str], list[str]]:
    """(argument list, warnings)."""
    lay, m = plan.layout, plan.inputs.model
    warnings: list[str] = []
    args = ["--tensor-model-parallel-size", str(lay.tp), "--pipeline-model-parallel-size", str(lay.pp),
            "--context-parallel-size", str(lay.cp), "--expert-model-parallel-size", str(lay.ep)]
    args += pipeline_args(m.num_layers, lay.partition(m.num_layers), lay.pp, lay.virtual_stages)
    if lay.sequence_parallel:
        args.append("--sequence-parallel")
    args += ["--micro-batch-size", str(lay.micro_batch), "--global-batch-size", str(lay.global_batch)]
    if lay.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif lay.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if lay.zero >= 1:
        args.append("--use-distributed-optimizer")
    if lay.zero >= 2:
        strategy = "optim_grads" if lay.zero == 2 else "optim_grads_params"
        args += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", strategy, "--ckpt-format", "fsdp_dtensor"]
    if lay.zero >= 1 and lay.dp_replicate > 1:
        args += ["--num-distributed-optimizer-instances", str(lay.dp_replicate)]
    order = tuple(lay.mesh_axes)
    if order in ORDERS:
        args += ORDERS[order]
    else:
        warnings.append(f"Megatron-LM orders ranks tp-cp-ep-dp-pp or tp-cp-ep-pp-dp; this plan's order "
                        f"{','.join(order)} cannot be expressed, ranks will be grouped differently")
    schedule = SCHEDULES[lay.schedule]
    if schedule.megatron is None and lay.pp > 1:
        warnings.append(schedule.megatron_instead)
    args += model_args(plan)
    return args, warnings


def export(plan: Plan, **_: Any) -> ExportResult:
    args, warnings = arguments(plan)
    lay = plan.layout
    lines = [header(plan),
             f"# Megatron derives DP = world / (TP x PP x CP) = {plan.world_size} / "
             f"({lay.tp} x {lay.pp} x {lay.cp}) = {lay.dp}: launch {plan.world_size} ranks.\n",
             f"# Vocabulary: set --tokenizer-type/--tokenizer-model (the plan assumes {plan.inputs.model.vocab_size}).\n"]
    pairs: list[str] = []
    for a in args:
        if a.startswith("--") or not pairs:
            pairs.append(a)
        else:
            pairs[-1] += " " + shlex.quote(a)
    lines.append(" \\\n".join(pairs) + "\n")
    return ExportResult("megatron", "".join(lines), tuple(warnings))
