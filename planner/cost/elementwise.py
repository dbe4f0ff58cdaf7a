"""Non-GEMM work of a decoder layer and of the loss: HBM bytes per token, by runtime (`cost.runtime`).

Memory-bound kernels take bytes / HBM bandwidth; this module counts the bytes. Per token and decoder layer at
tp = 1, with h hidden, q = heads x head_dim, kv = kv_heads x head_dim, f the MLP width, a the bytes of an
activation element (2 for 16-bit, 4 on fp32 CPU runs):

Fused kernels (megatron, pytorch-compile): each op group is one pass that reads its inputs and writes its output:
  forward   2 norms 2h*a each... counted as elements: norms 4h, residual adds 6h, RoPE 2(q + kv), SwiGLU 3f or
            GeLU 2f, times a; backward twice the forward (the convention the A100 layer fit of
            efficiency.py was made with: Korthikanti et al. 2022 Table 4, Megatron's fused kernels).
Eager PyTorch (pytorch; executor/model.py Block, executor/layers.py), op by op:
  norms     nn.RMSNorm / nn.LayerNorm run PyTorch's fused norm kernels: forward read + write (2a) per element of
            h, twice; backward dx (read dy, x; write dx: 3a) and d(weight) (read dy, x: 2a), twice: 4h*a / 10h*a;
  residual  two adds (read 2, write 1): 6h*a forward; backward one gradient accumulation each: 6h*a;
  RoPE      apply_rope on q and k: x.float() (read a, write 4), four products (1 fp32 element each), the
            subtraction and the addition (1.5 each), torch.cat (2), .type_as (read 4, write a): 2a + 44 bytes per
            element; backward through the same graph (slice gradients materialised into zeros, two accumulations,
            the two casts): 2a + 68 bytes per element; times (q + kv);
  SwiGLU    silu (read, write) then the product (read 2, write 1): 5f*a; backward the product's two gradients
            (read 2, write 1 each) and silu's (read 2, write 1): 9f*a. GeLU: 2f*a / 3f*a;
  MoE       in an MoE layer the activation runs on every routed row: f = (top_k + shared experts) x the expert
            width (`mlp_width`); the permute / unpermute around the experts is counted by `moe_dispatch`;
  GQA       repeat_kv materialises K and V at the query-head count (read kv, write q, each): 2(q + kv)*a, and
            its backward sums them back the same way; under CP on the gathered full-sequence K/V (cp x).
Norms and residual adds are replicated across TP ranks without sequence parallelism and split with it
(Korthikanti et al. 2022 Sec. 4.2.2); everything else is split by TP.

fp8 workloads add the casts of the fp8 recipe around every linear layer (`fp8_cast_bytes_per_token`, bytes per
element from `cost.runtime.Fp8Casts`): each linear's input (replicated across TP like the hidden state for
column-parallel linears, split for row-parallel ones) and each linear's output gradient (the reverse).

CPU devices keep the fused count whatever the runtime: their measured framework overhead (calibrate) is the
residual of a measured layer over exactly that count, so it already holds what the eager ops add there.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

from planner.cost.runtime import runtime_costs
from planner.model.flops import gemm_tp_split, layer_gemms

ROPE_EAGER_FP32_BYTES = (44.0, 68.0)  # fp32 bytes per rotated element (forward, backward), see the docstring


@dataclass(frozen=True)
class LayerBytes:
    """HBM bytes per token of one decoder layer's element-wise work at tp = 1 (forward, backward): `local` is
    split by TP always, `replicated` only with sequence parallelism."""

    local_fwd: float
    local_bwd: float
    replicated_fwd: float
    replicated_bwd: float


def eager(ctx) -> bool:
    """Whether the layer runs op by op (eager PyTorch on a GPU)."""
    return runtime_costs(ctx.workload).eager_elementwise and not ctx.gpu_kind_is_cpu


def mlp_width(model, is_moe: bool) -> int:
    """Width of the MLP activation one token passes through in a layer: the dense MLP's, or in an MoE layer its
    top_k routed experts' and its shared experts' together (each runs the activation on its own rows)."""
    if not is_moe or model.moe is None:
        return model.ffn_hidden_size
    return (model.moe.top_k + model.moe.num_shared_experts) * model.moe.expert_ffn_hidden_size


def layer_bytes_per_token(ctx, is_moe: bool = False) -> LayerBytes:
    """Element-wise bytes per token of one decoder layer, dense or MoE (see the module docstring), fp8 casts
    included."""
    return with_fp8_casts(ctx, is_moe, _layer_bytes(ctx, is_moe))


def _layer_bytes(ctx, is_moe: bool) -> LayerBytes:
    """The element-wise work alone (norms, residual adds, RoPE, activation)."""
    m = ctx.model
    a = float(ctx.act_bytes)
    h = float(m.hidden_size)
    q = float(m.num_heads * m.head_dim)
    kv = float(m.num_kv_heads * m.head_dim)
    f = float(mlp_width(m, is_moe))
    swiglu = m.mlp == "swiglu"
    rope = q + kv if m.position == "rope" else 0.0
    if not eager(ctx):
        local = ((3 * f if swiglu else 2 * f) + 2 * rope) * a
        replicated = (4 + 6) * h * a
        return LayerBytes(local, 2 * local, replicated, 2 * replicated)
    rope_f, rope_b = ROPE_EAGER_FP32_BYTES
    local_fwd = (5 * f if swiglu else 2 * f) * a + rope * (2 * a + rope_f)
    local_bwd = (9 * f if swiglu else 3 * f) * a + rope * (2 * a + rope_b)
    return LayerBytes(local_fwd, local_bwd, (4 + 6) * h * a, (10 + 6) * h * a)


def with_fp8_casts(ctx, is_moe: bool, work: LayerBytes) -> LayerBytes:
    """`work` plus the fp8 recipe's cast passes when the workload trains in fp8 on a GPU."""
    if ctx.workload.dtype != "fp8" or ctx.gpu_kind_is_cpu:
        return work
    casts = fp8_cast_bytes_per_token(ctx.model, is_moe, runtime_costs(ctx.workload).fp8_casts)
    return LayerBytes(*(x + y for x, y in zip(astuple(work), astuple(casts))))


