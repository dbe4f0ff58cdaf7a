"""The data-parallel collectives' groups and their (a, b) coefficient columns, one row per layout.

ZeRO >= 1 shards over dp_shard x cp (`expert_groups.SHARD_AXES`, the executor's FSDP mesh, TorchTitan's
dp_shard_cp mesh, Megatron's dp x cp distributed optimizer): its gradient reduce-scatter and weight all-gather
run over that group, and HSDP's all-reduce over dp_replicate. ZeRO-0 (DDP; dp_shard is 1) all-reduces over
dp_replicate x cp, every rank that holds the same weights.

A group of several axes is one flattened ring. In the default order (pp, dp_replicate, dp_shard, cp, tp) the
axes sit next to each other and the group is contiguous: ranks base + j * stride of its innermost axis, costed
as one ring of their product. Where another axis lies between them (pp in (dp_replicate, dp_shard, pp, cp, tp)
with pp > 1) the ring is costed hierarchically, axis by axis from the innermost: reduce-scatter over it, then
over the next one on 1/size of the bytes (all-gather the reverse); an all-reduce is those reduce-scatters, the
outermost axis's all-reduce on what is left, and the all-gathers back (the two-level algorithm of NCCL's
tree/CollNet and of HSDP itself, an upper bound of a flat ring's time on the same links).
"""

from __future__ import annotations

import numpy as np

from planner.layout.expert_groups import DATA_AXES, SHARD_AXES
from planner.layout.numeric import distinct_rows
from planner.layout.table import MESH_ORDERS, axis_sizes, mesh_strides


