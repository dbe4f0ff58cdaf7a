"""What each training stack (`Workload.runtime`) executes beyond the GEMMs: the one home of those facts.

The cost terms read a runtime's traits from `RUNTIME_COSTS` instead of testing its name, so a framework profile
that maps onto a runtime inherits all of them, and a new runtime is one entry here. Each number is counted from
the code the runtime runs (file and function named next to it) or cited.

  pytorch          eager PyTorch: `meshplan run` (executor/model.py, executor/layers.py, executor/step.py) and
                   TorchTitan without torch.compile. One kernel per op; RoPE rotates fp32 copies; the loss
                   upcasts the logits to fp32; AdamW is the foreach implementation; FSDP2 copies parameters in
                   and out of its all-gather buffers.
  pytorch-compile  the same stack with every block under torch.compile (TorchTitan's `compile.enable`; its loss
                   stays eager): element-wise work fused into one pass per op group, fused AdamW
                   (TorchTitan's default `optimizer.implementation = "fused"`), gradient-norm clipping.
  megatron         Megatron-Core / Megatron-LM: fused kernels (LayerNorm, bias-GeLU, bias-dropout-add, RoPE),
                   the vocab-parallel cross-entropy of megatron/core/tensor_parallel/cross_entropy.py, FusedAdam
                   with fp32 main parameters and gradients, the distributed optimizer's contiguous buffers (no
                   copies around its collectives), gradient-norm clipping.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.layout.names import RUNTIME_NAMES

# GPU time one more kernel launch adds to a stream of back-to-back kernels when nothing captures them in a CUDA
# graph: NVIDIA Technical Blog "Getting Started with CUDA Graphs" (A. Gray, 2019): a 2.9 us kernel launched
# back to back takes 3.8 us per launch without a graph (3.4 us with one), i.e. ~1 us of GPU time per launch on
# top of the kernel; as recalled, LESS SURE for GPUs newer than the V100 it was measured on. GEMMs and the
# attention kernel carry their own measured fixed cost (profile `half_flops`, `attention_half_flops`), so this
# applies to the element-wise kernels only.
KERNEL_LAUNCH_GAP_S = 1.0e-6

FP32_BYTES = 4
BF16_BYTES = 2

# HBM bytes per local parameter and micro-batch of an unfused gradient accumulation (Workload.grad_accumulation_fusion
# False): Megatron-LM 2021 (aed2f75e, megatron/model/distributed.py DistributedDataParallel param_hook) runs
# `param.main_grad.add_(param.grad.data)` after every backward: the weight-gradient GEMM writes param.grad, then the
# add reads it and main_grad and writes main_grad. Beyond the fused path (--gradient-accumulation-fusion, 83b1e42f,
# 2022-02-13, whose wgrad GEMM accumulates into main_grad itself) that is one read of the gradient and one read and
# one write of the buffer: 3 x 2 bytes with the 2021 fp16 buffers (main_grad is fp32 only with
# --accumulate-allreduce-grads-in-fp32 or bf16, not set by the fp16 runs of that year).
UNFUSED_GRAD_ACCUMULATION_BYTES_PER_PARAM = 6.0

# GPU time one blocking stage-boundary exchange call of Megatron-LM's pipeline schedules costs beyond the bytes and
# latency of its transfers (the `affine` p2p term). Every call (`p2p_communication._communicate`) waits on its
# batch_isend_irecv requests and then calls torch.cuda.synchronize() unconditionally ("To protect against race
# condition when using batch_isend_irecv()": Megatron-LM aed2f75e (2021-04) megatron/p2p_communication.py line 112,
# 285068c8 (2023-01) line 231; Megatron-Core keeps it behind `batch_p2p_sync` whenever `batch_p2p_comm`, i.e. without
# --overlap-p2p-communication): the GPU queue drains, the host must launch the next chunk's kernels onto an idle
# GPU, and neighbouring stages advance in lock-step. SIZED from a published ablation, not fitted to the validation
# rows: MegaScale (Jiang et al. 2024) Table 3, 175B on 256 A100 at batch 256, tp8 pp8 dp4, interleaved v = 6
# (Sec. 6.1): "+ PP overlap" lifts MFU 55.5 -> 58.0 %, saving 4.31 % of a 12.73 s step (Table 2's FLOPs per
# sequence: 53.0 % MFU at 40.0 s for batch 768) = 0.549 s; this cost model credits the same switch with 0.172 s
# (bandwidth and latency of the transfers it then hides), and the other 0.377 s over the step's 438 exchange calls
# (comm.blocking_exchange_calls at micro-batch 1, m = 64: Megatron's GPT-3 175B example script; MegaScale does not
# state it, and micro-batch 2 would give 1.55 ms) is 0.86 ms each. benchmarks/derive_p2p_sync.py reproduces it.
BLOCKING_P2P_SYNC_S = 0.86e-3

# Share of the TP collectives that TP-communication overlap hides (comm.tp_exposed_s), FITTED to published
# measurements outside the validation set: TorchTitan's async-TP benchmark (docs/async_tp.md, PyTorch team, June
# 2025, Grand Teton H100): Llama 3 70B on 256 GPUs (FSDP 32 x TP 8, compile, full AC, local batch 16) 1.09x and
# Llama 3 8B on 64 GPUs (FSDP 8 x TP 8, compile, selective AC, local batch 12) 1.10x end-to-end over vanilla TP
# in bf16. benchmarks/fit_tp_overlap.py finds the share for which this cost model (pytorch-compile runtime, the
# interference factor included) reproduces both speed-ups and prints each one's value; this is their mean.
# Megatron's --tp-comm-overlap (Transformer Engine userbuffers) pipelines the same all-gather/reduce-scatter
# chunks with the same GEMMs; no like-for-like published ablation was found, so it takes the same value (LESS SURE;
# what was searched, the user reports seen and the sensitivity of the Megatron-Core rows: docs/cost_sources.md §4).
TP_OVERLAP_HIDDEN_FRACTION = 0.44


@dataclass(frozen=True)
class Fp8Casts:
    """HBM bytes per element the fp8 recipe's casts move around each linear layer (fp8 workloads only; the fp8
    GEMMs themselves are timed at the fp8 peak). Weights are not counted: Transformer Engine casts them once per
    step (`is_first_microbatch`), torchao with FSDP's float8 all-gather casts only the local shard."""

    input_fwd: float
    """Per element of a linear's input, forward (cast, and where the recipe does it then, its fp8 transpose)."""
    normed_input_fwd: float
    """The same where the norm before the linear writes its output in fp8 itself (TE's LayerNormLinear)."""
    input_bwd: float
    """Per element of a linear's input, backward (a re-cast for the weight-gradient GEMM)."""
    grad_bwd: float
    """Per element of a linear's output gradient, backward (its casts for the two gradient GEMMs)."""
    per_linear: bool
    """Each linear casts its own input (one Float8Linear per nn.Linear: q, k, v and gate, up each once); False:
    linears that read one input share its cast (TE's fused QKV and FC1)."""


