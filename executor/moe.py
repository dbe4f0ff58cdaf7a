"""Mixture-of-experts MLP: softmax router, top-k routing (dropless or capacity), shared experts, expert parallelism.

Routing and the capacity rule live in executor.routing (Mixtral's top-k; GShard's capacity order). Shared
experts (DeepSeekMoE, Dai et al. 2024) see every token. With ep = 1 a rank holds every expert, replicated
or FSDP-sharded like any other weight; under expert parallelism (executor.ep) it holds num_experts/ep of
them and `exchange` moves the routed rows to the experts' ranks and back. Both paths run the same code up
to that exchange: route, sort the served (token, slot) assignments by expert, run the experts on their rows,
add each output row, weighted by its router weight, to its token.

Every (local) expert runs on every step, on its possibly empty set of rows: an expert that receives no token
still takes part in autograd and produces a zero gradient, so FSDP/DDP see the same gradients on every
rank and no collective is skipped on one rank but not another.

No auxiliary load-balancing loss: the reference model trains what the plan describes; a balance loss
changes the objective, not the layout, and can be added without touching the parallel code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn

from executor.layers import FeedForward
from executor.routing import SequenceShard, capacity_mask, route

if TYPE_CHECKING:
    from executor.model_args import MoEArgs


class Experts(nn.ModuleDict):
    """The routed experts a rank holds, keyed by global expert index (all of them with ep = 1); under EP
    one FSDP unit on the expert-data-parallel mesh (executor.fsdp)."""

    def forward(self, rows: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """Rows sorted by expert, `counts[i]` of them for the i-th held expert; outputs in the same order."""
        chunks = rows.split(counts)
        return torch.cat([expert(chunk) for expert, chunk in zip(self.values(), chunks, strict=True)])


class MoE(nn.Module):
    def __init__(self, hidden: int, moe: MoEArgs, *, swiglu: bool, bias: bool) -> None:
        super().__init__()
        self.top_k = moe.top_k
        self.num_experts = moe.num_experts
        self.capacity_factor = moe.capacity_factor
        self.router = nn.Linear(hidden, moe.num_experts, bias=False)
        expert_width = moe.expert_ffn_hidden_size
        self.experts = Experts(
            {str(e): FeedForward(hidden, expert_width, swiglu=swiglu, bias=bias) for e in range(moe.num_experts)}
        )
        # DeepSeek-V3's aux-loss-free balancing bias: shifts which experts are chosen, not their weights.
        # Kept (so the model holds what the spec counts) but not updated: its load-based update rule is
        # outside this executor, so it stays 0 and routing is plain top-k.
        if moe.router_bias:
            self.register_buffer("router_bias", torch.zeros(moe.num_experts))
        else:
            self.router_bias = None
        self.shared = None
        if moe.num_shared_experts:
            width = moe.expert_ffn_hidden_size * moe.num_shared_experts
            self.shared = FeedForward(hidden, width, swiglu=swiglu, bias=bias)
        self.exchange: Callable[[torch.Tensor, torch.Tensor, Experts], torch.Tensor] | None = None
        """Expert parallelism (executor.ep.ExpertExchange): rows to their experts' ranks and back; None: local."""
        self.sequence_shard = SequenceShard()
        """Where this rank's tokens sit in their sequences (CP), for the capacity rule."""

    def assignments(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Served (token, slot) assignments of x (B, S, H) sorted by expert: token and slot indices, router
        weights (N, k) and rows per global expert (E,)."""
        tokens = x.reshape(-1, x.shape[-1])
        probs = torch.softmax(self.router(tokens).float(), dim=-1)  # (N, E)
        weights, chosen = route(probs, self.top_k, self.router_bias)  # (N, k) each
        served = torch.arange(chosen.numel(), device=x.device)
        if self.capacity_factor is not None:
            keep = capacity_mask(chosen.view(*x.shape[:-1], self.top_k), self.capacity_factor, self.num_experts,
                                 self.sequence_shard)
            served = served[keep.reshape(-1)]
        expert_of = chosen.reshape(-1)[served]
        order = torch.argsort(expert_of, stable=True)
        served = served[order]
        counts = torch.bincount(expert_of, minlength=self.num_experts)
        return served // self.top_k, served % self.top_k, weights.to(x.dtype), counts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])  # (N, H)
        token_idx, slot, weights, counts = self.assignments(x)
        rows = tokens[token_idx]
        if self.exchange is None:
            y = self.experts(rows, counts.tolist())
        else:
            y = self.exchange(rows, counts, self.experts)
        out = torch.zeros_like(tokens).index_add(0, token_idx, y * weights[token_idx, slot, None])
        if self.shared is not None:
            out = out + self.shared(tokens)
        return out.reshape(shape)
