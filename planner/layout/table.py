"""The integer table encoding of layouts: one row per layout, one numpy column per knob, named codes.

The search evaluates hundreds of thousands of layouts at once as a table: a dict of equal-length int64
arrays with the columns in `COLUMNS`. Knobs that are not integers travel as codes: the pipeline schedule
(`ScheduleCode`, the registry's `code`), the recomputation policy (`RecomputeCode`) and the mesh axis order
(an index into `MESH_ORDERS`). `layout_to_row` turns a `Layout` into a one-row table; `row_to_layout` (in
`planner.layout.layout`, next to the class) goes back.
"""

from __future__ import annotations

import itertools
from enum import IntEnum
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.layout.names import DEFAULT_MESH_AXES, RECOMPUTE_EVERY, RECOMPUTE_NAMES, full_recompute_share
from planner.layout.schedules import ScheduleCode, schedule

if TYPE_CHECKING:
    from planner.layout.layout import Layout

COLUMNS: tuple[str, ...] = ("dp", "tp", "pp", "cp", "ep", "mb", "m", "sched", "v", "zero", "dp_shard", "rc", "sp",
                            "order")
"""Table columns: degrees, micro_batch (mb), num_microbatches (m), schedule code, virtual_stages (v), ZeRO stage,
dp_shard, recompute code (rc), sequence_parallel (sp, 0/1), mesh order index."""

FIELD_OF_COLUMN: dict[str, str] = {
    "dp": "dp", "tp": "tp", "pp": "pp", "cp": "cp", "ep": "ep", "mb": "micro_batch", "m": "num_microbatches",
    "sched": "schedule", "v": "virtual_stages", "zero": "zero", "dp_shard": "dp_shard", "rc": "recompute",
    "sp": "sequence_parallel", "order": "mesh_axes",
}
"""`Layout` field behind each column (what messages and pins call it)."""

__all__ = ["COLUMNS", "DEFAULT_MESH_AXES", "FULL_RECOMPUTE_SHARE", "MESH_ORDERS", "NUM_SEARCHED_ORDERS",
           "RECOMPUTE_EVERY_K", "RECOMPUTE_NAMES", "SEARCHED_ORDERS", "RecomputeCode", "ScheduleCode", "axis_sizes",
           "axis_strides", "even_split_rows", "layout_to_row", "mesh_strides", "row_at", "table_of"]


RecomputeCode = IntEnum("RecomputeCode", {name.upper().replace("-", "_"): code
                                           for code, name in enumerate(RECOMPUTE_NAMES)})
"""Codes of the `rc` column: NONE, SELECTIVE, FULL, OP, EVERY_2, EVERY_3, EVERY_4 (the order of
`names.RECOMPUTE_NAMES`)."""
FULL_RECOMPUTE_SHARE = np.array([full_recompute_share(name) for name in RECOMPUTE_NAMES])
"""By `rc` code: the share of decoder layers recomputed whole from their input (`names.full_recompute_share`)."""
RECOMPUTE_EVERY_K = np.array([RECOMPUTE_EVERY.get(name, 0) for name in RECOMPUTE_NAMES], dtype=np.int64)
"""By `rc` code: k of an every-k recompute policy (`names.RECOMPUTE_EVERY`), 0 for the others."""


def even_split_rows(rc: Any, pp: Any) -> np.ndarray:
    """Per row: True where the layers are split evenly over the pipeline ranks whatever the end ranks' extra work:
    an every-k recompute policy with pipelining, whose chunks each hold the same multiple of k layers (the layout
    rule `partial_recompute_even_chunks`, `cost.partition.balanced_split`)."""
    return (RECOMPUTE_EVERY_K[np.asarray(rc)] > 0) & (np.asarray(pp) > 1)


