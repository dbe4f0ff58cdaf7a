"""The layout's names and defaults, light enough for the command line to read before anything heavy is loaded.

`planner.layout.table` (codes), `planner.layout.workload` (defaults) and the CLI's choices read them here;
this module imports nothing (no numpy, no pydantic), like `planner.layout.schedules`.
"""

from __future__ import annotations

RECOMPUTE_EVERY: dict[str, int] = {"every-2": 2, "every-3": 3, "every-4": 4}
"""Partial recomputation: policy name -> k, every k-th decoder layer recomputed from its input (as under "full")
and the others keeping all their activations. TorchTitan 0.2's layer-wise selective AC (`selective_ac_option = "k"`:
its checkpoint wrapper goes on every k-th TransformerBlock), Megatron's `--recompute-method block
--recompute-num-layers N` (the first N of each model chunk's layers, N = its layers / k) and IBM fms-fsdp's
`selective_checkpointing = k` recompute the same share. The k offered are the ones that trade memory for time in
steps a search can use; the layout rules say where each applies."""


def ordinal(k: int) -> str:
    """2 -> "2nd", 3 -> "3rd", 4 -> "4th" (how messages name the k of an every-k policy)."""
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


RECOMPUTE_NAMES: tuple[str, ...] = ("none", "selective", "full", "op", *RECOMPUTE_EVERY)
"""Activation recomputation policies, by their code in the layout table (a new one is appended, so the codes of
the others stay); what each means is `RECOMPUTE_MEANINGS`."""
RECOMPUTE_MEANINGS: dict[str, str] = {
    "none": "nothing recomputed",
    "selective": "the attention core softmax(QK^T)V recomputed (Korthikanti et al. 2022)",
    "full": "each decoder layer recomputed from its input",
    "op": "TorchTitan's per-op selective AC: matmul, attention and SP reduce-scatter outputs kept except every "
          "second matmul; the rest recomputed",
    **{name: f"every {ordinal(k)} decoder layer recomputed from its input, the others keep all their activations"
       for name, k in RECOMPUTE_EVERY.items()},
}
"""One line per policy (CLI help, docs). `op` follows TorchTitan's `selective_ac_option = "op"`
(torchtitan/distributed/activation_checkpoint.py, `_save_list` and the custom policy): inside each decoder
layer the outputs of aten.mm, the SDPA kernels, c10d reduce_scatter_tensor and aten.max are saved, except every
second aten.mm counted in the layer's forward (and counted the same way in the recompute); every other op is
recomputed. Which matmuls are recomputed follows the order the layer calls them (executor.ac)."""


def recomputes_layer_whole(policy: str, index: int) -> bool:
    """Whether `policy` recomputes decoder layer `index` (0-based, within the model part a rank runs) whole from its
    input: every layer under full; under every-k the k-th, 2k-th, ... (TorchTitan's count: the wrapper goes on the
    block whose running count is a multiple of k)."""
    if policy == "full":
        return True
    return policy in RECOMPUTE_EVERY and (index + 1) % RECOMPUTE_EVERY[policy] == 0


def full_recompute_share(policy: str) -> float:
    """Share of the decoder layers a policy recomputes whole from their input: 1 for full, 1/k for the
    every-k policies (`RECOMPUTE_EVERY`), 0 for the others (none, and those that recompute parts of every layer)."""
    if policy == "full":
        return 1.0
    return 1.0 / RECOMPUTE_EVERY[policy] if policy in RECOMPUTE_EVERY else 0.0


DEFAULT_MESH_AXES: tuple[str, ...] = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
"""Mesh axes, outermost first: TP varies fastest (consecutive ranks, inside an NVLink domain), PP slowest."""

MAX_SIZE = 2**31 - 1
"""Largest degree, size or count a layout knob may hold: far beyond any cluster, and small enough for the
int64 columns of the search's tables (`planner.layout.table`), which multiply them."""

DEFAULT_SEQ_LEN = 8192
"""Default tokens per sequence (Llama 3's pre-training context), capped at the model's max_seq_len."""
DEFAULT_GLOBAL_BATCH_SEQS = 512
"""Default sequences per step at the model's default sequence length: 4 Mi tokens at 8192 (Llama 3 405B's
first training stage, Llama 3 paper Sec. 3.4.1)."""

