"""Which tokens of a sequence each context-parallel rank holds (load-balanced chunks, executor.cp).

The sequence is cut into 2*cp chunks; CP rank i holds chunks i and 2*cp-1-i. Kept apart from executor.cp
(the attention swap, which needs the model) so that the MoE router (executor.routing) can place tokens too.
"""

from __future__ import annotations

import torch


def cp_chunks(cp_rank: int, cp: int) -> tuple[int, int]:
    """Global chunk indices held by `cp_rank`: (i, 2cp-1-i)."""
    return cp_rank, 2 * cp - 1 - cp_rank


def cp_positions(seq_len: int, cp_rank: int, cp: int) -> torch.Tensor:
    """Absolute positions of the tokens a CP rank holds, in its local order (length seq_len // cp)."""
    c = seq_len // (2 * cp)
    return torch.cat([torch.arange(g * c, (g + 1) * c) for g in cp_chunks(cp_rank, cp)])
