"""`mesh_strides` (every axis at once, for the cost model's group table) equals `axis_strides` axis by axis, and
both equal the stride read off an explicit row-major rank mesh, for one mesh order and for mixed orders."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.layout.table import DEFAULT_MESH_AXES, MESH_ORDERS, axis_sizes, axis_strides, mesh_strides


def _table(rng: np.random.Generator, n: int, orders: np.ndarray) -> dict[str, np.ndarray]:
    table = {k: rng.choice([1, 2, 3, 4, 8], n).astype(np.int64) for k in ("tp", "pp", "cp", "dp_shard")}
    table["dp"] = table["dp_shard"] * rng.choice([1, 2, 5], n)
    table["order"] = orders.astype(np.int64)
    return table


@pytest.mark.parametrize("mixed", [False, True])
def test_mesh_strides_are_axis_strides_and_the_mesh_strides(mixed: bool) -> None:
    rng = np.random.default_rng(3)
    n = 400
    orders = rng.integers(0, len(MESH_ORDERS), n) if mixed else np.full(n, len(MESH_ORDERS) - 1)
    table = _table(rng, n, orders)
    every = mesh_strides(table)
    assert list(every) == list(DEFAULT_MESH_AXES)
    sizes = axis_sizes(table)
    for axis in DEFAULT_MESH_AXES:
        one = axis_strides(table, axis)
        assert one.dtype == every[axis].dtype == np.int64 and np.array_equal(one, every[axis])
    for i in range(0, n, 37):  # the stride of an axis = the rank distance of one step along it
        order = MESH_ORDERS[int(table["order"][i])]
        shape = tuple(int(sizes[a][i]) for a in order)
        ranks = np.arange(math.prod(shape)).reshape(shape)
        for k, axis in enumerate(order):
            if shape[k] > 1:
                step = ranks[(0,) * k + (1,) + (0,) * (len(shape) - k - 1)]
                assert every[axis][i] == step


def test_no_rows() -> None:
    table = _table(np.random.default_rng(0), 0, np.zeros(0))
    assert all(len(v) == 0 for v in mesh_strides(table).values())
