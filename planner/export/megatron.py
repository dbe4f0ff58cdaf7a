"""Megatron-LM core_v0.19 launch script for a plan: `torchrun pretrain_gpt.py "${MEGATRON_ARGS[@]}"`.

Megatron derives DP = world size / (TP x PP x CP) from the launch, and the number of micro-batches from
--global-batch-size / (--micro-batch-size x DP). Its rank order is tp-cp-ep-dp-pp (TP fastest), the planner's
default, or tp-cp-ep-pp-dp with --use-tp-pp-dp-mapping (the planner's DP-outer order; the framework rules
keep it to layouts Megatron builds). Uneven pipeline stages use
--decoder-first/last-pipeline-num-layers when only the end stages differ, else --pipeline-model-parallel-layout
("E" embedding, "t" a decoder layer, "L" loss; chunks separated by "|", dealt to ranks round-robin).
ZeRO: 1 -> --use-distributed-optimizer; 2/3 -> Megatron-FSDP (--data-parallel-sharding-strategy optim_grads /
optim_grads_params); HSDP -> --num-distributed-optimizer-instances (replicas). The plan was costed with
data-parallel traffic overlapped: --overlap-grad-reduce (and --overlap-param-gather with a sharded
optimizer). Context parallelism: --cp-comm-type p2p (ring attention overlapping each step's K/V exchange with
attention, Megatron's default and what the megatron runtime costs). TP-communication overlap (the megatron
runtime's default, `Workload.tp_comm_overlap`): --tp-comm-overlap with sequence parallelism; bf16 gradient reduction
(`Workload.grad_reduce_dtype`): --grad-reduce-in-bf16; optimizer state below fp32 (`Workload.master_weights`
remainders, `Workload.optimizer_state_dtype` bf16): --use-precision-aware-optimizer [--exp-avg(-sq)-dtype bf16];
stage-boundary sends
overlap compute by default, --no-overlap-p2p-communication where the workload says they block. Models without
dropout (Llama-style) set --attention-dropout/--hidden-dropout 0 (Megatron's default is 0.1); RoPE models
state --rotary-base (Megatron's default is 10000). CUDA_DEVICE_MAX_CONNECTIONS=1 keeps TP/CP communication
kernels in issue order on Hopper and older (Megatron warns without it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from planner.export import ExportResult, header, launch_shape
from planner.export.script import shell_array, torchrun
from planner.frameworks.megatron import PROFILE
from planner.layout.framework_rules import order_allowed
from planner.layout.names import RECOMPUTE_EVERY
from planner.layout.table import SEARCHED_ORDERS, layout_to_row

if TYPE_CHECKING:
    from planner.layout import Workload
    from planner.plan import Plan

ORDER_ARGS = ([], ["--use-tp-pp-dp-mapping"])
"""Megatron's argument for each of the searched mesh orders (`planner.layout.table.SEARCHED_ORDERS`: PP outermost,
Megatron's default tp-cp-ep-dp-pp; DP outermost, tp-cp-ep-pp-dp), the two orders its rules allow."""


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
    if m.position == "rope":
        args += ["--rotary-base", str(int(round(m.rope_theta)))]  # Megatron parses an int
    if m.norm == "rmsnorm":  # Llama-style models train without dropout (planner.cost.context.CostContext.dropout)
        args += ["--attention-dropout", "0.0", "--hidden-dropout", "0.0"]
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


def precision_aware_args(w: Workload, warnings: list[str]) -> list[str]:
    """Megatron-Core's precision-aware optimizer for a plan whose optimizer state is below fp32
    (`Workload.master_weights` remainders, `Workload.optimizer_state_dtype` bf16; the megatron.* optimizer rules
    refuse the settings it lacks): Transformer Engine's FusedAdam keeps int16 remainders for the bf16 weights
    (OptimizerConfig.store_param_remainders) and the moments at --exp-avg-dtype/--exp-avg-sq-dtype (bf16 from
    core_v0.13.0)."""
    if w.master_weights == "fp32" and w.optimizer_state_dtype == "fp32":
        return []
    warnings.append("--use-precision-aware-optimizer needs Transformer Engine's FusedAdam; its int16 master "
                    "remainders need Transformer Engine >= 2.1 (older releases keep a full fp32 master, 2 more bytes "
                    "per sharded parameter than planned)")
    args = ["--use-precision-aware-optimizer"]
    if w.optimizer_state_dtype == "bf16":
        args += ["--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"]
    return args