# torchao float8, tensorwise dynamic scaling (Float8Linear / matmul_with_hp_or_float8_args, torchao.float8
# float8_linear.py; what TorchTitan's float8 converter and meshplan's pytorch runtimes run): forward casts the
# input (hp_tensor_to_float8_dynamic: an amax reduction reading it, 2 B, then the scaled cast reading it and
# writing fp8, 2 + 1 B = 5 B per element); backward casts the output gradient twice (row-major for the
# input-gradient GEMM, column-major for the weight-gradient GEMM: 2 x 5 B) and the saved bf16 input again for the
# weight gradient (5 B). Counted per kernel as the code issues them; torch.compile may fuse an amax into the op
# before it, eager runs more passes (torch.abs materialises a copy): neither is assumed.
_FP8_TORCHAO = Fp8Casts(input_fwd=5.0, normed_input_fwd=5.0, input_bwd=5.0, grad_bwd=10.0, per_linear=True)
# Transformer Engine, delayed scaling (the amax is taken inside the cast kernel for the next step): Linear's
# forward fp8_cast_transpose_fused writes the fp8 input and its transpose (read 2, write 1 + 1 = 4 B);
# LayerNormLinear's norm writes fp8 instead of bf16 (1 B less than the norm's counted output) and the transpose
# for the weight gradient reads and writes 1 B each (net 1 B); backward grad_output_preprocess casts the output
# gradient with fp8_cast_transpose_fused (4 B) (transformer_engine/pytorch/module/linear.py and base.py,
# TE 1.x). Megatron-Core's TELayerNormColumnParallelLinear (QKV, FC1) and TERowParallelLinear (proj, FC2).
_FP8_TRANSFORMER_ENGINE = Fp8Casts(input_fwd=4.0, normed_input_fwd=1.0, input_bwd=0.0, grad_bwd=4.0, per_linear=False)