SEARCHED_ORDERS: tuple[tuple[str, ...], ...] = (
    DEFAULT_MESH_AXES,  # PP outermost: DP groups stay near each other
    ("dp_replicate", "dp_shard", "pp", "cp", "tp"),  # DP outermost: pipeline neighbours share hosts
)
"""Axis orders the search tries (the first `NUM_SEARCHED_ORDERS` of `MESH_ORDERS`)."""
MESH_ORDERS: tuple[tuple[str, ...], ...] = SEARCHED_ORDERS + tuple(
    o for o in itertools.permutations(DEFAULT_MESH_AXES) if o not in SEARCHED_ORDERS
)
"""Every axis order by its `order` code; `evaluate` accepts any."""
NUM_SEARCHED_ORDERS = len(SEARCHED_ORDERS)


def layout_to_row(layout: Layout) -> dict[str, np.ndarray]:
    """One-row table (see `COLUMNS`) of a `Layout`."""
    values = {
        "dp": layout.dp, "tp": layout.tp, "pp": layout.pp, "cp": layout.cp, "ep": layout.ep,
        "mb": layout.micro_batch, "m": layout.num_microbatches, "sched": schedule(layout.schedule).code,
        "v": layout.virtual_stages, "zero": layout.zero, "dp_shard": layout.dp_shard,
        "rc": RECOMPUTE_NAMES.index(layout.recompute), "sp": int(layout.sequence_parallel),
        "order": MESH_ORDERS.index(tuple(layout.mesh_axes)),
    }
    return {k: np.array([values[k]], dtype=np.int64) for k in COLUMNS}


def table_of(row: dict[str, Any]) -> dict[str, np.ndarray]:
    """One-row table of a row dict (ints per column)."""
    return {k: np.array([row[k]], dtype=np.int64) for k in COLUMNS}


def row_at(table: dict[str, np.ndarray], i: int) -> dict[str, int]:
    """Row `i` of a table as plain ints."""
    return {k: int(v[i]) for k, v in table.items()}


def axis_sizes(table: dict[str, Any]) -> dict[str, Any]:
    """Size of every mesh axis per row (dp splits into dp_replicate x dp_shard)."""
    return {"pp": table["pp"], "dp_replicate": table["dp"] // table["dp_shard"], "dp_shard": table["dp_shard"],
            "cp": table["cp"], "tp": table["tp"]}


_INSIDE = {axis: np.array([[inner in order[order.index(axis) + 1:] for inner in DEFAULT_MESH_AXES]
                           for order in MESH_ORDERS]) for axis in DEFAULT_MESH_AXES}
"""Per axis, per order code, whether each axis of `DEFAULT_MESH_AXES` lies inside it."""


def axis_strides(table: dict[str, np.ndarray], axis: str) -> np.ndarray:
    """Stride of `axis` in every row's rank order: the product of the sizes of the axes inside it."""
    return _strides(axis, axis_sizes(table), table["order"], _one_order(table["order"]))


def mesh_strides(table: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`axis_strides` of every mesh axis (`DEFAULT_MESH_AXES`), sharing the axis sizes and the order check."""
    sizes, codes = axis_sizes(table), table["order"]
    one = _one_order(codes)
    return {axis: _strides(axis, sizes, codes, one) for axis in DEFAULT_MESH_AXES}


def _one_order(codes: np.ndarray) -> int | None:
    """The order code every row has, or None (mixed orders, or no rows)."""
    return int(codes[0]) if len(codes) and codes.min() == codes.max() else None


def _strides(axis: str, sizes: dict[str, Any], codes: np.ndarray, one_order: int | None) -> np.ndarray:
    stride = np.ones(len(codes), dtype=np.int64)
    if one_order is not None:  # one order for every row (the common case): no masks
        order = MESH_ORDERS[one_order]
        for inner in order[order.index(axis) + 1:]:
            stride = stride * sizes[inner]
        return stride
    inside = _INSIDE[axis][codes]
    for j, inner in enumerate(DEFAULT_MESH_AXES):
        if inside[:, j].any():
            stride = stride * np.where(inside[:, j], sizes[inner], 1)
    return stride