def arguments(plan: Plan) -> tuple[list[str], list[str]]:
    """(argument list, warnings)."""
    lay, m = plan.layout, plan.inputs.model
    warnings: list[str] = []
    args = ["--tensor-model-parallel-size", str(lay.tp), "--pipeline-model-parallel-size", str(lay.pp),
            "--context-parallel-size", str(lay.cp), "--expert-model-parallel-size", str(lay.ep)]
    args += pipeline_args(m.num_layers, lay.partition(m.num_layers), lay.pp, lay.virtual_stages)
    if lay.sequence_parallel:
        args.append("--sequence-parallel")
    if lay.cp > 1:
        args += ["--cp-comm-type", "p2p"]  # ring attention, as the megatron runtime costs CP (cost.comm.cp_exposed_s)
    w = plan.inputs.workload
    if w.tp_comm_overlap and lay.sequence_parallel and lay.tp > 1:
        args.append("--tp-comm-overlap")  # "can happen only when sequence parallelism is enabled" (arguments.py)
    if w.grad_reduce_dtype == "bf16":
        # DDP/distributed-optimizer grad buffers, and their reduce-scatter/all-reduce, in bf16 (arguments.py: it
        # turns accumulate_allreduce_grads_in_fp32 off; the rule megatron.grad-reduce-dtype keeps it to --bf16).
        args.append("--grad-reduce-in-bf16")
    args += precision_aware_args(w, warnings)
    if lay.pp > 1 and lay.virtual_stages > 1 and not w.overlap_pp_comm:
        args.append("--no-overlap-p2p-communication")
    if lay.ep > 1:
        args += ["--moe-token-dispatcher-type", "alltoall"]  # the all-to-all the cost model's EP term costs
    args += ["--micro-batch-size", str(lay.micro_batch), "--global-batch-size", str(lay.global_batch)]
    if lay.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif lay.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    elif lay.recompute in RECOMPUTE_EVERY:
        # The first 1/k of each model chunk's layers recomputed whole: the share every-k costs. The block method
        # counts per chunk (megatron/core/recompute.py at core_v0.19.0: `layer_idx < recompute_num_layers` over
        # the chunk's own layers), and the layout rules keep the chunks even (partial_recompute_even_chunks).
        chunks = lay.pp * lay.virtual_stages
        layers = str(m.num_layers // (chunks * RECOMPUTE_EVERY[lay.recompute]))
        args += ["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", layers]
    if lay.zero >= 1:
        args.append("--use-distributed-optimizer")
    if lay.zero >= 2:
        strategy = "optim_grads" if lay.zero == 2 else "optim_grads_params"
        args += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", strategy, "--ckpt-format", "fsdp_dtensor"]
    if lay.zero >= 1 and lay.dp_replicate > 1:
        args += ["--num-distributed-optimizer-instances", str(lay.dp_replicate)]
    if lay.dp * lay.cp > 1 and plan.inputs.workload.overlap_dp_comm:
        args.append("--overlap-grad-reduce")
        if lay.zero >= 1:
            args.append("--overlap-param-gather")
    row = layout_to_row(lay)  # the first of Megatron's orders that gives the plan's rank grid (megatron.mesh-order)
    args += next((a for o, a in zip(SEARCHED_ORDERS, ORDER_ARGS) if order_allowed(row, (o,))[0]), [])
    args += model_args(plan)
    return args, warnings


def environment(plan: Plan) -> dict[str, str]:
    """Environment variables Megatron needs for this layout."""
    lay = plan.layout
    return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if (lay.tp > 1 or lay.cp > 1) and lay.zero < 2 else {}


def export(plan: Plan, *, rdzv_port: int = 29500, **_: Any) -> ExportResult:
    args, warnings = arguments(plan)
    lay = plan.layout
    text = ("#!/usr/bin/env bash\n" + header(plan, PROFILE) + "set -euo pipefail\n"
            f"# Megatron derives DP = world / (TP x PP x CP) = {plan.world_size} / ({lay.tp} x {lay.pp} x {lay.cp}) "
            f"= {lay.dp}: launch {plan.world_size} ranks.\n"
            f"# Run from a Megatron-LM core_v0.19.0 checkout (MEGATRON_LM, default .); add data and tokenizer "
            f"arguments after the script's name (the plan assumes a vocabulary of {plan.inputs.model.vocab_size}).\n")
    for key, value in environment(plan).items():
        text += f"export {key}={value}  # TP/CP communication kernels keep their issue order\n"
    text += shell_array("MEGATRON_ARGS", args)
    text += torchrun(launch_shape(plan), '"${MEGATRON_LM:-.}/pretrain_gpt.py"', rdzv_port) + ' "${MEGATRON_ARGS[@]}" "$@"\n'
    return ExportResult("megatron", text, tuple(warnings))
