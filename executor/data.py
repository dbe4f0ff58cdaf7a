"""Training data: the global batch of step k is a fixed tensor; each rank reads its slice of it.

Two sources, one contract: `rows(step, start, stop)` returns rows [start, stop) of step `step`'s global batch
as (rows, seq_len + 1) int64 tokens (inputs are [:, :-1], targets [:, 1:]). Nothing depends on the layout,
so every layout trains on the same data, and resuming at step k (on any mesh) reads exactly what an
uninterrupted run would have read: the data position is the step number.

  SyntheticTokens   row r of step k is drawn from a CPU generator seeded with sha256(seed, k, r), uniform
                    over the vocabulary. Each rank draws only its own rows.
  MemmapTokens      a flat file of uint16 or uint32 token ids (nanoGPT's .bin format), memory-mapped; row r
                    of step k is the window of seq_len + 1 tokens starting at ((k-1)*B + r) * (seq_len + 1),
                    wrapping around at the end of the file.

`local_batch` cuts a DP rank's rows (the batch is split over dp_replicate x dp_shard) and, under CP, the
rank's two load-balanced sequence chunks.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch

from executor.cp import cp_shard
from planner.errors import UserError
from planner.plan.preflight import check_token_file


class SyntheticTokens:
    def __init__(self, *, vocab_size: int, seq_len: int, seed: int) -> None:
        self.vocab_size, self.seq_len, self.seed = vocab_size, seq_len, seed

    def _row(self, step: int, row: int) -> torch.Tensor:
        digest = hashlib.sha256(f"data:{self.seed}:{step}:{row}".encode()).digest()
        gen = torch.Generator(device="cpu").manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))
        return torch.randint(0, self.vocab_size, (self.seq_len + 1,), generator=gen, dtype=torch.int64)

    def rows(self, step: int, start: int, stop: int, global_batch: int) -> torch.Tensor:
        del global_batch  # rows are independent of the batch size
        return torch.stack([self._row(step, r) for r in range(start, stop)])


class MemmapTokens:
    def __init__(self, path: str | Path, *, dtype: str, vocab_size: int, seq_len: int, wrap_vocab: bool) -> None:
        path = Path(path)
        check_token_file(path, dtype=dtype, seq_len=seq_len)  # the rules `meshplan run` checked before launching
        self.tokens = np.memmap(path, dtype=np.dtype(dtype), mode="r")
        self.path, self.vocab_size, self.seq_len, self.wrap_vocab = path, vocab_size, seq_len, wrap_vocab
        self.windows = len(self.tokens) // (seq_len + 1)
        if self.windows == 0:
            raise UserError(
                f"{len(self.tokens)} tokens, fewer than one sequence of seq_len+1={seq_len + 1}", where=str(path)
            )

    def rows(self, step: int, start: int, stop: int, global_batch: int) -> torch.Tensor:
        width = self.seq_len + 1
        out = np.empty((stop - start, width), dtype=np.int64)
        for i, r in enumerate(range(start, stop)):
            w = ((step - 1) * global_batch + r) % self.windows
            out[i] = self.tokens[w * width : (w + 1) * width]
        if self.wrap_vocab:
            out %= self.vocab_size  # smoke runs: a real token file against the scaled-down vocabulary
        elif out.max(initial=0) >= self.vocab_size:
            raise UserError(
                f"token id {int(out.max())} >= vocab_size={self.vocab_size}",
                where=str(self.path),
                fix="tokenize with the plan's model vocabulary, or pass --data-dtype matching the file "
                    "(meshplan run --data-dtype uint16|uint32)",
            )
        return torch.from_numpy(out)


def local_batch(
    source: SyntheticTokens | MemmapTokens,
    step: int,
    *,
    global_batch: int,
    dp: int,
    dp_rank: int,
    cp: int,
    cp_rank: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of this rank for `step`: rows of its DP slice, its CP chunks; shape (B/dp, S/cp)."""
    per_rank = global_batch // dp
    tokens = source.rows(step, dp_rank * per_rank, (dp_rank + 1) * per_rank, global_batch)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    if cp > 1:
        inputs, targets = cp_shard(inputs, cp_rank, cp), cp_shard(targets, cp_rank, cp)
    return inputs.contiguous(), targets.contiguous()