@dataclass(frozen=True)
class RuntimeCosts:
    """Per-runtime facts the cost terms read (bytes are per element, per logit or per parameter)."""

    name: str
    eager_elementwise: bool
    """One kernel and one HBM round trip per PyTorch op (elementwise.py counts them); False: fused kernels."""
    cross_entropy_bytes: tuple[float, float]
    """HBM bytes per logit of the loss (forward, backward), on top of the LM-head GEMM."""
    fused_kernels_per_layer: tuple[int, int]
    """Element-wise kernels one decoder layer launches per micro-batch (forward, backward) with fused kernels,
    GEMMs and attention excluded (their fixed cost is measured with them); eager runtimes launch one per op
    (fixed_costs.eager_kernels_per_layer)."""
    optimizer_bytes_per_param: float
    """HBM bytes the optimizer step moves per parameter it updates (the local shard)."""
    step_bytes_per_unsharded_param: float
    """HBM bytes per parameter of the rank's whole model chunk, once per step, outside the optimizer (Megatron
    zeroes its contiguous gradient buffer; 0 where gradients are freed instead)."""
    clip_bytes_per_param: float
    """Gradient-norm clipping per local gradient: the norm reads it, the scaling reads and writes it."""
    tied_embedding_allreduce: bool
    """With pp > 1 and tied input/output embeddings, the first and last stages all-reduce the word-embedding
    gradient (V/tp x h at the reduction precision) once per step, after the backward and not overlapped."""
    scales_grad_buffer: bool
    """Before reducing, the runtime divides the whole chunk's gradient buffer by the DP size in a separate pass
    (one read and one write of each gradient at its reduction precision, `grad_reduce_bytes`), once per step."""
    fsdp_copies: bool
    """FSDP2 copies every all-gathered parameter out of its flat buffer on the compute stream."""
    regather_after_backward: bool
    """ZeRO-1/2 weights are resharded after every micro-batch's backward and gathered again for the next
    forward (FSDP2's default `reshard_after_backward`; executor/fsdp.py sets no other)."""
    reduce_after_last_backward_under_pp: bool
    """Under pipeline parallelism the step's gradient reduction starts after the last backward (PyTorch's
    `PipelineStage.perform_reduce_grad`), so nothing hides it."""
    cp_overlapped: bool
    """CP exchanges K/V while attention computes (ring attention, P2P); False: an all-gather before it."""
    cp_attention_calls_per_rank: str
    """How many fused-attention calls a CP rank makes per layer: "two" (its two load-balanced query chunks,
    executor/cp.py) or "cp" (one per ring step)."""
    zero_bubble_chunk_fsdp: bool
    """Zero-bubble schedules shard only chunk roots (executor/fsdp.py `per_layer=False`): one all-gather of the
    whole chunk before its first forward and one reduction after its last weight-gradient pass."""
    interleaved_p2p_overlapped: bool
    """The interleaved schedule overlaps stage-boundary sends with the next chunk's compute (Megatron-LM's
    `--overlap-p2p-communication`, default on); False: blocking transfers (torch.distributed.pipelining)."""
    tp_overlap_hidden: float
    """Share of the TP collectives that TP-communication overlap hides behind the GEMMs when the workload asks
    for it (`Workload.tp_comm_overlap`); 0 where the runtime cannot overlap them."""
    async_tp_backward: bool
    """The backward of each column-parallel linear (QKV, MLP up) launches its TP collectives asynchronously beside
    its own GEMMs (Megatron's LinearWithGradAccumulationAndAsyncCommunication, comm.tp_backward_exposed_s): the
    input-gradient all-reduce (no SP, when the release's flag is on: `Workload.async_tp_backward`) or
    reduce-scatter (SP) runs beside the weight-gradient GEMM, and with SP the re-gather of the layer input for that
    GEMM beside the input-gradient GEMM. False: every backward TP collective blocks (DTensor TP in eager PyTorch
    and torch.compile: nothing sourced overlaps it without async TP, `Workload.tp_comm_overlap`)."""
    p2p_scatter_gather: bool
    """Without sequence parallelism each TP rank sends 1/tp of a stage-boundary activation and the receiver
    all-gathers it over TP (Megatron-LM's scatter/gather optimisation, Narayanan et al. 2021 Sec. 4.1); False:
    every TP rank holds the whole replicated activation and sends all of it (torch.distributed.pipelining passes
    each stage's local output: executor/pipeline.py, TorchTitan). With sequence parallelism the activation is
    sequence-sharded and every runtime sends 1/tp."""
    p2p_host_sync: bool
    """Each blocking stage-boundary exchange ends in torch.cuda.synchronize() (Megatron's `_communicate`) unless the
    workload overlaps the exchanges (`Workload.overlap_pp_comm`): `BLOCKING_P2P_SYNC_S` per call; False where
    the sends only order streams (torch.distributed.pipelining waits on NCCL work objects, which blocks no host)."""
    logits_bytes_per_logit: float
    """Peak bytes per logit (s/cp x b x V/tp on the last pipeline rank) the LM head and the loss hold at once,
    beside the activations (`memory.logits_bytes`)."""
    sent_stage_outputs: str
    """What each pipeline stage keeps of an output it has sent until that micro-batch's backward
    (`planner.layout.names.SENT_STAGE_OUTPUTS`; `Workload.sent_stage_outputs` overrides it for a release that
    differs; `memory.sent_output_bytes`)."""
    step_recv_buffers: bool
    """Each pipeline stage allocates, once, an activation receive buffer and a gradient receive buffer for every
    micro-batch of the step and keeps them between steps (`memory.recv_buffer_bytes`,
    `schedules.extra_recv_buffers`); False: receive tensors are allocated per transfer and freed after use."""
    ep_dispatch_sequence_shard: bool
    """Under sequence parallelism the MoE token dispatcher sends each TP rank's sequence shard (T/tp tokens)
    through the EP all-to-all and then all-gathers the received rows over the expert-TP group (reduce-scatter
    on the way back), so every TP rank of the expert computes its FFN columns for all of them; False: every TP
    rank dispatches the whole micro-batch (the executor's MoE, executor/moe.py)."""
    fp8_casts: Fp8Casts
    """What its fp8 recipe casts around each linear layer (Fp8Casts)."""
    fp8_backward_precise_accumulation: bool
    """Its fp8 recipe runs the input- and weight-gradient GEMMs with fast accumulation off (partial sums promoted
    to fp32), the forward GEMM with it on: those two GEMMs take the GPU's `fp8_precise_accumulation_slowdown`.
    torchao: Float8LinearConfig gemm_config_output = Float8GemmConfig(use_fast_accum=True), gemm_config_grad_input
    and gemm_config_grad_weight = Float8GemmConfig() (use_fast_accum False; torchao/float8/config.py), what
    TorchTitan's float8 converter and meshplan's pytorch runtimes run. Transformer Engine: _2X_ACC_FPROP = False,
    _2X_ACC_DGRAD = True, _2X_ACC_WGRAD = True (transformer_engine/pytorch/module/base.py, the split accumulator
    of Megatron-Core's TE layers)."""


