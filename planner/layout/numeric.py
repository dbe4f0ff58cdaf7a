"""Small numpy helpers the cost model and the layout vocabulary share.

`first_match` is `np.select` without its per-call overhead: the search calls it ~150 times per warm search on
tables of 10^3-10^4 rows, where `np.select`'s broadcasting of every argument cost about twice the selection
itself (about 80 us against 30 us a call at 20,000 rows with three conditions).
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
