"""Validate the cost model against published large-scale training runs.

    .venv/bin/python benchmarks/published_runs.py [--cases ID,ID,...] [--sources KEY,...] [--csv FILE] [--no-cv]
                                                  [--write-validated]

Reads benchmarks/data/published_runs.yaml (published_cases.py: every case with its source, exact quote, layout and
the derivation of its step time). For each case: build the model, the cluster and the workload with the source
framework's behaviour (FRAMEWORKS below); pin the published layout (TP, PP, DP, CP, EP) and everything else the
source states (micro-batch, schedule, interleaving, ZeRO stage, recomputation, sequence parallelism) inside the
framework's feature set; let the planner search the rest; predict the step time with the framework's own layer split
over pipeline stages (published_partitions.py). The published step time follows from what the source states with the
source's own FLOP accounting (published_step_times.py). --write-validated replaces the planner's validated runs
(planner/validation/validated_runs.json: the exact cases' features and errors, from which error bands and
extrapolations are computed; benchmarks/validated_runs.py).

Per case it prints the published and predicted step time and the error; `spread`, the prediction's range over the
settings the source leaves unstated (micro-batch, interleaving degree); the rank of the published layout (1 + the
number of other (tp, pp, dp, cp, ep) shapes predicted strictly faster with the same stated knobs; ">N": at least N
faster); the planner's own pick inside the framework's feature set and its claimed gain over the published layout;
the pick's `extrapolations` when the planner reports them; and `status`: exact, or the kinds of the case's gaps
(what meshplan cannot represent about the run). Then group summaries (published_summary.py), the cases whose claimed
gain exceeds the issue's 10 % bar without a sourced reason their layout is suboptimal (`known_suboptimal` in the
data file) and, unless --no-cv,
the cross-validation of one refitted constant (validation.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from typing import Any, get_args

import pandas as pd
import validated_runs
from published_cases import (
    DATA,
    PublishedRun,
    build_cluster,
    build_model,
    framework_name,
    load_runs,
    source_key,
)
from published_columns import layout_label, published_rank, unstated_spread
from published_partitions import framework_builds, with_framework_partition
from published_step_times import step_time_s, uncertainty_pct
from published_summary import GAIN_BAR_PCT
from pydantic import ValidationError

from planner.api import (
    best_rank_layers,
    build_plan,
    evaluate,
    plans_from_result,
    row_to_layout,
    search_result,
)
from planner.layout import RECOMPUTE_NAMES, Workload
from planner.layout.names import RECOMPUTE_EVERY
from planner.layout.schedules import ScheduleCode
from planner.solver.space import SearchLimits

# Stage-boundary sends: Megatron-LM's --overlap-p2p-communication was an opt-in store_true flag in 2023 (its
# arguments.py then; the 2023 frameworks below block on P2P) and on by default in Megatron-Core 2024-2025.
# What each source's software could do: the published layout is pinned inside it, and the planner's own search
# (for the rank and the pick) runs over the same feature set, so a layout is never ranked against options its
# framework lacked. Every entry is a historical release (none is a current framework profile of planner/frameworks,
# whose `search_entry()` gives this shape); each entry names its source. Searches run with framework="any".
FRAMEWORKS: dict[str, dict[str, Any]] = {
    "megatron-lm-2021": {
        # Narayanan et al. 2021 / Megatron-LM v2 (2021): 1F1B and interleaved schedules (Sec. 2.2), full activation
        # checkpointing only (selective recompute and sequence parallelism arrived with Korthikanti et al. 2022),
        # plain data parallelism (no distributed optimizer), the local DDP all-reducing gradients after the last
        # backward (not overlapped), unfused attention (no FlashAttention, 2022); no context or expert parallelism.
        # With fewer micro-batches than stages its 1F1B runs as GPipe does (megatron/schedules.py at 50a4b5fa02:
        # `num_warmup_microbatches = min(num_warmup_microbatches, num_microbatches)`: every forward, then every
        # backward), meshplan's only schedule for m < pp.
        "features": {"schedule": ("1f1b", "interleaved", "gpipe"), "recompute": ("none", "full"), "zero": 0,
                     "sequence_parallel": False, "cp": 1, "ep": 1},
        # fp16 with loss scaling (the 2021 example scripts pass --fp16: examples/pretrain_gpt3_175B.sh, quoted in the
        # GPT-3 175B case), stage-boundary sends blocking (--overlap-p2p-communication came with Megatron-Core), no
        # gradient-accumulation fusion (--gradient-accumulation-fusion arrived 2022-02-13, Megatron-LM 83b1e42f; the
        # April 2021 DDP hook adds each micro-batch's gradient into main_grad, aed2f75e megatron/model/distributed.py).
        "workload": {"flash_attention": False, "overlap_dp_comm": False, "runtime": "megatron", "dtype": "fp16",
                     "overlap_pp_comm": False, "grad_accumulation_fusion": False,
                     # the column-parallel backward all-reduces after both GEMMs (_CopyToModelParallelRegion.backward,
                     # aed2f75e megatron/mpu/mappings.py); the async all-reduce came with 3f652469 (2021-09-02)
                     "async_tp_backward": False,
                     # each stage keeps its sent outputs until their backward (megatron/schedules.py at 50a4b5fa02:
                     # `output_tensors.append(output_tensor)`; deallocate_output_tensor came with c1e4526b, 2022-01)
                     "sent_stage_outputs": "kept"},
    },
    "deepspeed-2021-zero3": {
        # Narayanan et al. 2021 Table 2 baseline: DeepSpeed ZeRO-3 "without any model parallelism".
        "features": {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "zero": 3, "recompute": ("none", "full"),
                     "sequence_parallel": False},
        "workload": {"flash_attention": False, "overlap_dp_comm": True},
    },
    "megatron-core-0.8": {
        # Megatron-LM README (2024-07): Megatron-Core r0.8 with --overlap-grad-reduce --overlap-param-gather
        # (distributed optimizer) and --tp-comm-overlap (which requires sequence parallelism); 1F1B and
        # interleaved schedules (no zero-bubble schedule in Megatron-Core r0.8); FlashAttention via Transformer Engine.
        "features": {"schedule": ("1f1b", "interleaved"), "zero": (0, 1)},
        "workload": {"flash_attention": True, "overlap_dp_comm": True, "runtime": "megatron", "tp_comm_overlap": True},
    },
    "megatron-lm-2022": {
        # Korthikanti et al. 2022 Sec. 6: Megatron-LM of May 2022: sequence parallelism and selective recompute, no
        # distributed optimizer, unfused attention (FlashAttention entered Megatron-LM in Dec 2022), DP all-reduce
        # not overlapped ("we do not use any overlapping of gradient all-reduces", Sec. 6.3); no CP, no EP.
        "features": {"schedule": ("1f1b", "interleaved"), "zero": 0, "cp": 1, "ep": 1},
        "workload": {"flash_attention": False, "overlap_dp_comm": False, "runtime": "megatron", "overlap_pp_comm": False},
    },
    "megatron-lm-2023-zb": {
        # Qi et al. 2024: sail-sg's Megatron-LM fork: 1F1B, interleaved and zero-bubble schedules (ZB-1p has ZB-H1's
        # bubble in every setting, Table 5). Unfused attention: the fork's example script at the paper's commit
        # (examples/pretrain_zero_bubble.sh at 82b2eb67, 2023-12-06; its env knobs are Table 3's columns, its
        # defaults the 6.2B row: LAYERS = 4p - 2, hidden 4096, 32 heads, seq 1024) passes --fp16 but neither
        # --use-flash-attn (in no version of the script before fa0c4399, 2024-08-19) nor
        # --use-distributed-optimizer (the search may still take ZeRO-1: it changes nothing at dp 1). Table 4's own
        # memory agrees: ZB-2p minus ZB-1p (about p more micro-batches in flight) is 27 / 28 / 18 / 30 GB for
        # 1.5B / 6.2B / 14.6B / 28.3B, and p micro-batches of a middle stage's activations at sbh(34 + 5as/h)
        # (Korthikanti et al. 2022 Sec. 4.1) are 30 / 30 / 19 / 30 GB unfused, 12 / 14 / 9 / 14 GB with flash.
        "features": {"schedule": ("1f1b", "interleaved", "zb-h1"), "zero": (0, 1), "cp": 1, "ep": 1},
        "workload": {"flash_attention": False, "overlap_dp_comm": True, "runtime": "megatron", "overlap_pp_comm": False},
    },
    "megatron-lm-2023": {
        # MegaScale's baseline, Megatron-LM 285068c8 (2023-01-11): SP, distributed optimizer, selective/full recompute,
        # 1F1B and interleaved. FlashAttention is not stated (MegaScale Sec. 3.3 says only that MegaScale adopts
        # FlashAttention-2); this commit builds it behind --use-flash-attn, so the best setting is taken, as for
        # every unstated knob. That setting is FlashAttention-1 (attention_kernel flash1): the commit is the merge of
        # the FlashAttention integration, whose megatron/model/transformer.py calls flash-attn 1.x's
        # flash_attn_unpadded_func, a name flash-attn 2.0.0 dropped (its README: "flash_attn_unpadded_func ->
        # flash_attn_varlen_func"). It is faster than the unfused attention on every case here.
        # Nothing overlaps the data-parallel reduction or the stage-boundary sends: its arguments.py has neither
        # --overlap-grad-reduce (added 2023-08-16, Megatron-LM 2d5220a4) nor --overlap-p2p-communication (2023-05-31,
        # f9283c5a), and MegaScale lists DP, PP and TP overlap among its own additions (Jiang et al. 2024 Sec. 3.2,
        # Table 3: +1.5, +2.5, +2.2 MFU points over this baseline).
        "features": {"schedule": ("1f1b", "interleaved"), "zero": (0, 1), "cp": 1, "ep": 1},
        "workload": {"flash_attention": True, "overlap_dp_comm": False, "runtime": "megatron", "overlap_pp_comm": False,
                     "attention_kernel": "flash1"},
    },
    "megascale-2023": {
        # Jiang et al. 2024: Megatron-LM plus MegaScale's own optimizations, which are recorded as gaps per case.
        "features": {"schedule": ("1f1b", "interleaved"), "zero": (0, 1, 2), "cp": 1, "ep": 1},
        "workload": {"flash_attention": True, "overlap_dp_comm": True, "runtime": "megatron", "overlap_pp_comm": False},
    },
    "megatron-core-2025-moe": {
        # Liu et al. 2025 (MoE Parallel Folding) baselines: Megatron-Core with EP inside DP x CP, distributed
        # optimizer, SP, Transformer Engine attention, 1F1B / interleaved schedules.
        "features": {"schedule": ("1f1b", "interleaved"), "zero": (0, 1)},
        "workload": {"flash_attention": True, "overlap_dp_comm": True, "runtime": "megatron"},
    },
    "megatron-core-2025-moe-folding": {
        # The same with MoE Parallel Folding, which meshplan cannot represent (a gap on each such case).
        "features": {"schedule": ("1f1b", "interleaved"), "zero": (0, 1)},
        "workload": {"flash_attention": True, "overlap_dp_comm": True, "runtime": "megatron"},
    },
    "torchtitan-2024": {
        # TorchTitan (Dec 2024): FSDP2, DTensor TP with sequence parallelism, torch.distributed.pipelining (the
        # benchmark uses 1F1B and interleaved 1F1B), experimental CP, SDPA flash attention; no EP for dense Llama.
        # FSDP over a single rank (CP 8 on 8 GPUs) shards nothing: ZeRO-0.
        # AC: none, full per block or per-op selective (op); torchtitan has no attention-core recomputation.
        # SDPA's flash backend is FlashAttention-2: cuDNN attention was opt-in from torch 2.5.1 until 2.9
        # (pytorch/pytorch#138649, #162073; the December 2024 runs used a nightly of then), and TorchTitan's SDPA
        # wrapper has ranked FLASH_ATTENTION first on Hopper since (pytorch/torchtitan#1196, the June 2025 rows).
        "features": {"schedule": ("1f1b", "interleaved"), "zero": (0, 1, 2, 3), "ep": 1,
                     "recompute": ("none", "full", "op")},
        "workload": {"flash_attention": True, "overlap_dp_comm": True, "runtime": "pytorch", "attention_kernel": "flash2"},
        # What its pipeline runs when the launch sets nothing else (9dec370): the local batch split into as many
        # micro-batches as there are pipeline ranks (parallelisms/pipelining_utils.py build_pipeline_schedule:
        # `n_microbatches = ... pipeline_parallel_microbatches`, None -> `pipeline_parallel_degree`), and an
        # interleaved schedule with two stages per rank (generate_split_points: `num_stages_per_rank = 2`).
        "pipeline_defaults": {"microbatches_per_stage": 1, "stages_per_rank": 2},
    },
    "torchtitan-2024-04": {
        # TorchTitan of April 2024 (1ea476e9f, docs/performance.md's A100 tables): FSDP2 fully_shard per block (ZeRO-3,
        # MixedPrecisionPolicy param bf16 / reduce fp32) and DTensor TP with sequence parallelism; pipeline and context
        # parallelism had not landed yet. AC none / full per block, per-op selective (op), or every k-th layer
        # (selective_ac_option k: every-k). Eager (compile false in every config), SDPA flash attention, AdamW foreach.
        "features": {"pp": 1, "cp": 1, "ep": 1, "zero": 3, "recompute": ("none", "full", "op", *RECOMPUTE_EVERY)},
        "workload": {"flash_attention": True, "overlap_dp_comm": True, "runtime": "pytorch", "attention_kernel": "flash2"},
    },
    "fms-fsdp-2024": {
        # IBM fms-fsdp (7746dac, the PyTorch FSDP blog of 2024-03-13): FSDP1 FULL_SHARD or HYBRID_SHARD (ZeRO-3 over
        # all of DP or over a node), no TP/PP/CP/EP, whole-block activation checkpointing (every block, or every k-th:
        # every-k), SDPA flash attention v2, eager (use_torch_compile False), AdamW (foreach). Its bf16 gradient
        # reduction and FSDP1's flat parameters are gaps on every case.
        "features": {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "zero": 3, "recompute": ("none", "full", *RECOMPUTE_EVERY),
                     "sequence_parallel": False},
        "workload": {"flash_attention": True, "overlap_dp_comm": True, "runtime": "pytorch", "attention_kernel": "flash2"},
    },
    "automodel-2025": {
        # NVIDIA NeMo AutoModel (docs/performance-summary.md, Oct 2025 - Apr 2026), PyTorch-native: FSDP2 fully_shard per
        # decoder layer, DTensor TP, torch context_parallel (all-gather of K/V, load-balanced chunks), torch.distributed
        # .pipelining (1F1B, interleaved 1F1B), EP with DeepEP dispatch; activation checkpointing of whole blocks (or of
        # attention and MLP apart under torch.compile). Kernels per case (Transformer Engine, SDPA, torch.compile): each
        # case names its runtime and its gaps.
        "features": {"schedule": ("1f1b", "interleaved"), "zero": (1, 2, 3), "recompute": ("none", "full")},
        "workload": {"flash_attention": True, "overlap_dp_comm": True, "runtime": "pytorch-compile"},
    },
    "meta-llama3-2024": {
        # Llama 3 paper Sec. 3.3.2: FSDP without reshard after forward, TP, all-gather CP, interleaved PP.
        "features": {"schedule": ("1f1b", "interleaved"), "zero": (1, 2, 3), "ep": 1},
        "workload": {"flash_attention": True, "overlap_dp_comm": True, "runtime": "pytorch"},
    },
    "megatron-deepspeed-2021": {
        # MT-NLG 530B (Smith et al. 2022): Microsoft's Megatron-DeepSpeed as public when the model was announced
        # (2021-10-11): microsoft/Megatron-DeepSpeed ec166f1c (2021-09-02; main's next commits, 1a74a051 and 0d887558,
        # add checkpoint-conversion tools only) on DeepSpeed v0.5.4 (bc7778ea, 2021-10-06). The run's own commits are
        # not published (a gap on its cases). Megatron TP without SP (2021), DeepSpeed's pipeline engine:
        # TrainSchedule (deepspeed/runtime/pipe/schedule.py, 1F1B-like; with fewer micro-batches than stages it runs
        # as GPipe does), no interleaving, ZeRO below stage 2 only (pipe/engine.py line 56: "ZeRO-2 and ZeRO-3 are
        # incompatible with pipeline parallelism"); --checkpoint-activations / --deepspeed-activation-checkpointing
        # (megatron/arguments.py lines 396, 809 at ec166f1c): full recomputation or none; unfused attention.
        "features": {"schedule": ("1f1b", "gpipe"), "zero": (0, 1), "recompute": ("none", "full"), "sequence_parallel": False,
                     "cp": 1, "ep": 1},
        # Gradients are reduced once, at the flush (pipe/engine.py _exec_reduce_grads -> engine.allreduce_gradients:
        # at the accumulation boundary, ZeRO-1's reduce_gradients, which reduce-scatters by default,
        # zero/constants.py ZERO_OPTIMIZATION_REDUCE_SCATTER_DEFAULT = True, overlap_comm default False).
        # Stage-boundary sends block (pipe/p2p.py send: `assert async_op == False`). No gradient-accumulation
        # fusion: the fork has no such flag at ec166f1c, and the DeepSpeed engine leaves each micro-batch's weight
        # gradient to autograd's accumulation into .grad.
        "workload": {"flash_attention": False, "overlap_dp_comm": False, "runtime": "megatron", "overlap_pp_comm": False,
                     "zero1_grad_allreduce": False, "grad_accumulation_fusion": False,
                     # _CopyToModelParallelRegion.backward all-reduces the input gradient after both GEMMs
                     # (megatron/mpu/mappings.py line 88 at ec166f1c): no async all-reduce
                     "async_tp_backward": False,
                     # DeepSpeed's pipeline engine keeps this TP rank's 1/tp slice of each sent output until its
                     # backward (pipe/engine.py _exec_forward_pass; planner/cost/runtime.py)
                     "sent_stage_outputs": "kept-tp-shard"},
    },
    "megatron-deepspeed-2022": {
        # BLOOM (bigscience tr11 README): Megatron TP without SP, DeepSpeed's pipeline engine (1F1B), BF16_Optimizer
        # ZeRO-1, DeepSpeed activation checkpointing, unfused attention (2022); gradients reduced after the flush.
        # With fewer micro-batches than stages its schedule runs as GPipe does (meshplan's only schedule for m < pp).
        "features": {"schedule": ("1f1b", "gpipe"), "zero": (0, 1), "recompute": ("none", "full"), "sequence_parallel": False,
                     "cp": 1, "ep": 1},
        # BF16_Optimizer all-reduces the whole fp32 gradient (DeepSpeed engine.allreduce_gradients ->
        # buffered_allreduce_fallback(get_grads_for_reduction())), then all-gathers the bf16 weights.
        "workload": {"flash_attention": False, "overlap_dp_comm": False, "runtime": "megatron", "overlap_pp_comm": False,
                     "zero1_grad_allreduce": True,
                     # its ColumnParallelLinear all-reduces the input gradient in _CopyToModelParallelRegion.backward,
                     # after both GEMMs (131bd43e, 2022-06, megatron/mpu/layers.py line 333): no async all-reduce
                     "async_tp_backward": False,
                     # the pipeline engine keeps this TP rank's 1/tp slice of each sent output until its backward
                     # (deepspeed/runtime/pipe/engine.py _exec_forward_pass at 2151c787a: planner/cost/runtime.py)
                     "sent_stage_outputs": "kept-tp-shard"},
    },
    "megatron-deepspeed-2022-02": {
        # BigScience's tr11 design runs of February 2022 (chronicles-prequel.md, before 02-28): the same fork with
        # fp16 and DeepSpeed's ZeRO stage-1 optimizer instead of BF16_Optimizer. The pipeline engine calls its
        # reduce_gradients at the flush (engine.py allreduce_gradients, DeepSpeed 2151c787a), which reduce-scatters
        # the fp16 gradients (stage_1_and_2.py: reduce_scatter=True, communication_data_type float16; overlap_comm
        # off in the run's config); the layer split is partition_method 'type:transformer' (published_partitions).
        "features": {"schedule": ("1f1b", "gpipe"), "zero": (0, 1), "recompute": ("none", "full"), "sequence_parallel": False,
                     "cp": 1, "ep": 1},
        "workload": {"flash_attention": False, "overlap_dp_comm": False, "runtime": "megatron", "overlap_pp_comm": False,
                     "zero1_grad_allreduce": False, "async_tp_backward": False, "sent_stage_outputs": "kept-tp-shard"},
    },
    "metaseq-2022": {
        # OPT (metaseq opt_baselines.py): FSDP (ZeRO-2-like without reshard after forward) + Megatron TP, no SP, no
        # PP, activation checkpointing, unfused attention (2022).
        "features": {"pp": 1, "cp": 1, "ep": 1, "zero": (2, 3), "recompute": ("none", "full"), "sequence_parallel": False},
        "workload": {"flash_attention": False, "overlap_dp_comm": True, "runtime": "pytorch"},
    },
    "composer-fsdp-2023": {
        # MosaicML llm-foundry MPT benchmarks (scripts/train/benchmarking, 2023): Composer's FSDP1 FULL_SHARD over every
        # GPU (ZeRO-3: one FlatParameter per MPTBlock, resharded after forward, all-gathered again for backward,
        # gradients reduce-scattered after every micro-batch's backward: Composer's ddp_sync_context applies no_sync
        # to DDP only), no TP/PP/CP/EP, activation checkpointing of whole blocks when stated, eager PyTorch.
        # Attention: attn_impl 'triton' (submit_benchmarks.py default), MPT's Triton FlashAttention (flash-attn v1
        # era): fused, causal blocks skipped. fp32 master weights under amp_bf16 and PURE alike (FSDP keeps the fp32
        # FlatParameter shard; MixedPrecision param_dtype bf16 casts the gathered copy); DecoupledAdamW, a per-tensor
        # loop over the flat shards (composer/optim/decoupled_weight_decay.py): AdamW's bytes; gradient-norm clipping
        # 1.0 via FSDP clip_grad_norm_ (yamls). Gradient reduction dtype: fp32 with mixed_precision DEFAULT in
        # Composer 0.16 (the runtime's default), bf16 with PURE (a gap on those cases). The Triton kernel is costed as
        # FlashAttention-2 (attention_kernel flash2), the nearest kernel the model knows: FlashAttention-2 reports
        # itself faster than the Triton FlashAttention (Dao 2023, Sec. 4.1), so this stays a lower bound on Hopper.
        "features": {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "zero": 3, "recompute": ("none", "full"),
                     "sequence_parallel": False},
        "workload": {"flash_attention": True, "overlap_dp_comm": True, "runtime": "pytorch", "attention_kernel": "flash2"},
    },
    "deepseek-v3-2024": {
        # DeepSeek-V3 report Sec. 3.2: PP + EP + ZeRO-1 DP, no TP; DualPipe and FP8 are gaps on the case.
        "features": {"schedule": ("1f1b", "interleaved", "zb-h1"), "zero": (0, 1), "cp": 1, "tp": 1},
        "workload": {"flash_attention": True, "overlap_dp_comm": True, "runtime": "megatron"},
    },
}


SPLIT_CANDIDATES = 1024
"""How many of the search's best rows are checked for a layer split the case's framework can build (92 layers,
Megatron-Core 119B, need about a thousand: every row above the first buildable one pipelines 92 layers unevenly)."""


def framework_features(name: str) -> dict[str, Any]:
    """The feature set the pick and the rank search over for framework `name`. An entry that names no recompute
    policies runs the layer-level ones, not per-op selective checkpointing ("op", TorchTitan's and meshplan's) nor
    every k-th layer (every-k), which the entries whose software has them name themselves: none and full, and
    selective where attention is unfused (with FlashAttention selective saves nothing and an unpinned search prunes
    it as dominated, so naming it would only add rows)."""
    entry = FRAMEWORKS[name]
    flash = entry["workload"].get("flash_attention", True)
    layer_level = tuple(r for r in RECOMPUTE_NAMES
                        if r != "op" and r not in RECOMPUTE_EVERY and not (flash and r == "selective"))
    return {"recompute": layer_level, **entry["features"]}


def _framework(case: PublishedRun) -> dict[str, Any]:
    name = framework_name(case)
    return {**FRAMEWORKS[name], "features": framework_features(name)}


def _stated(case: PublishedRun) -> dict[str, Any]:
    """Every knob other than the parallel shape that the source states (or its framework fixes)."""
    par = case.parallelism
    stated: dict[str, Any] = dict(_framework(case)["features"])
    if case.framework is None:  # first-round cases: their stated knobs, as read from the sources then
        if case.id.startswith("narayanan2021") and par.pp > 1 and "ZeRO-3" not in case.id:
            # Sec. 5.1: all Table 1 runs use the interleaved schedule (v not stated); a row that pins another
            # (39.1B at pp 2, which the released code refused to interleave) says why in its schedule_note.
            stated["schedule"] = par.schedule or "interleaved"
        if case.id.startswith("megatron_gpt3") and par.pp > 1:
            stated["schedule"] = "1f1b"  # examples/pretrain_gpt3_175B.sh sets no virtual pipeline stages
        setting = str(case.recompute.setting or "")
        if setting.startswith("full") or "Eq.3 accounting assumes recompute" in setting:
            # Table 2 does not state it per row, but its FLOP accounting (Eq. 3) counts full recomputation.
            stated["recompute"] = "full"
        if case.id.startswith("megatron_core"):
            stated["zero"] = 1  # --overlap-param-gather implies the distributed optimizer
    else:
        if par.schedule and par.pp > 1:
            stated["schedule"] = par.schedule
        if par.vpp:
            stated["virtual_stages"] = par.vpp
        if par.zero is not None:
            stated["zero"] = par.zero
        if par.sequence_parallel is not None and par.tp > 1:
            stated["sequence_parallel"] = par.sequence_parallel
        if case.recompute.policy:
            policy = case.recompute.policy
            stated["recompute"] = tuple(policy) if isinstance(policy, list) else policy
        if par.dp_shard:
            stated["dp_shard"] = par.dp_shard
    defaults = FRAMEWORKS[framework_name(case)].get("pipeline_defaults")
    if defaults and par.pp > 1:
        # The framework's own choice where the source states none (`pipeline_defaults`): a setting its software
        # made, not one the source left open.
        local_batch = case.batch.global_batch_seqs // par.dp
        stated["micro_batch"] = max(local_batch // (defaults["microbatches_per_stage"] * par.pp), 1)
        if stated.get("schedule") == "interleaved" and not par.vpp:
            stated["virtual_stages"] = defaults["stages_per_rank"]
    if case.batch.micro_batch:
        stated["micro_batch"] = case.batch.micro_batch
    return stated


def _chunk_limit(case: PublishedRun, model: Any, work: Workload, pins: dict[str, Any]) -> dict[str, int]:
    """{"max_virtual_stages": v} when the published layout's framework builds interleaving on its stages only at
    v chunks or more, past the search's limit (SearchLimits.max_virtual_stages), with v the smallest it builds;
    the stated v when the source states one past that limit (NeMo's Nemotron-4 340B: 12 chunks of one layer on 8
    stages); else nothing. The published layout's unstated interleaving then ranges over what its framework could run."""
    pp, limit = int(pins["pp"]), SearchLimits().max_virtual_stages
    schedule, stated_v = pins.get("schedule"), pins.get("virtual_stages")
    if stated_v:
        return {"max_virtual_stages": int(stated_v)} if int(stated_v) > limit else {}
    interleaves = "interleaved" in (schedule if isinstance(schedule, tuple) else (schedule,)) or schedule is None
    if pp == 1 or not interleaves:
        return {}
    def built(v: int) -> bool:
        return framework_builds(framework_name(case), model.num_layers, pp, v, ScheduleCode.INTERLEAVED, work)
    if any(built(v) for v in range(2, limit + 1)):
        return {}
    beyond = [v for v in range(limit + 1, model.num_layers // pp + 1) if built(v)]
    return {"max_virtual_stages": beyond[0]} if beyond else {}


def _pins(case: PublishedRun) -> dict[str, Any]:
    """The published layout inside its framework: the stated knobs plus the published TP, PP, DP, CP, EP."""
    par = case.parallelism
    pins = {**_stated(case), "tp": par.tp, "pp": par.pp, "dp": par.dp, "cp": par.cp, "ep": par.ep}
    if case.id.startswith("megatron_core") and par.tp > 1:
        pins["sequence_parallel"] = True  # --tp-comm-overlap requires sequence parallelism
    return pins


def workload(case: PublishedRun) -> Workload:
    """The step as the source ran it; a runtime meshplan does not know (yet) falls back to the framework's."""
    options = dict(_framework(case)["workload"])
    if case.runtime in get_args(Workload.model_fields["runtime"].annotation):
        options["runtime"] = case.runtime
    if case.tp_comm_overlap is not None:
        options["tp_comm_overlap"] = case.tp_comm_overlap
    for field in ("grad_reduce_dtype", "master_weights", "optimizer_state_dtype"):
        if getattr(case, field) is not None:
            options[field] = getattr(case, field)
    dtype = case.precision or options.pop("dtype", "bf16")  # the case's precision, else its framework's
    options.pop("dtype", None)
    return Workload(global_batch=case.batch.global_batch_seqs, seq_len=case.model.seq_len, dtype=dtype, **options)


def run_case(case: PublishedRun) -> dict[str, Any]:
    model, cluster, work = build_model(case), build_cluster(case), workload(case)
    pins = _pins(case)
    published, derivation = step_time_s(case, model)
    t0 = time.perf_counter()
    chunk_limit = _chunk_limit(case, model, work, pins)
    pinned_ctx, pinned = search_result(model, cluster, work, top=1, framework="any", **pins, **chunk_limit)
    par = case.parallelism
    row: dict[str, Any] = {
        "case": case.id, "source": source_key(case), "framework": framework_name(case), "gpu": case.hardware.gpu[:4],
        "gpus": case.hardware.num_gpus,
        "layout": f"tp{par.tp} pp{par.pp} dp{par.dp}" + (f" cp{par.cp}" if par.cp > 1 else "") + (f" ep{par.ep}" if par.ep > 1 else ""),
        "published_s": published, "truth_pct": uncertainty_pct(case), "derivation": derivation,
        "status": "exact" if not case.gaps else "gaps:" + ",".join(sorted({g.kind for g in case.gaps})),
        "suboptimal_source": case.known_suboptimal.source if case.known_suboptimal else "",
    }
    nan_gain = {"gain_pct": float("nan"), "unexplained_gain_pct": float("nan")}
    if len(pinned.step_time_s) == 0 and pinned.best_infeasible is None:
        # No valid layout (see the case's gaps), or even fully sharded model states exceed the GPU.
        states_too_big = 0 < pinned.stats.shapes_total == pinned.stats.shapes_memory_pruned
        return {**row, "predicted_s": float("nan"), "error_pct": float("nan"), "spread_lo_s": float("nan"),
                "spread_hi_s": float("nan"), "rank": "OOM states" if states_too_big else "no layout", "pick": "",
                **nan_gain, "extrapolations": "", "search_s": time.perf_counter() - t0}
    if len(pinned.step_time_s) == 0:
        # The published layout does not fit meshplan's memory model (the run did fit): still predict its time, at
        # the least-memory unstated settings, and say so in the rank column.
        least, peak = pinned.best_infeasible
        plan = evaluate(model, cluster, work, row_to_layout(least, None), allow_oom=True, framework="any")
        pred = plan.prediction.step_time_s
        # The run ran, so its step time still validates the cost model (Narayanan's 1T layout lies inside the
        # planning reserve, not beyond the GPU): recorded like any exact row, at the setting predicted.
        validated = None
        if validated_runs.validates(framework_name(case), pred, exact=not case.gaps):
            validated = validated_runs.record(case.id, source_key(case), framework_name(case), pinned_ctx, least,
                                              published, pred)
        return {**row, "predicted_s": pred, "error_pct": 100 * (pred - published) / published, "spread_lo_s": pred,
                "spread_hi_s": pred, "rank": f"OOM {peak / 2**30:.0f}GiB", "pick": "", **nan_gain,
                "extrapolations": "", "search_s": time.perf_counter() - t0, "validated": validated}
    # The published layout (at its best unstated settings) and the framework's own pick, each with the framework's
    # layer split over pipeline stages (published_partitions.py).
    framework = framework_name(case)

    def recost(table_row: dict[str, int]) -> float:
        plan = build_plan(pinned_ctx, table_row, best_rank_layers(pinned_ctx, table_row), proven=False)
        return with_framework_partition(plan, framework, model, cluster, work).prediction.step_time_s

    def builds(table_row: dict[str, int]) -> bool:
        return framework_builds(framework, model.num_layers, table_row["pp"], table_row["v"], table_row["sched"], work)

    # The published layout at the unstated settings its framework builds. Where its framework's split allows
    # interleaving only past the search's chunk limit (Megatron-Core 119B: 92 layers on 4 stages interleave only
    # as 23 chunks of one layer), the smallest such degree is searched too, so the run's interleaving option stays.
    lo, hi, _ = unstated_spread(model, cluster, work, {**pins, **chunk_limit}, recost, builds)
    pred = lo
    rank = published_rank(model, cluster, work, _stated(case), pred, (par.tp, par.pp, par.dp, par.cp, par.ep))
    def best_s(**features: Any) -> tuple[Any, Any]:
        # The best row the framework can build: the search's layer split is free, the framework's is not
        # (published_partitions.framework_builds), so take the first of the best rows it can build.
        ctx, found = search_result(model, cluster, work, top=SPLIT_CANDIDATES, framework="any", **features)
        rows = [i for i in range(len(found.step_time_s))
                if builds({k: int(col[i]) for k, col in found.table.items()})] or [0]
        found = dataclasses.replace(found, table={k: col[rows[:1]] for k, col in found.table.items()},
                                    step_time_s=found.step_time_s[rows[:1]],
                                    score=None if found.score is None else found.score[rows[:1]])
        return found, with_framework_partition(plans_from_result(ctx, found)[0], framework, model, cluster, work)

    pick, plan = best_s(**_framework(case)["features"])
    gain = 100 * (pred / plan.prediction.step_time_s - 1)
    extrapolations = getattr(plan.prediction, "extrapolations", None)  # reported by planners that know them
    validated = None
    if validated_runs.validates(framework, pred, exact=not case.gaps):
        validated = validated_runs.record(case.id, source_key(case), framework, pinned_ctx,
                                          {k: int(v[0]) for k, v in pinned.table.items()}, published, pred)
    return {**row, "predicted_s": pred, "error_pct": 100 * (pred - published) / published, "spread_lo_s": lo,
            "spread_hi_s": hi, "rank": rank, "pick": layout_label(pick.table), "gain_pct": gain,
            "unexplained_gain_pct": unexplained_gain_pct(case, gain, pred, published, best_s),
            "extrapolations": "; ".join(map(str, extrapolations)) if extrapolations else ("none" if extrapolations is not None else "n/a"),
            "search_s": time.perf_counter() - t0, "validated": validated}


def unexplained_gain_pct(case: PublishedRun, gain_pct: float, predicted_s: float, published_s: float,
                         best_s: Callable[..., tuple[Any, Any]]) -> float:
    """The part of the pick's claimed gain that the case's sourced reason (known_suboptimal) does not explain.

    No reason: the whole gain. `knob`: the pick's gain with that setting (or each listed setting) held at its
    published value (what the pick gains by other means); `pp` holds the published pipeline size, so a layout the
    source measured slower (a deep pipeline where data parallelism fits) is not counted against the model.
    `faster_case`: the claim (with the knobs held, when the reason has both) beyond the speed-up the source
    measured for its fastest alternative (ratios, so the model's common bias cancels); `fastest_measured` follows
    the chain of faster cases, since a run measured faster than the faster case is measured faster than this one
    too. A faster case at another batch (the same layout at the batch it was sized for) is compared per sequence:
    the claim is a time per sequence too, and one at this batch beyond what the hardware measured at the larger
    batch would be the model's doing."""
    why = case.known_suboptimal
    if why is None or not gain_pct > GAIN_BAR_PCT:
        return gain_pct
    if why.knobs:
        _, held = best_s(**{**_framework(case)["features"], **held_values(case)})
        gain_pct = 100 * (predicted_s / held.prediction.step_time_s - 1)
    if why.faster_case is None:
        return gain_pct
    faster = fastest_measured(case)
    measured = published_s / step_time_s(faster, build_model(faster))[0]
    measured *= faster.batch.global_batch_seqs / case.batch.global_batch_seqs  # per sequence (1 at equal batches)
    return 100 * ((1 + gain_pct / 100) / measured - 1)


def held_values(case: PublishedRun) -> dict[str, Any]:
    """The published value of each setting the case's `known_suboptimal.knob` holds: a stated setting or the
    published pipeline size."""
    stated = _stated(case)
    return {knob: case.parallelism.pp if knob == "pp" else stated[knob] for knob in case.known_suboptimal.knobs}


def fastest_measured(case: PublishedRun) -> PublishedRun:
    """The end of the case's chain of measured faster alternatives (`known_suboptimal.faster_case`).

    Liu et al. 2025 Table 3 measures TP x EP slower than Megatron-Core, and Megatron-Core slower than Megatron-Core
    with folding, on the same model, batch and GPUs: the TP x EP run's fastest measured alternative is the folded
    one. Each link is a measured comparison (test_known_suboptimal_reasons_name_a_measured_comparison)."""
    by_id = {c.id: c for c in load_runs().cases}
    seen = {case.id}
    while case.known_suboptimal is not None and case.known_suboptimal.faster_case is not None:
        case = by_id[case.known_suboptimal.faster_case]
        if case.id in seen:
            raise ValueError(f"known_suboptimal.faster_case chain loops at {case.id}")
        seen.add(case.id)
    return case


def select(ids: list[str] | None = None, sources: list[str] | None = None) -> list[PublishedRun]:
    return [c for c in load_runs().cases
            if (ids is None or c.id in ids) and (sources is None or source_key(c) in sources)]


def run(ids: list[str] | None = None, sources: list[str] | None = None) -> pd.DataFrame:
    return pd.DataFrame([run_case(c) for c in select(ids, sources)])


def main(argv: list[str] | None = None) -> int:
    from published_summary import print_report

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", help="comma-separated case ids (default: all)")
    ap.add_argument("--sources", help="comma-separated source keys (default: all)")
    ap.add_argument("--csv", help="also write the per-case table as CSV")
    ap.add_argument("--no-cv", action="store_true", help="skip the cross-validation section (validation.py)")
    ap.add_argument("--write-validated", action="store_true",
                    help="replace planner/validation/validated_runs.json with this run's validated cases (all cases)")
    args = ap.parse_args(argv)
    if args.write_validated and (args.cases or args.sources):
        ap.error("--write-validated needs every case (drop --cases/--sources)")
    ids, sources = (args.cases.split(",") if args.cases else None), (args.sources.split(",") if args.sources else None)
    try:
        cases = load_runs().cases
    except ValidationError as exc:
        first = exc.errors()[0]
        print(f"{DATA}: {'.'.join(map(str, first['loc']))}: {first['msg']} ({exc.error_count()} error(s))", file=sys.stderr)
        return 2
    unknown = sorted(set(ids or ()) - {c.id for c in cases}) + sorted(set(sources or ()) - {source_key(c) for c in cases})
    if unknown:
        print(f"unknown case id or source key: {', '.join(unknown)}; see {DATA}", file=sys.stderr)
        return 2
    df = run(ids, sources)
    validated = df.pop("validated") if "validated" in df else None
    print_report(df)
    if args.write_validated and validated is not None:
        validated_runs.write([v for v in validated if isinstance(v, validated_runs.ValidatedRun)],
                             "benchmarks/published_runs.py --write-validated")
    if args.csv:
        df.to_csv(args.csv, index=False)
    if not args.no_cv:
        from validation import print_cross_validation

        print_cross_validation(df)
    return 0


if __name__ == "__main__":
    sys.exit(main())
