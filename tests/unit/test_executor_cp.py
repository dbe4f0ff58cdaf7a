"""Context-parallel building blocks on one process: chunk layout, positions, gather order, attention."""

from __future__ import annotations

import pytest
import torch

from executor.cp import _gather_order, attend_local_chunks, cp_chunks, cp_positions, cp_shard
from executor.model import CoreAttention


@pytest.mark.parametrize("cp", [1, 2, 3, 4])
def test_chunks_are_load_balanced_and_cover_the_sequence_once(cp: int) -> None:
    held = [g for r in range(cp) for g in cp_chunks(r, cp)]
    assert sorted(held) == list(range(2 * cp))
    # Causal work of chunk g is proportional to g + 1/2; every rank gets the same total (2cp)/2... = cp.
    assert len({sum(g + 0.5 for g in cp_chunks(r, cp)) for r in range(cp)}) == 1


def test_positions_of_cp2_by_hand() -> None:
    # S=8, cp=2: chunks of 2 tokens; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
    assert cp_positions(8, 0, 2).tolist() == [0, 1, 6, 7]
    assert cp_positions(8, 1, 2).tolist() == [2, 3, 4, 5]
    x = torch.arange(8)[None]
    assert cp_shard(x, 0, 2).tolist() == [[0, 1, 6, 7]]


@pytest.mark.parametrize("cp", [2, 4])
def test_gather_order_restores_the_sequence(cp: int) -> None:
    """Concatenating the ranks' local tokens (what all-gather returns) and applying the order gives 0..S-1."""
    seq = 8 * cp
    gathered = torch.cat([cp_positions(seq, r, cp) for r in range(cp)]).view(2 * cp, -1)
    assert gathered[_gather_order(cp)].flatten().tolist() == list(range(seq))


@pytest.mark.parametrize("cp", [2, 4])
def test_local_chunk_attention_equals_full_causal_attention(cp: int) -> None:
    gen = torch.Generator().manual_seed(0)
    seq = 4 * cp
    q = torch.randn(2, 4, seq, 8, generator=gen)
    k = torch.randn(2, 2, seq, 8, generator=gen)
    v = torch.randn(2, 2, seq, 8, generator=gen)
    full = CoreAttention()(q, k, v)
    for rank in range(cp):
        local = attend_local_chunks(cp_shard(q, rank, cp, dim=2), k, v, rank, cp)
        torch.testing.assert_close(local, cp_shard(full, rank, cp, dim=2), rtol=1e-5, atol=1e-6)
