"""Building blocks of the reference model: norms, rotary embeddings, the dense MLP, GQA head sharing."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from executor.model_args import ModelArgs


def make_norm(args: ModelArgs) -> nn.Module:
    if args.norm == "layernorm":
        return nn.LayerNorm(args.hidden_size, eps=args.norm_eps)
    return nn.RMSNorm(args.hidden_size, eps=args.norm_eps)


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin of shape (S, hd/2) in fp32 for the given absolute token positions (local ones under CP)."""
    exponents = torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim
    inv_freq = 1.0 / (theta**exponents)
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the two halves of each head (the "rotate half" form); x: (B, S, heads, hd)."""
    half = x.shape[-1] // 2
    x1, x2 = x.float()[..., :half], x.float()[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).type_as(x)


def repeat_kv(k: torch.Tensor, v: torch.Tensor, num_q_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """GQA: each KV head serves num_q_heads/num_kv_heads consecutive query heads (also per TP shard)."""
    groups = num_q_heads // k.shape[1]
    if groups == 1:
        return k, v
    return k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x); GELU: w2(gelu(w1 x))."""

    def __init__(self, hidden: int, ffn_hidden: int, *, swiglu: bool, bias: bool) -> None:
        super().__init__()
        self.w1 = nn.Linear(hidden, ffn_hidden, bias=bias)
        self.w2 = nn.Linear(ffn_hidden, hidden, bias=bias)
        self.w3 = nn.Linear(hidden, ffn_hidden, bias=bias) if swiglu else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.w3 is not None:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x), approximate="tanh"))