# Cross-entropy bytes per logit, counted per op:
# pytorch (executor/model.py loss_fn: F.cross_entropy(logits.float(), ...)): forward: upcast (read 2, write 4),
# log_softmax's three passes over an fp32 row too long for shared memory (max, sum-exp, write: read 12, write 4)
# = 22; backward: nll_loss's dense gradient (write 4), log_softmax backward (sum pass read 4, then read 8 write 4),
# the upcast's backward (read 4, write 2) = 26.
# megatron (vocab_parallel_cross_entropy): forward: .float() (2 + 4), max (4), in-place subtract (8), exp (8),
# sum (4), in-place divide (8) = 38; backward: in-place multiply by the loss gradient (8), the cast back (4 + 2)
# = 14.
# pytorch-compile: TorchTitan compiles the transformer blocks but calls the loss outside them
# (`cross_entropy(pred.flatten(0, 1).float(), ...)` in train.py at 9dec370, the commit of its Dec 2024 benchmark;
# docs/cost_sources.md 1.2), so the loss is the eager one. A compiled loss would move about 4 + 4 (two reductions
# over the 16-bit logits, one fused backward): not assumed.
_CE_EAGER = (22.0, 26.0)
_CE_MEGATRON = (38.0, 14.0)

# Optimizer step bytes per updated parameter (fp32 master weights, gradients, Adam moments):
# foreach AdamW (torch.optim.adamw._multi_tensor_adamw, what executor/step.py builds): weight decay mul (8),
# lerp of m with the gradient (12), mul of v (8), addcmul of v with g*g (16), sqrt (8), div (8), add eps (8),
# addcdiv of the parameter (16) = 84.
# fused AdamW (torch fused=True, Apex/TE FusedAdam): read p, g, m, v and write p, m, v = 28.
# Megatron adds the copy of the updated fp32 main parameter into the 16-bit model parameter (read 4, write 2).
_ADAM_FOREACH = 84.0
_ADAM_FUSED = 28.0
_MEGATRON_PARAM_COPY = 6.0
# Clipping (torch.nn.utils.clip_grad_norm_ foreach; Megatron clip_grad_norm_fp32): norm reads g, scale reads and
# writes it: 3 fp32 passes.
_CLIP = 3.0 * FP32_BYTES

