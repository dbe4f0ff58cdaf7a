"""Data: the global batch of step k is fixed; DP and CP slices partition it exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from executor.cp import cp_positions
from executor.data import MemmapTokens, SyntheticTokens, local_batch
from planner.errors import UserError


def test_synthetic_rows_do_not_depend_on_batch_size_or_slice() -> None:
    src = SyntheticTokens(vocab_size=256, seq_len=16, seed=3)
    whole = src.rows(5, 0, 8, 8)
    assert whole.shape == (8, 17) and whole.dtype == torch.int64 and int(whole.max()) < 256
    assert torch.equal(src.rows(5, 4, 8, 8), whole[4:])
    assert torch.equal(src.rows(5, 4, 8, 64), whole[4:])
    assert not torch.equal(src.rows(6, 0, 8, 8), whole)


@pytest.mark.parametrize(("dp", "cp"), [(1, 1), (2, 1), (4, 2), (1, 4)])
def test_local_batches_tile_the_global_batch(dp: int, cp: int) -> None:
    src = SyntheticTokens(vocab_size=97, seq_len=32, seed=0)
    tokens = src.rows(2, 0, 8, 8)
    inputs = torch.full((8, 32), -1, dtype=torch.int64)  # -1: never a token, so gaps show
    targets = torch.full((8, 32), -1, dtype=torch.int64)
    for d in range(dp):
        for c in range(cp):
            x, y = local_batch(src, 2, global_batch=8, dp=dp, dp_rank=d, cp=cp, cp_rank=c)
            assert x.shape == (8 // dp, 32 // cp)
            rows = torch.arange(d * 8 // dp, (d + 1) * 8 // dp)[:, None]
            pos = (cp_positions(32, c, cp) if cp > 1 else torch.arange(32))[None, :]
            inputs[rows, pos] = x  # place the local tokens back at their global (row, position)
            targets[rows, pos] = y
    assert torch.equal(inputs, tokens[:, :-1]) and torch.equal(targets, tokens[:, 1:])


def test_memmap_windows_wrap_and_check_the_vocabulary(tmp_path) -> None:
    path = tmp_path / "tokens.bin"
    np.arange(50, dtype=np.uint16).tofile(path)
    src = MemmapTokens(path, dtype="uint16", vocab_size=100, seq_len=4, wrap_vocab=False)
    assert src.windows == 10  # 50 tokens // (seq_len + 1)
    # Step 2 of a global batch of 3: windows 3, 4, 5.
    assert src.rows(2, 0, 3, 3).tolist() == [list(range(15, 20)), list(range(20, 25)), list(range(25, 30))]
    assert src.rows(4, 1, 2, 3)[0].tolist() == list(range(0, 5))  # window (3*3 + 1) % 10 = 0: wrapped
    small = MemmapTokens(path, dtype="uint16", vocab_size=20, seq_len=4, wrap_vocab=False)
    with pytest.raises(UserError, match="token id 29 >= vocab_size=20"):
        small.rows(2, 0, 3, 3)
    wrapped = MemmapTokens(path, dtype="uint16", vocab_size=20, seq_len=4, wrap_vocab=True)
    assert wrapped.rows(2, 1, 2, 3)[0].tolist() == [0, 1, 2, 3, 4]  # 20..24 mod 20


def test_memmap_errors_are_one_line(tmp_path) -> None:
    with pytest.raises(UserError, match="--data .*missing.bin: cannot read the token file .No such file"):
        MemmapTokens(tmp_path / "missing.bin", dtype="uint16", vocab_size=10, seq_len=4, wrap_vocab=False)
    with pytest.raises(UserError, match="is a folder, not a token file"):  # it said "no such file"
        MemmapTokens(tmp_path, dtype="uint16", vocab_size=10, seq_len=4, wrap_vocab=False)
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"abc")  # 3 bytes: numpy's memmap raised a ValueError traceback on every rank
    with pytest.raises(UserError, match="3 bytes is not a whole number of uint16 tokens"):
        MemmapTokens(odd, dtype="uint16", vocab_size=10, seq_len=4, wrap_vocab=False)
    short = tmp_path / "short.bin"
    np.arange(3, dtype=np.uint32).tofile(short)
    with pytest.raises(UserError, match="fewer than one sequence"):
        MemmapTokens(short, dtype="uint32", vocab_size=10, seq_len=4, wrap_vocab=False)
