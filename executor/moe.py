"""Mixture-of-experts MLP: softmax router, top-k routing, optional shared experts; experts data-parallel.

Routing follows Mixtral (Jiang et al. 2024): softmax over all experts, keep the top k, renormalise their
weights to sum to 1. Shared experts (DeepSeekMoE, Dai et al. 2024) see every token. Every rank holds all
experts (EP=1), so experts are replicated or FSDP-sharded like any other weight.

Every expert runs on every step, on its (possibly empty) set of tokens: an expert that receives no token
still takes part in autograd and produces a zero gradient, so FSDP/DDP see the same gradients on every
rank and no collective is skipped on one rank but not another.

No auxiliary load-balancing loss: the reference model trains what the plan describes; a balance loss
changes the objective, not the layout, and can be added without touching the parallel code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from executor.layers import FeedForward

if TYPE_CHECKING:
    from executor.model_args import MoEArgs


class MoE(nn.Module):
    def __init__(self, hidden: int, moe: MoEArgs, *, swiglu: bool, bias: bool) -> None:
        super().__init__()
        self.top_k = moe.top_k
        self.router = nn.Linear(hidden, moe.num_experts, bias=False)
        self.experts = nn.ModuleList(
            FeedForward(hidden, moe.expert_ffn_hidden_size, swiglu=swiglu, bias=bias) for _ in range(moe.num_experts)
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])  # (N, H)
        probs = torch.softmax(self.router(tokens).float(), dim=-1)  # (N, E)
        if self.router_bias is None:
            weights, chosen = torch.topk(probs, self.top_k, dim=-1)  # (N, k)
        else:
            chosen = torch.topk(probs + self.router_bias, self.top_k, dim=-1).indices
            weights = probs.gather(-1, chosen)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(tokens.dtype)
        out = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            token_idx, slot = torch.nonzero(chosen == e, as_tuple=True)
            y = expert(tokens[token_idx]) * weights[token_idx, slot, None]
            out = out.index_add(0, token_idx, y)
        if self.shared is not None:
            out = out + self.shared(tokens)
        return out.reshape(shape)