# Logits held at the loss, bytes per logit. pytorch, pytorch-compile: fp32 logits and their fp32 gradient, 2 x 4 B
# (Korthikanti et al. 2022 App. A's extra term; not re-derived for the eager loss). megatron: 6 B, counted from
# Megatron-Core core_r0.9.0 (NeMo 24.09's): the output layer writes 16-bit logits (2 B) and the loss upcasts them,
# `vocab_parallel_logits.float()` (4 B; megatron/core/tensor_parallel/cross_entropy.py line 27, also the fused loss
# of --cross-entropy-loss-fusion, megatron/core/fusions/fused_cross_entropy.py calculate_logits_max); max-subtract,
# exp and the division run in place on that fp32 tensor, which forward keeps as the softmax
# (`ctx.save_for_backward(exp_logits, ...)`, cross_entropy.py line 180, fused_cross_entropy.py line 117) while the
# 16-bit logits die with the forward. Backward turns the softmax into the gradient in place and returns it cast to
# bf16 (fused_cross_entropy.py calculate_gradients line 78: `grad_input.to(torch.bfloat16)`, 2 B). Peak: 2 + 4 in
# forward, 4 + 2 in backward.
_LOGITS_FP32_AND_GRAD = 2.0 * FP32_BYTES
_LOGITS_MEGATRON = BF16_BYTES + FP32_BYTES

# Sent stage outputs (`RuntimeCosts.sent_stage_outputs`), per micro-batch in flight on a stage:
# pytorch, pytorch-compile: "kept". torch.distributed.pipelining (torch 2.13.0, cf30153c; what meshplan run and
# TorchTitan use) stores each forward's output tuple in the stage's forward cache until that micro-batch's backward
# pops it (torch/distributed/pipelining/stage.py `forward_one_chunk`: `self.fwd_cache[fwd_chunk_id] =
# (output_tuple, flatten_input_tensors)`; `backward_one_chunk`: `self.fwd_cache.pop(bwd_chunk_id)`); the send
# only aliases it (`get_fwd_send_ops`: `to_local_if_dtensor(out, detach=True)`), and nothing frees its storage
# before the backward (the only in-place detach, after the backward, is on the last stage's output). The output
# of a non-last stage is its last layer's residual sum (executor/model.py Block.forward `h + self.feed_forward(..)`;
# TorchTitan's TransformerBlock alike), and an addition saves no tensor for its backward, so autograd does not
# hold that storage already: it is s/cp x b x h activation values beyond the layers' count, the local tensor (the
# whole sequence on every TP rank without sequence parallelism, its 1/tp shard with it: executor/tp.py keeps the
# residual stream Replicate or Shard(1)). Under torch.compile the block's output is a graph output, not a saved
# tensor, so the same holds.
# megatron: "freed". Megatron-LM's schedules replace each sent output's .data by a 1-element tensor right after the
# send (`deallocate_output_tensor`, megatron/schedules.py, Megatron-LM c1e4526b, 2022-01-13; in Megatron-LM main
# from late January 2022, so in 55ba1f7b (2022-05) and every later release), keeping only its grad_fn for the
# backward; Megatron-Core does it when `deallocate_pipeline_outputs`, which Megatron-LM's training sets
# (megatron/core/pipeline_parallel/schedules.py `deallocate_output_tensor`; megatron/training/argument_utils.py
# line 305 `kw_args['deallocate_pipeline_outputs'] = True`, Megatron-LM d98e8a64, 2026-08). Releases before it keep
# the whole output: `Workload.sent_stage_outputs` "kept" (published_runs.FRAMEWORKS "megatron-lm-2021": megatron/
# schedules.py at 50a4b5fa02, 2021-04, `output_tensors.append(output_tensor)` after `send_forward`, popped only for
# the micro-batch's backward, per model chunk when interleaved). DeepSpeed's pipeline engine keeps a 1/tp slice
# ("kept-tp-shard", the Megatron-DeepSpeed frameworks there: deepspeed/runtime/pipe/engine.py `_exec_forward_pass`
# clones this model-parallel rank's part of the output (PartitionedTensor, runtime/utils.py `_partition_tensor`
# `.narrow(...).clone()`), sets `first_output.data = torch.zeros(1)` and keeps the part in
# `pipe_buffers['outputs'][buffer_id]` until `_exec_backward_pass` sets it to None; at DeepSpeed 2151c787a,
# 2022-02, whenever the model is tensor-parallel, and at 38327e07 (0.16.5, 2025-02) by default
# (`pipeline.pipe_partitioned` True); without TP it keeps the whole output, which is the same 1/tp at tp = 1).
_SENT_KEPT = "kept"
_SENT_FREED = "freed"