FRAMEWORK_NAMES: tuple[str, ...] = ("meshplan", "torchtitan", "megatron", "deepspeed")
"""Training frameworks a user plans for (`--framework`; `planner.frameworks` holds a profile of each). The
default, meshplan, is the built-in executor (`meshplan run`)."""
DEFAULT_FRAMEWORK = "meshplan"
ANY_FRAMEWORK = "any"
"""No framework's rules, only the generic ones: the cost model's whole space, for what-if studies of software
meshplan has no profile for (Python API only)."""

RUNTIME_NAMES: tuple[str, ...] = ("pytorch", "pytorch-compile", "megatron")
"""Training stacks the cost model knows (`Workload.runtime`, `--runtime`): eager PyTorch (meshplan run, TorchTitan
without compile), PyTorch with its blocks under torch.compile (TorchTitan's compile.enable) and Megatron-Core.
What each one executes beyond the GEMMs is in `planner.cost.runtime` (one table of traits per name)."""
DEFAULT_RUNTIME = "pytorch"
GRAD_REDUCE_DTYPES: tuple[str, ...] = ("fp32", "bf16")
"""Precisions of the data-parallel gradient reduction (`Workload.grad_reduce_dtype`, `--grad-reduce-dtype`), the
default first."""
OPTIMIZER_STATE_DTYPES: tuple[str, ...] = ("fp32", "bf16")
"""Precisions of Adam's two moments (`Workload.optimizer_state_dtype`, `--optimizer-state-dtype`), the default
first: fp32, or bf16 as Megatron-Core's precision-aware optimizer (--exp-avg-dtype/--exp-avg-sq-dtype bf16) and
NeMo's Apex DistributedFusedAdam (optim.dtype bf16) store them."""
MASTER_WEIGHTS: tuple[str, ...] = ("fp32", "remainders", "none")
"""How the optimizer keeps the fp32 master copy of 16-bit weights (`Workload.master_weights`, `--master-weights`),
the default first: a full fp32 copy; only the 16 low bits the bf16 weight lacks ("remainders": Transformer
Engine's FusedAdam and Apex DistributedFusedAdam store_param_remainders); or none (updates applied to the bf16
weights: Apex DistributedFusedAdam with a bf16 optimizer dtype)."""
ATTENTION_KERNELS: tuple[str, ...] = ("auto", "flash2", "flash1")
"""Fused attention kernels the cost model times (`Workload.attention_kernel`, `--attention-kernel`), the default
first. auto: the GPU's fastest fused kernel as its profile measures it (`attention_efficiency`): cuDNN attention on
Hopper, which PyTorch's SDPA picks there by default since torch 2.9 (pytorch/pytorch#162073) and Transformer Engine
runs; FlashAttention-2 on Ampere, where it is the fastest. flash2: FlashAttention-2 on every GPU
(`attention_efficiency_flash2`): PyTorch's SDPA before torch 2.9 (the flash backend first, cuDNN opt-in:
pytorch/pytorch#138649), TorchTitan on Hopper (its SDPA wrapper ranks FLASH_ATTENTION first and adds cuDNN only on
sm100), the flash-attn 2 package. flash1: FlashAttention-1 (the flash-attn 1.x package), half as fast as
FlashAttention-2 (`planner.cost.efficiency.FLASH2_SPEEDUP_OVER_FLASH1`): Megatron-LM's --use-flash-attn from its
January 2023 integration until flash-attn 2, whose release renamed the function that code called."""
SENT_STAGE_OUTPUTS: tuple[str, ...] = ("freed", "kept", "kept-tp-shard")
"""What a pipeline stage keeps of each output it has sent until that micro-batch's backward
(`Workload.sent_stage_outputs`, `RuntimeCosts.sent_stage_outputs`): nothing (Megatron's deallocate_output_tensor),
the stage's local output (torch.distributed.pipelining's forward cache, Megatron-LM 2021), or this TP rank's 1/tp
slice of it (DeepSpeed's pipeline engine with model parallelism)."""
TP_OVERLAP_RUNTIMES: tuple[str, ...] = ("pytorch-compile", "megatron")
"""Runtimes that can pipeline TP collectives with their GEMMs (`Workload.tp_comm_overlap`): PyTorch's async TP is
a torch.compile pass (TorchTitan `--compile.enable_async_tensor_parallel`), Megatron has `--tp-comm-overlap`."""