def axis_groups(table: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per row and axis name: (group size, stride) of that axis in the row's rank order.

    Along a row-major mesh the groups of an axis are ranks base + j * stride (j < size), stride being the
    product of the sizes of the axes inside it; so (size, stride, ranks in use) fixes every group of the axis,
    and the topology is asked once per distinct triple, not once per layout.
    """
    sizes, strides = axis_sizes(table), mesh_strides(table)
    return {axis: (sizes[axis], strides[axis]) for axis in MESH_ORDERS[0]}


def distinct_axis_groups(table: dict[str, np.ndarray]) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """(`axis_groups` of the table's distinct group shapes, each row's index into them): what a per-row quantity
    that depends on the rows' groups alone needs, placed once per shape (a search table holds few)."""
    first, inverse = distinct_rows(*(table[k] for k in _GROUP_COLUMNS))
    return axis_groups({k: np.asarray(table[k])[first] for k in _GROUP_COLUMNS}), inverse


def dp_group_coeffs(bw, table: dict[str, np.ndarray], world: np.ndarray,
                    groups: dict[str, tuple[np.ndarray, np.ndarray]] | None = None) -> tuple[tuple, tuple, tuple, tuple]:
    """(reduce-scatter, all-gather) coefficient columns over the sharding group dp_shard x cp, the all-reduce
    over HSDP's replicate group dp_replicate and the all-reduce over DDP's dp_replicate x dp_shard x cp (module
    docstring; `replicate_coeffs` picks between the last two by ZeRO stage). `groups`: the table's
    `axis_groups`, where the caller has them.

    Why cached: a search asks this for thousands of rows over a few dozen distinct groups, every call. A row's
    groups follow from `_GROUP_COLUMNS` (`axis_groups`) and its `world`, and its coefficients are per-row
    arithmetic on `bw.columns`, so each distinct key is costed once and kept in `bw.group_coeffs` (a
    `GroupCoeffCache` per topology for `comm.AxisBandwidth`; a bandwidth object without one gets one for this
    call): the same numbers, element for element, as costing every row.
    """
    world = np.asarray(world, dtype=np.int64)
    known = getattr(bw, "group_coeffs", None)
    known = known if isinstance(known, GroupCoeffCache) else GroupCoeffCache()
    first, inverse = distinct_rows(*(table[k] for k in _GROUP_COLUMNS))
    if not np.array_equal(world[first][inverse], world):  # a world the columns do not fix joins the key
        first, inverse = distinct_rows(inverse, world)
    keys = list(zip(*(np.asarray(table[k])[first].tolist() for k in _GROUP_COLUMNS), world[first].tolist()))
    at = [known.get(key, -1) for key in keys]
    new = [i for i, j in enumerate(at) if j < 0]
    if new:
        rows = first[new]
        if groups is None:  # only the new keys' rows: on a warm search every key is known
            picked = axis_groups({k: np.asarray(table[k])[rows] for k in _GROUP_COLUMNS})
        else:
            picked = {axis: (size[rows], stride[rows]) for axis, (size, stride) in groups.items()}
        known.add([keys[i] for i in new], np.column_stack([c for pair in _dp_group_columns(bw, picked, world[rows])
                                                           for c in pair]))
        at = [known[key] for key in keys]
    values = known.values[np.asarray(at, dtype=np.int64)[inverse]] if keys else np.zeros((0, 8))
    return tuple((values[:, 2 * i], values[:, 2 * i + 1]) for i in range(4))


class GroupCoeffCache(dict):
    """`dp_group_coeffs`' cache: each distinct key -> its row of `values` (the 8 coefficient columns), so that a
    call gathers every known key's coefficients with one index instead of stacking one array per key (a search
    asks for thousands of keys)."""

    def __init__(self) -> None:
        super().__init__()
        self.values = np.zeros((0, 8))

    def add(self, keys: list[tuple[int, ...]], values: np.ndarray) -> None:
        start = len(self.values)
        self.values = np.vstack([self.values, values])
        self.update(zip(keys, range(start, start + len(keys))))


_GROUP_COLUMNS = ("tp", "cp", "pp", "dp", "dp_shard", "order")  # what fixes a row's `axis_groups`


def _dp_group_columns(bw, groups: dict[str, tuple[np.ndarray, np.ndarray]], world: np.ndarray):
    """`dp_group_coeffs` costed row by row, uncached."""
    return (group_coeffs(bw, "reduce_scatter", groups, SHARD_AXES, world),
            group_coeffs(bw, "all_gather", groups, SHARD_AXES, world),
            group_coeffs(bw, "all_reduce", groups, ("dp_replicate",), world),
            group_coeffs(bw, "all_reduce", groups, DATA_AXES, world))


def replicate_coeffs(hsdp_ar: tuple, ddp_ar: tuple, zero: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The all-reduce columns of each row's replicate group: DDP's (every data rank) under ZeRO-0, else HSDP's."""
    z0 = np.asarray(zero) == 0
    return np.where(z0, ddp_ar[0], hsdp_ar[0]), np.where(z0, ddp_ar[1], hsdp_ar[1])


def group_coeffs(bw, kind: str, groups: dict[str, tuple[np.ndarray, np.ndarray]], axes, world: np.ndarray):
    """(a, b) columns of `kind` over the group spanning `axes` (module docstring: one ring where contiguous,
    axis by axis where not)."""
    size = np.stack([np.asarray(groups[a][0], dtype=np.int64) for a in axes])
    stride = np.stack([np.asarray(groups[a][1], dtype=np.int64) for a in axes])
    big = size > 1
    total = size.prod(axis=0)
    inner = np.where(big, stride, np.iinfo(np.int64).max).min(axis=0)
    inner = np.where(big.any(axis=0), inner, 1)
    span = np.where(big, stride * size, 0).max(axis=0)
    flat = ~big.any(axis=0) | (inner * total == span)
    a, b = (np.asarray(x, dtype=float).copy() for x in bw.columns(kind, total, inner, world))
    if not flat.all():
        rows = ~flat
        a[rows], b[rows] = _hierarchical(bw, kind, size[:, rows], stride[:, rows], world[rows])
    return a, b


def _hierarchical(bw, kind: str, size: np.ndarray, stride: np.ndarray, world: np.ndarray):
    """(a, b) of `kind` run axis by axis (axes x rows arrays of sizes and strides), innermost first."""
    order = np.argsort(stride, axis=0, kind="stable")
    size, stride = np.take_along_axis(size, order, 0), np.take_along_axis(stride, order, 0)
    before = np.vstack([np.ones((1, size.shape[1]), dtype=np.int64), np.cumprod(size, axis=0)[:-1]])
    outer = np.where(size > 1, np.arange(len(size))[:, None], -1).max(axis=0)
    a, b = np.zeros(size.shape[1]), np.zeros(size.shape[1])
    for i in range(len(size)):
        if kind == "all_reduce":
            ra, rb = bw.columns("reduce_scatter", size[i], stride[i], world)
            ga, gb = bw.columns("all_gather", size[i], stride[i], world)
            xa, xb = bw.columns("all_reduce", size[i], stride[i], world)
            last = outer == i
            step_a, step_b = np.where(last, xa, ra + ga), np.where(last, xb, rb + gb)
            keep = i <= outer
            step_a, step_b = np.where(keep, step_a, 0.0), np.where(keep, step_b, 0.0)
        else:
            step_a, step_b = bw.columns(kind, size[i], stride[i], world)
        a, b = a + step_a, b + step_b / before[i]
    return a, b
