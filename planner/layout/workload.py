"""`Workload`: what is trained per step (batch, sequence length, precision, optimizer), and its defaults.

The global batch is given either in sequences (`global_batch`) or tokens (`global_batch_tokens`, which
must be a multiple of `seq_len`); both normalise to `global_batch` sequences.

Defaults, one set for the CLI, the API and `meshplan run`, adapted to the model by `Workload.for_model`:
  seq_len       DEFAULT_SEQ_LEN = 8192 (Llama 3's pre-training context), capped at the model's max_seq_len;
  global batch  DEFAULT_GLOBAL_BATCH_SEQS = 512 sequences at the model's default sequence length: 4 Mi tokens
                at 8192 (Llama 3 405B's first training stage, Llama 3 paper Sec. 3.4.1); a short-context model
                gets proportionally fewer tokens. With another sequence length the same token budget is cut
                into budget // seq_len sequences.
`Workload()` without a model holds the same numbers (8192 tokens, 512 sequences).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.layout.names import (
    ATTENTION_KERNELS,
    DEFAULT_GLOBAL_BATCH_SEQS,
    DEFAULT_RUNTIME,
    DEFAULT_SEQ_LEN,
    GRAD_REDUCE_DTYPES,
    MASTER_WEIGHTS,
    OPTIMIZER_STATE_DTYPES,
    RUNTIME_NAMES,
    SENT_STAGE_OUTPUTS,
    TP_OVERLAP_RUNTIMES,
)

DType = Literal["bf16", "fp16", "fp32", "fp8"]
GradReduceDType = Literal[GRAD_REDUCE_DTYPES]  # type: ignore[valid-type]
OptimizerStateDType = Literal[OPTIMIZER_STATE_DTYPES]  # type: ignore[valid-type]
MasterWeights = Literal[MASTER_WEIGHTS]  # type: ignore[valid-type]
Runtime = Literal[RUNTIME_NAMES]  # type: ignore[valid-type]
AttentionKernel = Literal[ATTENTION_KERNELS]  # type: ignore[valid-type]
SentStageOutputs = Literal[SENT_STAGE_OUTPUTS]  # type: ignore[valid-type]

BYTES_PER_ELEMENT: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}

# The dtype of the matmuls a training recipe leaves unquantized. fp8 recipes quantize the decoder blocks' linear
# layers (and MoE experts) only; the attention core, the LM head and the MoE router run in bf16:
# - torchao float8 (TorchTitan, meshplan's executor): `convert_to_float8_training` swaps nn.Linear modules for
#   Float8Linear, and TorchTitan passes `module_filter_fn=lambda mod, fqn: fqn != "output"` (torchtitan float8
#   converter, 2024-2025), so the LM head stays bf16; attention is `F.scaled_dot_product_attention` in bf16.
# - Transformer Engine / Megatron-Core: `fp8_autocast` covers TE's Linear, LayerNormLinear, LayerNormMLP and grouped
#   GEMMs; DotProductAttention runs fp8 only with the recipe's `fp8_dpa` (Megatron `--fp8-dot-product-attention`,
#   off by default); the output layer is Megatron's own ColumnParallelLinear, not a TE module.
# - DeepSeek-V3 (arXiv 2412.19437, Sec. 3.3.1): "the embedding module, the output head, MoE gating modules,
#   normalization operators, and attention operators" keep BF16 or FP32.
UNQUANTIZED_MATMUL_DTYPE: dict[str, str] = {"fp8": "bf16"}


class Workload(BaseModel):
    """One optimizer step of training: global batch, sequence length, compute dtype, optimizer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    global_batch: int | None = Field(None, ge=1, description="Sequences per optimizer step (all DP replicas together).")
    global_batch_tokens: int | None = Field(None, ge=1, description="Tokens per optimizer step; alternative to global_batch.")
    seq_len: int = Field(DEFAULT_SEQ_LEN, ge=1, description="Tokens per sequence.")
    dtype: DType = Field("bf16", description="Compute dtype of matmuls and activations.")
    optimizer: Literal["adamw"] = Field("adamw", description="Optimizer; AdamW keeps two moments per parameter (their precision: optimizer_state_dtype).")
    flash_attention: bool = Field(
        True,
        description="Attention runs as a fused FlashAttention kernel (Dao et al. 2022): causal blocks skipped, "
        "no attention-score activations stored. False models the unfused 2021-era attention.",
    )
    attention_kernel: AttentionKernel = Field(
        ATTENTION_KERNELS[0],
        description="Which fused attention kernel runs (with flash_attention). auto: the GPU's fastest as its profile "
        "measures it (cuDNN attention on Hopper: PyTorch SDPA's default there since torch 2.9, Transformer Engine; "
        "FlashAttention-2 on Ampere). flash2: FlashAttention-2, about half as fast on Hopper: PyTorch SDPA before "
        "torch 2.9, TorchTitan on Hopper, the flash-attn 2 package. flash1: FlashAttention-1, half as fast as "
        "FlashAttention-2 (Megatron-LM's --use-flash-attn before flash-attn 2).",
    )
    overlap_dp_comm: bool = Field(
        True,
        description="Data-parallel gradient reduction and parameter gathers overlap with compute (PyTorch DDP/FSDP, "
        "Megatron --overlap-grad-reduce/--overlap-param-gather). False models a framework that reduces after the "
        "last backward, like Megatron-LM's 2021 local DDP.",
    )
    overlap_pp_comm: bool = Field(
        True,
        description="Where the runtime can (megatron, interleaved schedule), stage-boundary sends overlap the next "
        "chunk's compute (Megatron --overlap-p2p-communication, on by default in Megatron-Core since 2024). False "
        "models a release or framework that blocks on them (Megatron-LM before 2024, DeepSpeed's pipeline engine).",
    )
    runtime: Runtime = Field(
        DEFAULT_RUNTIME,
        description="Training stack the plan runs on. pytorch: eager PyTorch as meshplan run and TorchTitan "
        "without compile execute it (one kernel per op, fp32 RoPE and loss copies, foreach AdamW), FSDP2/DDP with "
        "torch.distributed.pipelining, whose schedules reduce gradients once after the last backward (exposed) "
        "and keep ZeRO-2/3 gradients and weights unsharded until then. pytorch-compile: the same stack with each "
        "block under torch.compile (fused element-wise kernels, fused AdamW: TorchTitan's compile.enable). "
        "megatron (Megatron-Core): fused kernels, the distributed optimizer overlaps the gradient reduce-scatter "
        "with the last micro-batch's backward under pipeline parallelism too.",
    )
    tp_comm_overlap: bool = Field(
        False,
        description="Tensor-parallel collectives are pipelined with the GEMMs that produce or consume them "
        "(Megatron --tp-comm-overlap, PyTorch async TP under torch.compile). Both need sequence parallelism, so it "
        "applies to layouts with it; not available on the eager pytorch runtime.",
    )
    grad_accumulation_fusion: bool = Field(
        True,
        description="The weight-gradient GEMM accumulates straight into the gradient buffer (Megatron "
        "--gradient-accumulation-fusion, since Megatron-LM 83b1e42f, Feb 2022). False models a release that adds "
        "each micro-batch's weight gradients into the buffer in a separate pass (Megatron-LM 2021: "
        "param.main_grad.add_(param.grad) in its DDP hook): 6 more HBM bytes per local parameter per micro-batch.",
    )
    async_tp_backward: bool = Field(
        True,
        description="Where the runtime can (megatron), the backward all-reduce of a column-parallel linear's input "
        "gradient runs beside its weight-gradient GEMM (Megatron's async tensor-model-parallel all-reduce, on by "
        "default since Megatron-LM 3f652469, Sep 2021; --no-async-tensor-model-parallel-allreduce turned it off "
        "until Megatron-Core ignored the flag). False models a release that all-reduces after both GEMMs "
        "(Megatron-LM 2021 before it, BigScience's Megatron-DeepSpeed). With sequence parallelism Megatron "
        "overlaps its reduce-scatter either way.",
    )
    sent_stage_outputs: SentStageOutputs | None = Field(
        None,
        description="What a pipeline stage keeps of each output it has sent, per micro-batch in flight, until that "
        "micro-batch's backward. None: what the runtime does (megatron frees it after the send, "
        "deallocate_output_tensor since Megatron-LM c1e4526b, Jan 2022; pytorch and pytorch-compile keep it in "
        "torch.distributed.pipelining's forward cache). freed: nothing. kept: the stage's local output tensor "
        "(sequence/cp x micro-batch x hidden, / tp under sequence parallelism), as Megatron-LM 2021 kept it in its "
        "schedule's output_tensors. kept-tp-shard: this TP rank's 1/tp slice of it (DeepSpeed's pipeline engine "
        "partitions the output over the model-parallel group and frees the whole). Nothing without pipelining.",
    )
    zero1_grad_allreduce: bool = Field(
        False,
        description="ZeRO-1 all-reduces the whole gradient, so every rank receives all of it, before each rank "
        "updates its shard (DeepSpeed's BF16_Optimizer: the engine's allreduce_gradients runs "
        "buffered_allreduce_fallback on get_grads_for_reduction(), the full fp32 gradient buffer). False: the "
        "gradient is reduce-scattered (Megatron's distributed optimizer, DeepSpeed's ZeRO stage 1/2 optimizer).",
    )
    grad_reduce_dtype: GradReduceDType = Field(
        GRAD_REDUCE_DTYPES[0],
        description="Precision of the data-parallel gradient reduction (all-reduce / reduce-scatter over DP). fp32: "
        "what mixed-precision stacks do by default (FSDP2 MixedPrecisionPolicy(reduce_dtype=float32), Megatron "
        "bf16 runs with accumulate_allreduce_grads_in_fp32). bf16 halves the DP gradient traffic at a loss of "
        "precision that grows with the number of ranks summed (FSDP2 reduce_dtype=bfloat16, Megatron-Core "
        "--grad-reduce-in-bf16, DeepSpeed communication_data_type bf16; TorchTitan 0.3.0's mixed_precision_reduce "
        "accepts float32 only). A numerics choice the user makes, never searched. fp16 runs reduce fp16 gradients "
        "already.",
    )
    optimizer_state_dtype: OptimizerStateDType = Field(
        OPTIMIZER_STATE_DTYPES[0],
        description="Precision Adam's two moments are stored in. fp32: every stack's default. bf16 halves them "
        "(Megatron-Core --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, since "
        "core_v0.13.0; NeMo's Apex DistributedFusedAdam with optim.dtype bf16). bf16 training only; a numerics "
        "choice the user makes, never searched.",
    )
    master_weights: MasterWeights = Field(
        MASTER_WEIGHTS[0],
        description="How the optimizer keeps the master copy of the bf16 weights. fp32: a full fp32 copy (4 B per "
        "parameter; mixed-precision training, Micikevicius et al. 2018). remainders: only the 16 low bits of the "
        "fp32 value the bf16 weight lacks (2 B; exact fp32 updates: Megatron-Core --use-precision-aware-optimizer "
        "with Transformer Engine >= 2.1, NeMo's Apex DistributedFusedAdam store_param_remainders). none: updates "
        "applied to the bf16 weights (0 B; Apex DistributedFusedAdam with optim.dtype bf16, as NVIDIA's Nemotron-4 "
        "340B recipe runs it). bf16 training only; never searched.",
    )
    master_weights_fp32: bool = Field(
        True, description="Whether the optimizer keeps an fp32-exact master copy of the weights: False exactly when "
        "master_weights is 'none' (set from it; plans that give only master_weights_fp32=False mean "
        "master_weights='none').",
    )

    @model_validator(mode="after")
    def _normalise(self) -> Workload:
        if self.tp_comm_overlap and self.runtime not in TP_OVERLAP_RUNTIMES:
            raise ValueError(
                "tp_comm_overlap needs runtime 'pytorch-compile' (PyTorch async TP is a torch.compile pass) or "
                f"'megatron' (--tp-comm-overlap); the {self.runtime!r} runtime runs TP collectives unpipelined"
            )
        if self.grad_reduce_dtype == "bf16" and self.dtype == "fp16":
            raise ValueError(
                "grad_reduce_dtype='bf16' with dtype='fp16': fp16 training reduces its fp16 gradients (loss "
                "scaling); use grad_reduce_dtype='fp32' for fp16 runs, or train in bf16"
            )
        self._normalise_optimizer_precision()
        if self.global_batch is None and self.global_batch_tokens is None:
            object.__setattr__(self, "global_batch", DEFAULT_GLOBAL_BATCH_SEQS)
        if self.global_batch_tokens is not None:
            if self.global_batch_tokens % self.seq_len:
                raise ValueError(
                    f"global_batch_tokens={self.global_batch_tokens} is not a multiple of seq_len={self.seq_len}"
                )
            seqs = self.global_batch_tokens // self.seq_len
            if self.global_batch is not None and self.global_batch != seqs:
                raise ValueError(
                    f"global_batch={self.global_batch} disagrees with global_batch_tokens/seq_len={seqs}; give one"
                )
            object.__setattr__(self, "global_batch", seqs)
        return self

    def _normalise_optimizer_precision(self) -> None:
        """Tie the legacy `master_weights_fp32` to `master_weights` and refuse what no stack runs: a master copy
        other than fp32, or bf16 moments, outside bf16 training (the remainders are the bits an fp32 value has
        beyond bf16; the stacks that drop the master or halve the moments run bf16 models)."""
        if "master_weights_fp32" in self.model_fields_set and "master_weights" not in self.model_fields_set \
                and not self.master_weights_fp32:
            object.__setattr__(self, "master_weights", "none")
        elif "master_weights_fp32" in self.model_fields_set and self.master_weights_fp32 != (self.master_weights != "none"):
            raise ValueError(f"master_weights_fp32={self.master_weights_fp32} contradicts "
                             f"master_weights={self.master_weights!r}; give master_weights alone")
        object.__setattr__(self, "master_weights_fp32", self.master_weights != "none")
        lowered = [f"{name}={value!r}" for name, value in (("master_weights", self.master_weights),
                                                           ("optimizer_state_dtype", self.optimizer_state_dtype))
                   if value != "fp32"]
        if lowered and self.dtype != "bf16":
            raise ValueError(f"{' and '.join(lowered)} with dtype={self.dtype!r}: lower-precision optimizer state is "
                             "modelled for bf16 training only (remainders complete bf16 weights to fp32); train bf16 "
                             "or keep master_weights='fp32' and optimizer_state_dtype='fp32'")

    @classmethod
    def for_model(cls, model: Any, **given: Any) -> Workload:
        """The workload for `model` from the fields given (None = not given), defaults adapted to the model:
        the one place the CLI, the API and `meshplan run` fill in what the user left out."""
        given = {k: v for k, v in given.items() if v is not None}
        default_len = min(DEFAULT_SEQ_LEN, int(model.max_seq_len))
        seq_len = given.setdefault("seq_len", default_len)
        if "global_batch" not in given and "global_batch_tokens" not in given:
            budget = DEFAULT_GLOBAL_BATCH_SEQS * default_len  # tokens
            if budget % seq_len == 0:
                given["global_batch_tokens"] = budget
            else:  # the whole sequences that fit in the budget
                given["global_batch"] = max(1, budget // seq_len)
        return cls(**given)

    @property
    def batch(self) -> int:
        """Global batch in sequences (always set after validation)."""
        assert self.global_batch is not None
        return self.global_batch

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.seq_len

    @property
    def bytes_per_element(self) -> int:
        return BYTES_PER_ELEMENT[self.dtype]