# Receive buffers (`RuntimeCosts.step_recv_buffers`):
# pytorch, pytorch-compile: True. torch.distributed.pipelining (torch 2.13.0, cf30153c) allocates them when the
# schedule first runs (schedules.py:454-471 `_initialize_pp_stages` calls `_prepare_forward_infra` and
# `_prepare_backward_infra` with `self._n_microbatches`), for every micro-batch of the step at once:
# stage.py:2251-2274 `_setup_forward_recv_info`: `for chunk_id in range(num_microbatches)` on every stage but the
# first, one `_make_tensor_from_meta(meta, ...)` (_utils.py:310-328, `torch.empty_strided` of the stage input's
# local shape and dtype) per input; stage.py:329-332 `_setup_backward_recv_info` / stage.py:2286-2320
# `_create_grad_recv_info` the same for the output gradient on every stage but the last. They live in
# `args_recv_info` / `grad_recv_info` for the stage's lifetime: `clear_runtime_states` (stage.py:604-622, each
# step) only drops the buffers' `.grad`, nothing re-allocates or frees them, and the buffers are not shared
# between micro-batches. The received activation is used in place as the stage's input (stage.py:639-702
# `_retrieve_recv_activations`: `info.buffer.requires_grad_(...)`, or `DTensor.from_local(info.buffer)`, no
# copy), so for a micro-batch in flight it is the first layer's saved input the activation count already holds;
# the other micro-batches' buffers and every gradient buffer (used as `grad_tensors` of the stage's backward,
# stage.py:704-753 `_retrieve_recv_grads`) are extra (`schedules.extra_recv_buffers`). The input gradients a stage
# computes are not kept (_backward.py:440-450 sets each input's `.grad = None` after reading it).
# megatron: False. Megatron-LM's p2p_communication `_communicate` creates `torch.empty` receive tensors for each
# transfer, which the schedule drops after the micro-batch's forward or backward.
_RECV_PER_STEP = True
_RECV_PER_TRANSFER = False

