"""Top-k routing of the reference MoE and its capacity rule: the same function on one process and in any layout.

Routing (Mixtral, Jiang et al. 2024): softmax over all experts in fp32, keep the top k, renormalise their
weights to sum to 1. With a DeepSeek-V3 router bias the bias shifts which experts are chosen, not their
weights (DeepSeek-V3 report, Sec. 2.1.2).

Capacity (`MoESpec.capacity_factor` = c; None = dropless, every assignment is served). A routing group is
one sequence: each expert serves at most C = ceil(c * seq_len * top_k / num_experts) of the sequence's
(token, slot) assignments. Assignments claim places in GShard's order (Lepikhin et al. 2020, Algorithm 1:
the positions of second choices start after all first choices): every token's first choice in token order,
then every token's second choice, and so on. An assignment past C is dropped: it adds nothing, and the
token's other experts keep their weights (Switch Transformer, Fedus et al. 2022, Sec. 2.2: an overflowing
token passes on through the residual connection).

Why one sequence is the group: it keeps the trained function independent of micro-batch size, DP, PP and
the schedule (a rank-local batch changes with each of them), so the one-process reference applies exactly
the rule that every layout applies. Under CP a rank holds two chunks of each sequence (executor.cp); the CP
ranks all-gather their chosen experts (integers, no gradient), rebuild the sequence in position order and
each keeps the verdicts of its own tokens. Under TP every rank of a TP group routes the same tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from executor.cp_chunks import cp_positions


def route(probs: torch.Tensor, top_k: int, bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights, chosen experts), both (N, k), from router probabilities (N, E); weights sum to 1 per token."""
    if bias is None:
        weights, chosen = torch.topk(probs, top_k, dim=-1)
    else:
        chosen = torch.topk(probs + bias, top_k, dim=-1).indices
        weights = probs.gather(-1, chosen)
    return weights / weights.sum(dim=-1, keepdim=True), chosen


def capacity(seq_len: int, top_k: int, num_experts: int, factor: float) -> int:
    """Assignments one expert serves per sequence: ceil(factor * seq_len * top_k / num_experts)."""
    return math.ceil(factor * seq_len * top_k / num_experts)


def within_capacity(chosen: torch.Tensor, num_experts: int, limit: int) -> torch.Tensor:
    """Which assignments of whole sequences (B, S, k) an expert serves (bool, same shape), GShard's order."""
    batch, seq, k = chosen.shape
    slot_major = chosen.transpose(1, 2).reshape(batch, k * seq)  # first choices of all tokens, then second...
    onehot = F.one_hot(slot_major, num_experts)  # (B, kS, E)
    place = (onehot.cumsum(dim=1) * onehot).sum(dim=-1) - 1  # 0-based place in its expert's queue
    return (place < limit).reshape(batch, k, seq).transpose(1, 2)


@dataclass(frozen=True)
class SequenceShard:
    """Where a rank's tokens sit in their sequences: its CP group (None without CP), rank and degree."""

    group: dist.ProcessGroup | None = None
    rank: int = 0
    size: int = 1


def capacity_mask(chosen: torch.Tensor, factor: float, num_experts: int, shard: SequenceShard) -> torch.Tensor:
    """Bool (B, S_local, k): the assignments served under capacity `factor`, decided per whole sequence."""
    if shard.size == 1:
        return within_capacity(chosen, num_experts, capacity(chosen.shape[1], chosen.shape[2], num_experts, factor))
    gathered = [torch.empty_like(chosen) for _ in range(shard.size)]
    dist.all_gather(gathered, chosen.contiguous(), group=shard.group)
    seq = chosen.shape[1] * shard.size
    whole = torch.empty((chosen.shape[0], seq, chosen.shape[2]), dtype=chosen.dtype, device=chosen.device)
    for r, part in enumerate(gathered):
        whole[:, cp_positions(seq, r, shard.size).to(chosen.device)] = part
    keep = within_capacity(whole, num_experts, capacity(seq, chosen.shape[2], num_experts, factor))
    return keep[:, cp_positions(seq, shard.rank, shard.size).to(chosen.device)]
