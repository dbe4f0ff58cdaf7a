"""Context parallelism as in the Llama 3 paper (Dubey et al. 2024, section 3.3.2): all-gather K and V.

The sequence of S tokens is cut into 2*cp chunks of c = S/(2*cp) tokens; CP rank i holds chunks i and
2*cp-1-i (load balancing: an early, cheap chunk of the causal triangle with a late, expensive one). Each
rank computes Q, K, V for its own 2c tokens, all-gathers K and V over the CP group (sequence in chunk order
restored), and computes attention for its two query chunks: the query chunk of global index g sees the keys
[0, (g+1)*c) with a causal mask aligned to the lower-right corner (`causal_lower_right`), i.e. query j of the
chunk sees key positions <= g*c + j. Everything else in the model is per-token, so only attention changes;
RoPE and learned positions use the tokens' true positions (`cp_positions`).

The gather is `all_gather_single_autograd`, whose backward is a reduce-scatter: the K/V gradient of each
rank's tokens sums the contributions of every rank's queries. `torch.distributed.nn.functional.all_gather`
must not be used here (its K/V gradients are wrong on gloo). The public `context_parallel` API (ring
attention) does not run on CPU; this one code path runs on CPU/gloo and GPU/NCCL alike.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.nn.attention.bias import causal_lower_right

from executor.cp_chunks import cp_chunks, cp_positions
from executor.layers import repeat_kv
from executor.model import Transformer

__all__ = ["apply_cp", "cp_chunks", "cp_positions", "cp_shard"]


def cp_shard(x: torch.Tensor, cp_rank: int, cp: int, dim: int = 1) -> torch.Tensor:
    """This rank's two chunks of a full-sequence tensor along `dim` (tokens, targets)."""
    chunks = x.chunk(2 * cp, dim=dim)
    return torch.cat([chunks[g] for g in cp_chunks(cp_rank, cp)], dim=dim)


def _gather_order(cp: int) -> list[int]:
    """Position in the gathered tensor (rank-major, two chunks per rank) of global chunk n, for n in order."""
    order = []
    for n in range(2 * cp):
        rank, second = (n, 0) if n < cp else (2 * cp - 1 - n, 1)
        order.append(2 * rank + second)
    return order


class ContextParallelAttention(nn.Module):
    """Drop-in for `CoreAttention` on (B, heads, S/cp, hd) tensors; see the module docstring."""

    def __init__(self, cp_mesh: DeviceMesh) -> None:
        super().__init__()
        self.cp = cp_mesh.size()
        self.cp_rank = cp_mesh.get_local_rank()
        self.group = cp_mesh.get_group()
        self.order = _gather_order(self.cp)

    def _gather_sequence(self, t: torch.Tensor) -> torch.Tensor:
        """(B, h, S/cp, hd) local -> (B, h, S, hd) full sequence in natural order."""
        bsz, heads, local, hd = t.shape
        c = local // 2
        x = t.permute(2, 0, 1, 3).contiguous()  # (S/cp, B, h, hd): gather along dim 0
        # Imported here: the function exists from torch 2.13 on, and cp == 1 plans must run on older torch.
        from torch.distributed._functional_collectives import all_gather_single_autograd

        full = all_gather_single_autograd(x, 0, self.group)  # (S, B, h, hd), rank-major chunk pairs
        full = full.view(2 * self.cp, c, bsz, heads, hd)[self.order]
        return full.reshape(2 * self.cp * c, bsz, heads, hd).permute(1, 2, 0, 3)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k_all, v_all = self._gather_sequence(k), self._gather_sequence(v)
        return attend_local_chunks(q, k_all, v_all, self.cp_rank, self.cp)


def attend_local_chunks(q: torch.Tensor, k_all: torch.Tensor, v_all: torch.Tensor, cp_rank: int, cp: int) -> torch.Tensor:
    """Causal attention of a CP rank's two query chunks (B, h, 2c, hd) over the full K/V (B, hkv, S, hd).

    Query chunk g sees keys [0, (g+1)c) under a lower-right-aligned causal mask: its query j sees key
    positions <= g*c + j. `causal_lower_right` dispatches to the fused kernels on GPU without materialising
    a mask; on CPU it falls back to an explicit one.
    """
    k_all, v_all = repeat_kv(k_all, v_all, q.shape[1])
    c = q.shape[2] // 2
    outs = []
    for j, g in enumerate(cp_chunks(cp_rank, cp)):
        keys = (g + 1) * c
        mask = causal_lower_right(c, keys)
        q_chunk = q[:, :, j * c : (j + 1) * c]
        outs.append(F.scaled_dot_product_attention(q_chunk, k_all[:, :, :keys], v_all[:, :, :keys], attn_mask=mask))
    return torch.cat(outs, dim=2)


def apply_cp(part: Transformer, cp_mesh: DeviceMesh) -> None:
    """Swap every layer's attention core for the CP one (no-op for a 1-rank CP mesh)."""
    if cp_mesh.size() == 1:
        return
    for block in part.layers.values():
        block.attention.core = ContextParallelAttention(cp_mesh)