RUNTIME_COSTS: dict[str, RuntimeCosts] = {
    "pytorch": RuntimeCosts(
        name="pytorch", eager_elementwise=True, cross_entropy_bytes=_CE_EAGER, fused_kernels_per_layer=(0, 0),
        optimizer_bytes_per_param=_ADAM_FOREACH, step_bytes_per_unsharded_param=0.0, clip_bytes_per_param=0.0,
        scales_grad_buffer=False, tied_embedding_allreduce=False, fsdp_copies=True, regather_after_backward=True,
        reduce_after_last_backward_under_pp=True,
        cp_overlapped=False, cp_attention_calls_per_rank="two", zero_bubble_chunk_fsdp=True,
        interleaved_p2p_overlapped=False, tp_overlap_hidden=0.0, ep_dispatch_sequence_shard=False,
        p2p_scatter_gather=False, p2p_host_sync=False, async_tp_backward=False,
        logits_bytes_per_logit=_LOGITS_FP32_AND_GRAD, fp8_casts=_FP8_TORCHAO, fp8_backward_precise_accumulation=True, sent_stage_outputs=_SENT_KEPT,
        step_recv_buffers=_RECV_PER_STEP,
    ),
    "pytorch-compile": RuntimeCosts(
        name="pytorch-compile", eager_elementwise=False, cross_entropy_bytes=_CE_EAGER,
        # Inductor fuses each group of point-wise ops between GEMMs: norm(+residual), RoPE, SwiGLU: about 6
        # forward and 10 backward kernels per block (ESTIMATE from the op groups; not measured).
        fused_kernels_per_layer=(6, 10),
        optimizer_bytes_per_param=_ADAM_FUSED, step_bytes_per_unsharded_param=0.0, clip_bytes_per_param=_CLIP,
        scales_grad_buffer=False, tied_embedding_allreduce=False, fsdp_copies=True, regather_after_backward=True,
        reduce_after_last_backward_under_pp=True,
        cp_overlapped=False, cp_attention_calls_per_rank="two", zero_bubble_chunk_fsdp=True,
        interleaved_p2p_overlapped=False, tp_overlap_hidden=TP_OVERLAP_HIDDEN_FRACTION,
        ep_dispatch_sequence_shard=False, p2p_scatter_gather=False, p2p_host_sync=False, async_tp_backward=False,
        logits_bytes_per_logit=_LOGITS_FP32_AND_GRAD, fp8_casts=_FP8_TORCHAO, fp8_backward_precise_accumulation=True, sent_stage_outputs=_SENT_KEPT,
        step_recv_buffers=_RECV_PER_STEP,
    ),
    "megatron": RuntimeCosts(
        name="megatron", eager_elementwise=False, cross_entropy_bytes=_CE_MEGATRON,
        # Fused kernels per layer: 2 LayerNorms, 2 bias-dropout-adds, bias-GeLU (or SwiGLU), RoPE, 16-bit casts
        # of the fp32 residual path: about 6 forward and 10 backward (ESTIMATE from the fused ops listed).
        fused_kernels_per_layer=(6, 10),
        optimizer_bytes_per_param=_ADAM_FUSED + _MEGATRON_PARAM_COPY,
        # DistributedDataParallel.zero_grad_buffer memsets the fp32 gradient buffer of the whole chunk each step.
        step_bytes_per_unsharded_param=FP32_BYTES, clip_bytes_per_param=_CLIP,
        # The gradient buffer is divided by the DP size before its reduction, in place, every step (also at dp 1):
        # Megatron-LM aed2f75e (2021-04) and 285068c8 (2023-01) megatron/model/distributed.py allreduce_gradients
        # `buffer_.data /= mpu.get_data_parallel_world_size()`; 285068c8 megatron/optimizer/distrib_optimizer.py
        # reduce_model_grads `gbuf.data /= data_parallel_world_size`; Megatron-Core multiplies each bucket by its
        # gradient_scaling_factor before the collective.
        scales_grad_buffer=True,
        # Megatron-LM aed2f75e and 285068c8 megatron/optimizer/optimizer.py allreduce_word_embedding_grads (called
        # from reduce_model_grads after the backward: torch.distributed.all_reduce of the word embedding's
        # main_grad over the embedding group, the first and last pipeline stage); Megatron-Core
        # finalize_model_grads._allreduce_word_embedding_grads, after the DP gradient sync.
        tied_embedding_allreduce=True,
        fsdp_copies=False, regather_after_backward=False, reduce_after_last_backward_under_pp=False,
        cp_overlapped=True, cp_attention_calls_per_rank="cp", zero_bubble_chunk_fsdp=False,
        interleaved_p2p_overlapped=True, tp_overlap_hidden=TP_OVERLAP_HIDDEN_FRACTION,
        # MoEAlltoAllTokenDispatcher.token_permutation / token_unpermutation (megatron/core/transformer/moe/
        # token_dispatcher.py at df0430dbf2, 2025-04, the Megatron-Core of Liu et al. 2025): all_to_all over the
        # EP group of the local (sequence-parallel) tokens, then gather_from_sequence_parallel_region over the
        # expert-TP group; the combine reduce-scatters over TP before the reverse all_to_all. MoELayer refuses
        # TP > 1 without sequence parallelism in training (moe_layer.py).
        ep_dispatch_sequence_shard=True, p2p_scatter_gather=True, p2p_host_sync=True,
        # LinearWithGradAccumulationAndAsyncCommunication.backward: Megatron-LM 285068c8 (2023-01)
        # megatron/core/tensor_parallel/layers.py lines 257-316 (SP: the input all-gather async_op=True at 257-260
        # before the input-gradient matmul at 267; the input-gradient all-reduce async_op=True at 281 or, with SP,
        # reduce-scatter at 289-294, both launched before the weight-gradient GEMM at 301/308 and waited at
        # 312/316); the same in Megatron-LM 55ba1f7b (2022-05, Korthikanti et al.'s release) megatron/mpu/layers.py
        # 250-308, Megatron-Core core_r0.8.0 (baf94af3) layers.py 449-484 and df0430dbf2 (2025-04) 484-508. It
        # arrived in Megatron-LM 3f652469 (2021-09-02); Megatron-LM aed2f75e (2021-04) and BigScience's
        # Megatron-DeepSpeed (131bd43e, 2022-06, BLOOM) all-reduce in _CopyToModelParallelRegion.backward, after
        # both GEMMs (Workload.async_tp_backward False).
        async_tp_backward=True,
        # Its distributed optimizer shards over dp x cp, as FSDP does everywhere: planner.layout.expert_groups.
        logits_bytes_per_logit=_LOGITS_MEGATRON, fp8_casts=_FP8_TRANSFORMER_ENGINE, fp8_backward_precise_accumulation=True, sent_stage_outputs=_SENT_FREED,
        step_recv_buffers=_RECV_PER_TRANSFER,
    ),
}

if set(RUNTIME_COSTS) != set(RUNTIME_NAMES):  # one list of names (planner.layout.names), one table of traits
    raise RuntimeError(f"RUNTIME_COSTS covers {sorted(RUNTIME_COSTS)} but Workload.runtime allows {list(RUNTIME_NAMES)}")


def runtime_costs(workload) -> RuntimeCosts:
    """The traits of a workload's runtime (workloads without one are the eager PyTorch default)."""
    return RUNTIME_COSTS[getattr(workload, "runtime", "pytorch")]


def reduces_in_bf16(workload) -> bool:
    """The workload reduces its data-parallel gradients in bf16 (`Workload.grad_reduce_dtype`; workloads without
    the field reduce in fp32)."""
    return getattr(workload, "grad_reduce_dtype", "fp32") == "bf16"


