"""`CostContext`: the scalars of one (model, cluster, workload) that every cost term reads.

Built once per search; it condenses the `ModelSpec` into per-layer-type tables (dense and MoE layers differ)
of GEMM FLOPs per token, parameters and activation sizes, and reads the GPU numbers from the cluster's
profile, so the vectorised terms never call back into Python objects per row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from planner.cost import optimizer_state
from planner.cost.efficiency import FLASH2_SPEEDUP_OVER_FLASH1, SUSTAINED_FRACTION_OF_ISOLATED
from planner.cost.runtime import megatron_grad_buffer_16bit, megatron_grad_buffer_fp32, runtime_costs
from planner.layout import Workload, rules
from planner.layout.workload import UNQUANTIZED_MATMUL_DTYPE
from planner.model import ModelSpec
from planner.model.flops import gemm_tp_split, op_recomputed_share

# Mixed-precision Adam bytes per parameter (Rajbhandari et al. 2020, ZeRO, Sec. 3.1 and Fig. 1):
# 2 (bf16/fp16 weights) + 2 (16-bit gradients) + K=12 (fp32 master weights, momentum, variance).
WEIGHT_BYTES_16BIT = 2
GRAD_BYTES_16BIT = 2
# Megatron's bf16 runs keep their contiguous gradient buffer (`main_grad`) in fp32 unless --grad-reduce-in-bf16:
# arguments.py sets accumulate_allreduce_grads_in_fp32 for bf16 ("bfloat16 requires gradient accumulation and
# all-reduce to be done in fp32") and megatron/core/distributed/param_and_grad_buffer.py allocates the buffer in
# torch.float then; Megatron-LM docs/distrib_optimizer.md's table counts it: "bf16 param, fp32 grads: 18 bytes per
# parameter, 6 + 12/d with the distributed optimizer" (d = data-parallel size).
GRAD_BYTES_MEGATRON_FP32_BUFFER = 4
OPTIMIZER_BYTES_MIXED = 12  # fp32 master + Adam m + Adam v (ZeRO paper's K = 12)
# Megatron's fp16 optimizer keeps an fp32 copy of every 16-bit gradient next to the fp32 master weights:
# Float16OptimizerWithFloat16Params._copy_model_grads_to_main_grads does `main_param.grad = model_param.main_grad
# .float()` (megatron/optimizer/optimizer.py at aed2f75e, 2021-04); with fp16 gradient buffers (fp16 runs do not
# accumulate in fp32) `.float()` allocates 4 B per parameter, and that Megatron's zero_grad skipped
# fp32_from_float16_groups, so the copies stayed allocated through the next step's forward and backward (freed there
# only from 4e64903d, 2021-07-12). The distributed optimizer makes the same copy of its shard (sharded like the
# optimizer state). Counted as optimizer state for the megatron runtime in fp16: exact for the 2021 stack, and for
# later releases the peak of the optimizer step (states plus the copy) that the activations no longer share.
FP16_OPTIMIZER_GRAD_COPY_BYTES = 4
# Without mixed precision (fp32 training, e.g. CPU runs): 4 weights + 4 grads + 8 (m, v).
WEIGHT_BYTES_FP32 = 4
GRAD_BYTES_FP32 = 4
OPTIMIZER_BYTES_FP32 = 8




@dataclass(frozen=True)
class LayerType:
    """One kind of decoder layer (dense or MoE) as the cost terms need it."""

    count: int
    dense_params: int  # parameters replicated across EP (attention, norms, dense MLP / shared experts, router)
    expert_params: int  # routed-expert parameters (sharded by EP)
    gemm_flops_per_token: tuple[float, ...]  # forward FLOPs per token of each weight GEMM at tp=1
    gemm_split_by_tp: tuple[bool, ...]
    gemm_column_parallel: tuple[bool, ...]
    """Per GEMM: split over tp and reading the layer's hidden input (Megatron's column-parallel QKV and MLP-up
    projections), whose input gradient the backward reduces over TP (comm.tp_backward_exposed_s)."""
    gemm_op_recompute_share: tuple[float, ...]
    """Per GEMM: the share of it recompute policy "op" repeats (planner.model.flops.op_recomputed_share; the router is always
    repeated, the routed experts' GEMMs by `expert_op_recompute_share`)."""
    expert_op_recompute_share: float
    router_flops_per_token: float
    expert_flops_per_token: float  # top_k routed experts, forward, per token (tp=1)
    expert_gemm_flops_per_token_one_expert: float  # one expert's GEMMs, per routed token
    attn_flops_per_token: float  # attention core (QK^T and AV), forward, per token, at the workload seq len
    attn_recompute_flops_per_token: float  # what selective recomputation redoes (Korthikanti 2022 Sec. 4.2)


@dataclass
class CostContext:
    """Everything the vectorised cost terms need, computed once per (model, cluster, workload)."""

    model: ModelSpec
    cluster: Any  # hardware_profiles.Cluster
    workload: Workload
    topology: Any  # planner.topology.Topology
    flash_attention: bool | None = None  # None: the workload's setting
    dropout: bool | None = None  # None: GPT-style (layernorm) models have dropout, Llama-style do not
    framework: str = rules.DEFAULT_FRAMEWORK  # whose rules the search keeps to (planner.layout.rules.rules_for)
    layer_types: list[LayerType] = field(default_factory=list)
    layer_type_of: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.flash_attention is None:
            self.flash_attention = self.workload.flash_attention
        if self.dropout is None:
            self.dropout = self.model.norm == "layernorm"
        self._build_layer_types()

    # Model condensation ------------------------------------------------------------------------
    def _build_layer_types(self) -> None:
        m, s = self.model, self.workload.seq_len
        keys: dict[bool, int] = {}
        for i in range(m.num_layers):
            moe = bool(m.is_moe_layer(i))
            if moe not in keys:
                keys[moe] = len(self.layer_types)
                self.layer_types.append(self._layer_type(i, s))
            self.layer_type_of.append(keys[moe])
        counts = np.bincount(self.layer_type_of, minlength=len(self.layer_types))
        self.layer_types = [
            LayerType(**{**lt.__dict__, "count": int(c)}) for lt, c in zip(self.layer_types, counts)
        ]

    def _layer_type(self, i: int, seq_len: int) -> LayerType:
        m = self.model
        causal = self.flash_attention
        fl = m.layer_forward_flops(i, seq_len, causal=causal)
        flops, split, column, op_share = [], [], [], []
        expert_op_share = 0.0
        for name, mm, k, n, share in op_recomputed_share(m, bool(m.is_moe_layer(i))):
            if name.startswith(("moe_expert", "moe_router")):
                expert_op_share = share if name.startswith("moe_expert") else expert_op_share
                continue  # routed experts and the router are costed separately below
            op_share.append(share)
            flops.append(2.0 * mm * k * n)
            # Megatron split (planner.model.flops.gemm_tp_split): all but the MLA down-projections split over tp;
            # the column-parallel ones that read the hidden state reduce their input gradient over TP.
            kind = gemm_tp_split(name)
            split.append(kind != "replicated")
            column.append(kind == "column" and k == m.hidden_size)
        expert_total = float(getattr(fl, "moe_experts", 0.0))
        moe = m.moe if m.is_moe_layer(i) else None
        one_expert = expert_total / moe.top_k if moe else 0.0
        attn = float(fl.attn_scores)
        return LayerType(
            count=0,
            dense_params=int(m.layer_dense_params(i)),
            expert_params=int(m.layer_expert_params(i)),
            gemm_flops_per_token=tuple(flops),
            gemm_split_by_tp=tuple(split),
            gemm_column_parallel=tuple(column),
            gemm_op_recompute_share=tuple(op_share),
            expert_op_recompute_share=expert_op_share,
            router_flops_per_token=float(getattr(fl, "moe_router", 0.0)),
            expert_flops_per_token=expert_total,
            expert_gemm_flops_per_token_one_expert=one_expert,
            attn_flops_per_token=attn,
            attn_recompute_flops_per_token=attn,
        )

    # Hardware ----------------------------------------------------------------------------------
    @cached_property
    def gpu_profiles(self) -> list[Any]:
        """GPU profiles of the hosts in use (heterogeneous clusters have several)."""
        return [self.cluster.gpus[name] for name in sorted(set(self.cluster.host_gpu_names))]

    @cached_property
    def gpu(self) -> Any:
        """The (slowest) GPU profile of the cluster: a synchronous step runs at the pace of the slowest GPU."""
        return min(self.gpu_profiles, key=lambda g: g.peak_flops.get(self.compute_dtype, 0.0))

    @property
    def compute_dtype(self) -> str:
        dt = self.workload.dtype
        return "fp32" if self.gpu_kind_is_cpu else dt

    @cached_property
    def gpu_kind_is_cpu(self) -> bool:
        return any(getattr(g, "vendor", "") == "cpu" or g.name == "cpu" for g in self.gpu_profiles)

    @cached_property
    def peak_flops(self) -> float:
        """Peak of the decoder blocks' linear layers (and MoE experts): the workload's compute dtype."""
        return float(self.gpu.peak_flops[self.compute_dtype])

    @cached_property
    def unquantized_peak_flops(self) -> float:
        """Peak of the matmuls a low-precision recipe leaves in 16 bits: the attention core, the LM head and the MoE
        router (`planner.layout.workload.UNQUANTIZED_MATMUL_DTYPE`); the compute dtype's peak otherwise."""
        dtype = UNQUANTIZED_MATMUL_DTYPE.get(self.compute_dtype, self.compute_dtype)
        return float(self.gpu.peak_flops[dtype])

    @cached_property
    def fp8_backward_gemm_slowdown(self) -> float:
        """Time of the decoder's fp8 input- and weight-gradient GEMMs against the fp8 GEMM curve (which the forward's
        fast-accumulation GEMMs ride): the GPU's `fp8_precise_accumulation_slowdown` where the runtime's fp8 recipe
        turns fast accumulation off there (`RuntimeCosts.fp8_backward_precise_accumulation`); 1 otherwise."""
        if self.compute_dtype != "fp8" or not runtime_costs(self.workload).fp8_backward_precise_accumulation:
            return 1.0
        return float(getattr(self.gpu, "fp8_precise_accumulation_slowdown", None) or 1.0)

    @cached_property
    def sustained_fraction(self) -> float:
        """How much of an isolated kernel benchmark's throughput a training step sustains (efficiency.py)."""
        if self.gpu_kind_is_cpu:
            return 1.0
        measured = getattr(self.gpu, "sustained_fraction", None)
        return float(measured) if measured else SUSTAINED_FRACTION_OF_ISOLATED

    @cached_property
    def max_fraction(self) -> float:
        """GEMM plateau inside a training step: the profile's isolated plateau, sustained."""
        return float(self.gpu.matmul_efficiency.max_fraction) * self.sustained_fraction

    @cached_property
    def half_flops(self) -> float:
        return float(self.gpu.matmul_efficiency.half_flops)

    @cached_property
    def attention_efficiency(self) -> float:
        """Fraction of peak the fused attention kernel achieves (profile value; else the GEMM plateau): the GPU's
        fastest kernel, or FlashAttention-2's where the workload runs that (`Workload.attention_kernel` 'flash2')
        and the profile measures it apart, or FlashAttention-1's ('flash1': FlashAttention-2's over its published
        speedup)."""
        value = getattr(self.gpu, "attention_efficiency", None)
        kernel = getattr(self.workload, "attention_kernel", "auto")
        if kernel in ("flash2", "flash1"):
            value = getattr(self.gpu, "attention_efficiency_flash2", None) or value
        if kernel == "flash1":
            value = (value or self.gpu.matmul_efficiency.max_fraction) / FLASH2_SPEEDUP_OVER_FLASH1
        return float(value) * self.sustained_fraction if value else self.max_fraction

    @cached_property
    def attention_half_flops(self) -> float:
        """Fixed per-call cost of the fused attention kernel in FLOPs (profile value; else the GEMM knee)."""
        value = getattr(self.gpu, "attention_half_flops", None)
        return float(value) if value else self.half_flops

    @cached_property
    def memory_bandwidth_Bps(self) -> float:
        """Achievable device-memory bandwidth: the profile's figure times its measured copy efficiency.

        Every memory-bound term (element-wise passes, loss, embedding, optimizer, MoE permutes) divides its bytes
        by this, so the efficiency applies once, here. A calibrated profile's figure is itself a measured copy
        rate and carries no efficiency (null reads as 1), so nothing is counted twice.
        """
        efficiency = getattr(self.gpu, "memory_bandwidth_efficiency", None)
        return float(self.gpu.memory_bandwidth_Bps) * (float(efficiency) if efficiency else 1.0)

    @cached_property
    def memory_capacity_bytes(self) -> float:
        return float(min(g.memory_bytes for g in self.gpu_profiles))

    @property
    def act_bytes(self) -> int:
        """Bytes per activation element: 16-bit on GPUs, fp32 on CPU runs."""
        return 4 if self.gpu_kind_is_cpu else self.workload.bytes_per_element if self.workload.dtype != "fp8" else 2

    @property
    def mixed_precision(self) -> bool:
        return not self.gpu_kind_is_cpu and self.workload.dtype != "fp32"

    @property
    def weight_bytes(self) -> int:
        return WEIGHT_BYTES_16BIT if self.mixed_precision else WEIGHT_BYTES_FP32

    @property
    def grad_bytes(self) -> int:
        if not self.mixed_precision:
            return GRAD_BYTES_FP32
        return GRAD_BYTES_MEGATRON_FP32_BUFFER if megatron_grad_buffer_fp32(self.workload) else GRAD_BYTES_16BIT

    @property
    def optimizer_bytes(self) -> int:
        if not self.mixed_precision:
            return OPTIMIZER_BYTES_FP32
        if optimizer_state.lowered(self.workload):  # master / moments below fp32 (Workload.master_weights, ...)
            return optimizer_state.state_bytes_per_param(self.workload) + optimizer_state.lowered_grad_copy_bytes(self)
        # The fp32 copy of a 16-bit Megatron gradient buffer (fp16 runs, or bf16 with --grad-reduce-in-bf16).
        copies = megatron_grad_buffer_16bit(self.workload)
        return OPTIMIZER_BYTES_MIXED + (FP16_OPTIMIZER_GRAD_COPY_BYTES if copies else 0)

    # Model totals --------------------------------------------------------------------------------
    @cached_property
    def embedding_params(self) -> int:
        return int(self.model.embedding_params())

    @cached_property
    def head_params(self) -> int:
        """Final norm + LM head held by the last pipeline chunk (its own copy even when embeddings are tied)."""
        return int(self.model.lm_head_params()) + int(self.model.hidden_size * (2 if self.model.norm == "layernorm" else 1))

    @cached_property
    def logits_flops_per_token(self) -> float:
        return float(self.model.logits_forward_flops())

    @cached_property
    def model_flops_per_token(self) -> float:
        """Training FLOPs per token used for MFU: 3 x forward, full (non-causal) attention, logits included.

        This is the Korthikanti et al. 2022 Eq. 7 / PaLM (Chowdhery et al. 2022, App. B) convention; it does
        not count recomputation.
        """
        model_flops, _ = self.model.training_flops_per_token(self.workload.seq_len, "none", causal=False)
        return float(model_flops)

    def layer_type_counts(self) -> np.ndarray:
        return np.array([lt.count for lt in self.layer_types])


_TOPOLOGIES: dict[str, Any] = {}


def cached_topology(cluster: Any) -> Any:
    """Topology of a cluster, built once per cluster fingerprint (large clusters take a moment to build)."""
    from planner.topology import Topology

    key = cluster.fingerprint() if hasattr(cluster, "fingerprint") else str(id(cluster))
    topo = _TOPOLOGIES.get(key)
    if topo is None:
        if len(_TOPOLOGIES) >= 8:
            _TOPOLOGIES.pop(next(iter(_TOPOLOGIES)))
        topo = _TOPOLOGIES[key] = Topology(cluster)
    return topo


def make_context(model: ModelSpec, cluster: Any, workload: Workload, **options: Any) -> CostContext:
    """The cost context; a `flash_attention` option is folded into the workload so plans record it, and the
    model and workload must meet the rules of the `framework` option that read no layout (default meshplan's
    executor; `planner.api.make_context` also applies the framework's runtime costs)."""
    if options.get("flash_attention") is not None:
        workload = workload.model_copy(update={"flash_attention": bool(options.pop("flash_attention"))})
    options.pop("flash_attention", None)
    rules.check_inputs(model, workload, framework=options.setdefault("framework", rules.DEFAULT_FRAMEWORK))
    return CostContext(model=model, cluster=cluster, workload=workload, topology=cached_topology(cluster), **options)
