"""Small numpy helpers the cost model and the layout vocabulary share.

`first_match` is `np.select` without its per-call overhead: the search calls it ~150 times per warm search on
tables of 10^3-10^4 rows, where `np.select`'s broadcasting of every argument cost about twice the selection
itself (about 80 us against 30 us a call at 20,000 rows with three conditions). `distinct_rows` numbers the
distinct rows of a few integer columns, so that per-row formulas run once per distinct row. `sorted_unique` is
`np.unique` of one array without numpy 2's check for masked arrays, which imports numpy.ma (15-25 ms) on the
first plain call in a process: a whole `meshplan plan` never needs numpy.ma otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def first_match(conditions: Sequence[np.ndarray], choices: Sequence[Any], default: Any) -> np.ndarray:
    """Per element, the choice of the first true condition, else `default`: the same values, dtype and shape as
    `np.select(conditions, choices, default)` for boolean conditions of the result's shape. The dtype is
    promoted over every choice and the default at once (Python scalars weakly), as `np.select` does, and every
    choice is cast to it before selecting."""
    if len(conditions) != len(choices):
        raise ValueError("first_match needs one choice per condition")
    dtype = np.result_type(*(x if type(x) in (int, float, complex) else np.asarray(x) for x in (*choices, default)))
    out = np.asarray(default, dtype=dtype)
    for condition, choice in zip(conditions[::-1], choices[::-1]):
        out = np.where(condition, np.asarray(choice, dtype=dtype), out)
    return np.broadcast_to(out, np.shape(conditions[0])).copy() if conditions and out.ndim == 0 else out


def distinct_rows(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of each distinct row's first occurrence, each row's distinct-row number) of non-negative int
    columns: `cols[k][first][inverse]` rebuilds every column. Rows pack into one int64 key when the columns'
    ranges allow (one 1-D `np.unique`), else whole rows are compared."""
    key = np.zeros(len(cols[0]), dtype=np.int64)
    span = 1
    for col in cols:
        radix = int(col.max()) + 1 if len(col) else 1
        if span * radix >= 2**62:  # too many combinations to pack into one int64: compare whole rows
            _, first, inverse = np.unique(np.stack(cols), axis=1, return_index=True, return_inverse=True)
            return first, inverse.reshape(-1)
        key, span = key * radix + col, span * radix
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values of `values` (flattened), sorted: what `np.unique(values)` returns for integer, boolean
    and NaN-free float arrays, by a sort and a comparison of neighbours (no numpy.ma import, module docstring)."""
    out = np.sort(np.asarray(values), axis=None)
    if len(out) > 1:
        keep = np.empty(len(out), dtype=bool)
        keep[0] = True
        np.not_equal(out[1:], out[:-1], out=keep[1:])
        out = out[keep]
    return out