def grad_reduce_bytes(ctx) -> int:
    """Bytes per gradient element the data-parallel reduction moves.

    Mixed-precision training reduces fp32 gradients in both stacks by default: FSDP2/replicate with the executor's
    `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=float32)` (executor/fsdp.py), and Megatron-LM, whose
    arguments.py turns on `accumulate_allreduce_grads_in_fp32` for every bf16 run ("bfloat16 requires gradient
    accumulation and all-reduce to be done in fp32"). fp16 Megatron runs (loss scaling) reduce 16-bit gradients;
    fp32 runs (CPU) reduce fp32.
    `Workload.grad_reduce_dtype` "bf16" reduces 2-byte gradients in every runtime and ZeRO stage, because each
    stack then runs every DP gradient collective in bf16: FSDP2 casts the unsharded gradient to
    `MixedPrecisionPolicy.reduce_dtype` before its reduce-scatter/all-reduce (torch/distributed/fsdp/_fully_shard/
    _fsdp_collectives.py foreach_reduce: `reduce_dtype` for the reduce-scatter input and the all-reduce of HSDP);
    Megatron-Core's `--grad-reduce-in-bf16` sets DistributedDataParallelConfig.grad_reduce_in_fp32 False, so the
    contiguous grad buffer, and every bucket it reduce-scatters or all-reduces, is in the parameters' bf16
    (megatron/core/distributed/distributed_data_parallel.py: `grad_dtype = torch.float if grad_reduce_in_fp32 else
    param.dtype`); DeepSpeed's `communication_data_type: "bf16"` casts gradients to it before its all-reduce /
    reduce-scatter (deepspeed/runtime/engine.py communication_data_type, allreduce_bucket).
    """
    if reduces_in_bf16(ctx.workload):
        return BF16_BYTES
    if not ctx.mixed_precision:
        return ctx.grad_bytes
    if ctx.workload.dtype == "fp16" and ctx.workload.runtime == "megatron":
        return ctx.grad_bytes
    return FP32_BYTES


def megatron_grad_buffer_16bit(workload) -> bool:
    """Megatron keeps its contiguous gradient buffer (`main_grad`) in 16 bits: fp16 runs (no fp32 accumulation) and
    bf16 runs with `--grad-reduce-in-bf16` (grad_dtype = param.dtype, `grad_reduce_bytes`). Its optimizer then
    makes an fp32 copy of each (shard's) gradient for the update (`context.FP16_OPTIMIZER_GRAD_COPY_BYTES`:
    Megatron-Core distrib_optimizer._copy_model_grads_to_main_grads `shard_main_param.grad =
    shard_model_grad.float()`, a no-op cast only when the buffer is fp32)."""
    if getattr(workload, "runtime", "pytorch") != "megatron":
        return False
    return workload.dtype == "fp16" or reduces_in_bf16(workload)


def megatron_grad_buffer_fp32(workload) -> bool:
    """Megatron keeps its gradient buffer in fp32: bf16 runs without `--grad-reduce-in-bf16` (the default; the
    buffer dtype `context.GRAD_BYTES_MEGATRON_FP32_BUFFER` cites). Every other Megatron run has a 16-bit buffer
    (`megatron_grad_buffer_16bit`)."""
    return getattr(workload, "runtime", "pytorch") == "megatron" and workload.dtype == "bf16" \
        and not megatron_grad_buffer_16bit(workload)


def grad_buffer_step_bytes(ctx) -> float:
    """HBM bytes per unsharded parameter the runtime moves once per step outside the optimizer
    (`RuntimeCosts.step_bytes_per_unsharded_param`: Megatron zeroes its fp32 gradient buffer), halved where that
    buffer is bf16 (`Workload.grad_reduce_dtype` bf16; fp16 runs keep the count they were validated with)."""
    per_param = runtime_costs(ctx.workload).step_bytes_per_unsharded_param
    if reduces_in_bf16(ctx.workload):
        return per_param * BF16_BYTES / FP32_BYTES
    return per_param


def p2p_sync_s(ctx) -> float:
    """GPU seconds one blocking exchange call loses to the runtime's host synchronisation (`BLOCKING_P2P_SYNC_S`
    where `RuntimeCosts.p2p_host_sync` and the workload does not overlap the exchanges; else 0)."""
    if ctx.gpu_kind_is_cpu or not runtime_costs(ctx.workload).p2p_host_sync:
        return 0.0
    return 0.0 if getattr(ctx.workload, "overlap_pp_comm", True) else BLOCKING_P2P_SYNC_S
