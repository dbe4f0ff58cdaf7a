"""Non-GEMM work of an MoE layer: the router's element-wise passes and the token permute / unpermute, in HBM bytes.

The router GEMM and the expert GEMMs are timed by `compute.layer_time_s`; the EP and expert-TP collectives by
`comm`. What this module counts is the data movement around them, per MoE layer and micro-batch on one rank,
as bytes for `compute` to divide by the HBM bandwidth. Notation: N the tokens that enter the dispatcher on the
rank, R = top_k N the (token, expert) rows it sends, R_e the rows its local experts receive (top_k T: the EP
all-to-all is balanced on average, and expert TP gathers the rows of all TP ranks), h the hidden size, a the bytes
of an activation element, E the number of routed experts. Counts are in rows of h elements unless said.

megatron: Megatron-Core's `MoEAlltoAllTokenDispatcher` (megatron/core/transformer/moe/token_dispatcher.py and
  moe_utils.py at df0430dbf2, 2025-04, the Megatron-Core of Liu et al. 2025), with its default
  `moe_permute_fusion=False` (transformer_config.py; the fused TE kernels move the same rows in permute and sort,
  and R + N instead of 3R + 2N in unpermute). N = T/tp under sequence parallelism (the dispatcher permutes the
  rank's sequence shard, `ep_dispatch_tokens`), else T.
  forward   `permute`: `tokens.index_select(0, sorted_indices)` reads and writes R rows (2R); `sort_chunks_by_idxs`
            (only with more than one local expert): `torch.cat` of the received chunks in expert order (2 R_e);
            the reverse sort after the experts (2 R_e); `unpermute`: `permuted_tokens * probs` (2R), `torch.zeros`
            of the output (N), `scatter_add_` reading R rows and writing N (R + N): 5R + 4R_e + 2N;
  backward  index_select's backward scatters into zeros (R + 2N); each sort's backward is the `torch.cat` of
            the gradient chunks back (2 R_e, twice); scatter_add's backward gathers R rows (2R); the product's two
            gradients: the rows' (2R) and the probabilities' (a row-wise dot product reading 2R): 7R + 4R_e + 2N.
pytorch, pytorch-compile: the executor's MoE (executor/moe.py `MoE.forward`, executor/ep.py `ExpertExchange`).
  Counted the same under torch.compile: the split sizes are read on the host (`counts.tolist()`), which breaks
  the graph around the experts, and the gathers and scatters have data-dependent shapes (LESS SURE: not
  measured). N = T (every rank dispatches its whole micro-batch), R_e = R.
  forward   `tokens[token_idx]` (2R); under EP `received[order]` and `y[back]` (2R each); `torch.cat` of the
            experts' outputs (`Experts.forward`: 2R); `y * weights` (2R); `zeros_like(tokens).index_add(...)`,
            out of place: zeros (N), its clone (2N), R rows read and N written (R + N): 7R + 4N, 11R + 4N with EP;
  backward  index_add's backward gathers the output gradient's rows (2R); the product's two gradients (2R + 2R);
            the `torch.cat` backward is views (0); under EP each indexing's backward writes zeros and scatters
            into them (3R, twice); `tokens[token_idx]`'s backward scatters R rows into zeros of N (R + 2N):
            7R + 2N, 13R + 2N with EP.
  With shared experts their output is added to the routed one (read 2N, write N, forward only).
Router, both runtimes (executor/moe.py `torch.softmax(self.router(tokens).float())`, executor/routing.py topk;
  Megatron-Core `topk_softmax_with_capacity`: `softmax(logits, dtype=float32)`, topk, the aux loss over the
  probabilities): per token the fp32 upcast (a + 4), softmax (4 + 4) and top-k (4) passes over E logits: (a + 16)E
  forward; backward softmax's (4 + 4 + 4) and the cast back (4 + a): (a + 16)E.
Routing imbalance is not counted: the busiest EP rank serves more than the mean top_k T rows under dropless
routing, but no published measurement of that excess under aux-loss balancing was found (docs/cost_sources.md
section 6b); with a capacity factor of 1 and token dropping (Liu et al. 2025 Sec. 4.2) no expert exceeds the mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost.runtime import runtime_costs

ROUTER_BYTES_PER_LOGIT = 16.0  # fp32 softmax and top-k passes per logit, forward and backward alike (docstring)


@dataclass(frozen=True)
class DispatchRows:
    """Rows of h elements one MoE layer's permute / unpermute moves per micro-batch (forward, backward)."""

    fwd: np.ndarray
    bwd: np.ndarray


def ep_dispatch_tokens(ctx, tokens: np.ndarray, tp: np.ndarray, sp: np.ndarray) -> np.ndarray:
    """Tokens of one micro-batch a rank sends through the EP all-to-all: its sequence-parallel shard (T/tp) where
    the runtime dispatches after SP (`RuntimeCosts.ep_dispatch_sequence_shard`), else all T."""
    if not runtime_costs(ctx.workload).ep_dispatch_sequence_shard:
        return tokens
    return np.where(np.asarray(sp, dtype=bool) & (tp > 1), tokens / np.maximum(tp, 1), tokens)


def dispatch_rows(ctx, tokens: np.ndarray, dispatched: np.ndarray, ep: np.ndarray) -> DispatchRows:
    """Rows moved by the token permute and unpermute of one MoE layer (see the module docstring).

    `tokens` is the micro-batch's T on the rank, `dispatched` the N tokens that enter its dispatcher
    (`ep_dispatch_tokens`), `ep` the expert-parallel degree."""
    moe = ctx.model.moe
    k = float(moe.top_k)
    n = np.asarray(dispatched, dtype=float)
    r = k * n
    shared = 3.0 * n if moe.num_shared_experts else 0.0
    if runtime_costs(ctx.workload).ep_dispatch_sequence_shard:
        r_e = k * np.asarray(tokens, dtype=float)
        sorts = np.where(moe.num_experts / np.asarray(ep, dtype=float) > 1, 4.0 * r_e, 0.0)
        return DispatchRows(fwd=5 * r + sorts + 2 * n + shared, bwd=7 * r + sorts + 2 * n)
    exchange = np.where(np.asarray(ep) > 1, 1.0, 0.0)
    return DispatchRows(fwd=(7 + 4 * exchange) * r + 4 * n + shared, bwd=(7 + 6 * exchange) * r + 2 * n)


def dispatch_s(ctx, tokens: np.ndarray, dispatched: np.ndarray, ep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Seconds of one MoE layer's permute / unpermute and router passes per micro-batch (forward, backward):
    their bytes at the GPU's HBM bandwidth. CPU devices keep the reference count without them (their measured
    framework overhead is a residual over it, as for `elementwise`)."""
    zeros = np.zeros(np.shape(tokens), dtype=float)
    if ctx.model.moe is None or ctx.gpu_kind_is_cpu:
        return zeros, zeros
    row_bytes = ctx.model.hidden_size * ctx.act_bytes
    rows = dispatch_rows(ctx, tokens, dispatched, ep)
    router = np.asarray(dispatched, dtype=float) * ctx.model.moe.num_experts * (ctx.act_bytes + ROUTER_BYTES_PER_LOGIT)
    bw = ctx.memory_bandwidth_Bps
    return zeros + (rows.fwd * row_bytes + router) / bw, zeros + (rows.bwd * row_bytes + router) / bw
