"""The reference model: a Llama-style decoder (RMSNorm, RoPE, GQA, SwiGLU) with optional MoE layers.

Also covers the GPT-2 family of choices a `ModelSpec` can make (LayerNorm, GELU MLP, learned positions,
biases, tied embeddings), so a plan's model is built as specified at any size.

One `Transformer` object is one pipeline chunk: it holds the decoder layers it was given, keyed by their
*global* index (`layers.7.attention.wq.weight` is the same name in every layout, which is what makes the
per-name initialisation and DCP resharding layout-independent), the embeddings only on the first chunk and
the final norm and LM head only on the last. With one chunk it is the whole model.

Shapes: B batch, S sequence (local to this rank under CP), H hidden, nh/nkv heads, hd head dim.
References: Llama 2/3 (Touvron et al. 2023; Dubey et al. 2024), RoPE (Su et al. 2021), GQA (Ainslie et al.
2023), SwiGLU (Shazeer 2020), GPT-2 (Radford et al. 2019).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from executor.layers import FeedForward, apply_rope, make_norm, repeat_kv, rope_tables
from executor.model_args import ModelArgs
from executor.moe import MoE


class CoreAttention(nn.Module):
    """Causal softmax attention over (B, heads, S, hd) tensors; the part CP replaces and selective AC wraps."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k, v = repeat_kv(k, v, q.shape[1])
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        hd = args.head_dim
        self.head_dim = hd
        self.wq = nn.Linear(args.hidden_size, args.num_heads * hd, bias=args.qkv_bias)
        self.wk = nn.Linear(args.hidden_size, args.num_kv_heads * hd, bias=args.qkv_bias)
        self.wv = nn.Linear(args.hidden_size, args.num_kv_heads * hd, bias=args.qkv_bias)
        self.wo = nn.Linear(args.num_heads * hd, args.hidden_size, bias=args.linear_bias)
        self.core = CoreAttention()

    def forward(self, x: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None) -> torch.Tensor:
        bsz, seq, _ = x.shape
        # -1 heads: under TP each rank holds nh/tp query and nkv/tp key/value heads.
        q = self.wq(x).view(bsz, seq, -1, self.head_dim)
        k = self.wk(x).view(bsz, seq, -1, self.head_dim)
        v = self.wv(x).view(bsz, seq, -1, self.head_dim)
        if cos is not None and sin is not None:
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = self.core(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))  # (B, nh, S, hd)
        return self.wo(out.transpose(1, 2).reshape(bsz, seq, -1))


class Block(nn.Module):
    """Pre-norm decoder layer: h += attn(norm(h)); h += ffn(norm(h))."""

    def __init__(self, args: ModelArgs, layer: int) -> None:
        super().__init__()
        self.attention_norm = make_norm(args)
        self.attention = Attention(args)
        self.ffn_norm = make_norm(args)
        swiglu = args.mlp == "swiglu"
        if args.is_moe_layer(layer):
            assert args.moe is not None
            self.feed_forward: nn.Module = MoE(args.hidden_size, args.moe, swiglu=swiglu, bias=args.linear_bias)
        else:
            self.feed_forward = FeedForward(args.hidden_size, args.ffn_hidden_size, swiglu=swiglu, bias=args.linear_bias)

    def forward(self, h: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None) -> torch.Tensor:
        h = h + self.attention(self.attention_norm(h), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    """One pipeline chunk (or the whole model): [embeddings] -> layers[first:last] -> [norm -> LM head].

    `positions` (set by `set_positions`, absolute token positions of this rank's sequence, load-balanced under
    CP) feeds RoPE or the learned position table; it is a plain attribute, not state.
    """

    def __init__(self, args: ModelArgs, layer_ids: Iterable[int], *, first: bool, last: bool) -> None:
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.hidden_size) if first else None
        learned = args.position == "learned" and first
        self.pos_embeddings = nn.Embedding(args.max_seq_len, args.hidden_size) if learned else None
        self.layers = nn.ModuleDict({str(i): Block(args, i) for i in layer_ids})
        self.norm = make_norm(args) if last else None
        self.output = nn.Linear(args.hidden_size, args.vocab_size, bias=False) if last else None
        self.positions: torch.Tensor | None = None
        self.tie_weights()

    def tie_weights(self) -> None:
        """LM head = token embedding (tied models, single chunk). Called again after `to_empty`, which
        allocates a separate tensor per module and so unties them."""
        if self.args.tied_embeddings and self.output is not None and self.tok_embeddings is not None:
            self.output.weight = self.tok_embeddings.weight

    def set_positions(self, positions: torch.Tensor) -> None:
        self.positions = positions

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: token ids (B, S) on the first chunk, hidden states (B, S, H) elsewhere."""
        assert self.positions is not None, "call set_positions() before forward"
        if self.tok_embeddings is not None:
            h = self.tok_embeddings(x)
            if self.pos_embeddings is not None:
                h = h + self.pos_embeddings(self.positions[None, :])
        else:
            h = x
        cos = sin = None
        if self.args.position == "rope":
            cos, sin = rope_tables(self.positions, self.args.head_dim, self.args.rope_theta)
        for layer in self.layers.values():
            h = layer(h, cos, sin)
        if self.norm is not None:
            h = self.norm(h)
        if self.output is not None:
            h = self.output(h)
        return h


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over (B, S); fp32 logits so bf16 runs lose nothing in the softmax."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))