# The linears that read one input (the normed hidden state): q/k/v and the MLP's gate/up. A recipe that fuses them
# (TE's QKV and FC1) casts that input once.
_SHARED_INPUT_SUFFIXES = {"_q": "_qkv", "_k": "_qkv", "_v": "_qkv", "_gate": "_in", "_up": "_in"}


def fp8_cast_bytes_per_token(model, is_moe: bool, casts) -> LayerBytes:
    """HBM bytes per token of one layer's fp8 casts at tp = 1 (`casts`: `cost.runtime.Fp8Casts`). Per linear of
    `layer_gemms` (the MoE router stays bf16, planner.layout.workload.UNQUANTIZED_MATMUL_DTYPE): its input elements
    (rows per token x k) at the input bytes, the normed ones (column-parallel linears reading the hidden state,
    not the routed experts) at `normed_input_fwd`; its output gradient (rows x n) at `grad_bwd`. Column-parallel
    inputs and row-parallel outputs are hidden-state sized, replicated across TP unless sequence parallel."""
    h = model.hidden_size
    local_fwd = local_bwd = rep_fwd = rep_bwd = 0.0
    cast_inputs: set[str] = set()
    for name, rows, k, n in layer_gemms(model, is_moe, 1, tp=1):
        if name == "moe_router":
            continue
        kind = gemm_tp_split(name)
        suffix = next((s for s in _SHARED_INPUT_SUFFIXES if name.endswith(s)), None)
        group = name[: -len(suffix)] + _SHARED_INPUT_SUFFIXES[suffix] if suffix and not casts.per_linear else name
        if group not in cast_inputs:
            cast_inputs.add(group)
            normed = kind == "column" and k == h and not name.startswith("moe_expert")
            fwd = (casts.normed_input_fwd if normed else casts.input_fwd) * rows * k
            bwd = casts.input_bwd * rows * k
            if kind == "row":
                local_fwd, local_bwd = local_fwd + fwd, local_bwd + bwd
            else:
                rep_fwd, rep_bwd = rep_fwd + fwd, rep_bwd + bwd
        grad = casts.grad_bwd * rows * n
        if kind == "column":
            local_bwd += grad
        else:
            rep_bwd += grad
    return LayerBytes(local_fwd, local_bwd, rep_fwd, rep_bwd)


def gqa_repeat_bytes_per_token(ctx) -> float:
    """Forward bytes per local token that eager `repeat_kv` moves at cp = 1 and tp = 1 (0 without GQA or when
    fused); the backward moves as many. Multiply by cp: it runs on the gathered sequence."""
    m = ctx.model
    if not eager(ctx) or m.num_kv_heads == m.num_heads:
        return 0.0
    q = float(m.num_heads * m.head_dim)
    kv = float(m.num_kv_heads * m.head_dim)
    return 2 * (q + kv) * ctx.act_bytes


def cross_entropy_bytes_per_logit(ctx) -> tuple[float, float]:
    """HBM bytes per logit of the loss (forward, backward) for the workload's runtime (`cost.runtime`); CPU
    devices keep the reference count of three fp32 passes forward (their overhead is measured against it)."""
    if ctx.gpu_kind_is_cpu:
        return 12.0, 24.0
    return runtime_costs(ctx.workload).cross_entropy_bytes
