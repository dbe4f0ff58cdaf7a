"""The search space: every valid DP x TP x PP x CP x EP shape and, per shape, every knob combination.

Validity (each rule names its reason):
- tp divides the attention heads and the FFN width (Megatron column split), and either divides the KV heads
  or is a multiple of them (KV heads are then replicated, which the parameter count already reflects);
- seq_len is divisible by 2 * cp (load-balanced CP chunks, Llama 3 paper Sec. 3.3.2);
- pp <= layers and pp * virtual_stages <= layers (every chunk has at least one layer);
- experts divisible by ep, and ep divides dp * cp (EP groups live inside DP x CP);
- global batch = dp * micro_batch * num_microbatches; 1F1B/ZB-H1/interleaved need num_microbatches >= pp and
  interleaved also num_microbatches % pp == 0 (Megatron's constraint);
- dp * tp * pp * cp <= GPUs (idle GPUs are allowed and reported).
Dominated options are left out unless pinned, because they can never be strictly better under the cost model:
sequence parallelism off when tp > 1 (SP moves the same bytes with less element-wise work and less memory,
Korthikanti et al. 2022), GPipe when 1F1B is valid (same time, more activation memory), and ZeRO-2/3 with
pp > 1 (ZeRO-1's memory, at least its communication: `_zero_options`).
HSDP sharding groups smaller than DP are searched for ZeRO-3 (where they trade gather bandwidth for memory).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.cost.evaluate import MESH_ORDERS, NUM_SEARCHED_ORDERS, RECOMPUTE, SCHEDULES
from planner.errors import UserError

PIN_FIELDS = (
    "dp", "tp", "pp", "cp", "ep", "micro_batch", "num_microbatches", "schedule", "virtual_stages", "zero",
    "dp_shard", "recompute", "sequence_parallel", "mesh_axes",
)
SET_PIN_FIELDS = ("schedule", "recompute", "zero")
"""Knobs that also take a set of allowed values: what a framework implements (`schedule=("1f1b", "interleaved")`)."""


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass
class SearchLimits:
    """Bounds of the searched space that are not pins (users may widen them)."""

    max_tp: int | None = None  # default: 2 x the NVLink domain size of the cluster's hosts
    max_cp: int = 16
    max_micro_batch: int = 64
    max_virtual_stages: int = 8
    prune_dominated: bool = True  # False: also enumerate the dominated options (the brute-force oracle does)


@dataclass
class Pins:
    """User-fixed knobs (layout field names); everything not pinned is searched."""

    values: dict[str, Any] = field(default_factory=dict)
    keep: Callable[[dict[str, np.ndarray]], np.ndarray] | None = None
    """Row filter of the framework the search plans for (`planner.frameworks`): True for rows it can build."""

    def __post_init__(self) -> None:
        unknown = set(self.values) - set(PIN_FIELDS)
        if unknown:
            raise UserError(
                f"unknown pin {sorted(unknown)}", fix=f"pin one of {', '.join(PIN_FIELDS)}"
            )

    def allow(self, name: str, value: Any) -> bool:
        """Whether `value` of knob `name` is allowed: unpinned, equal to the pin, or in a pinned set of choices
        (for the knobs in `SET_PIN_FIELDS`, e.g. the schedules a framework implements)."""
        if name not in self.values:
            return True
        pinned = self.values[name]
        if name in SET_PIN_FIELDS and isinstance(pinned, (tuple, list, set, frozenset)):
            return value in pinned
        return pinned == value

    def explicitly_allows(self, name: str, value: Any) -> bool:
        """Pinned to `value` or to a set containing it (dominated options are searched only when asked for)."""
        return name in self.values and self.allow(name, value)

    def get(self, name: str) -> Any:
        return self.values.get(name)


def shape_candidates(model, num_gpus: int, batch: int, seq_len: int, pins: Pins, limits: SearchLimits, domain: int):
    """Arrays (tp, cp, pp, dp, ep) of every valid shape."""
    max_tp = limits.max_tp or max(2 * domain, 1)
    tps = [t for t in divisors(model.num_heads) if t <= max_tp and model.ffn_hidden_size % t == 0
           and (model.num_kv_heads % t == 0 or t % model.num_kv_heads == 0) and pins.allow("tp", t)]
    cps = [c for c in range(1, limits.max_cp + 1) if seq_len % (2 * c) == 0 or c == 1]
    cps = [c for c in cps if pins.allow("cp", c)]
    pps = [p for p in range(1, min(model.num_layers, num_gpus) + 1) if pins.allow("pp", p)]
    dps = [d for d in divisors(batch) if d <= num_gpus and pins.allow("dp", d)]
    experts = model.moe.num_experts if model.moe is not None else 1
    eps = [e for e in divisors(experts) if pins.allow("ep", e)]
    grid = np.array(np.meshgrid(tps, cps, pps, dps, eps, indexing="ij")).reshape(5, -1) if tps and cps and pps and dps and eps else np.zeros((5, 0), dtype=np.int64)
    tp, cp, pp, dp, ep = (grid[i].astype(np.int64) for i in range(5))
    ok = (tp * cp * pp * dp <= num_gpus) & ((dp * cp) % ep == 0)
    if "dp_shard" in pins.values:
        ok &= dp % int(pins.get("dp_shard")) == 0
    return tp[ok], cp[ok], pp[ok], dp[ok], ep[ok]


def micro_batch_pairs(batch: int, shapes: tuple[np.ndarray, ...], pins: Pins, limits: SearchLimits):
    """(shape index, micro_batch) of every allowed micro-batch size of each shape, shapes in order."""
    dp = shapes[3]
    options: dict[int, list[int]] = {}
    for d in np.unique(dp).tolist():
        per_replica = batch // d
        options[d] = [b for b in divisors(per_replica) if b <= limits.max_micro_batch and pins.allow("micro_batch", b)
                      and pins.allow("num_microbatches", per_replica // b)]
    count = np.array([len(options[d]) for d in dp.tolist()], dtype=np.int64)
    shape_idx = np.repeat(np.arange(len(dp)), count)
    mb = np.array([b for d in dp.tolist() for b in options[d]], dtype=np.int64)
    return shape_idx, mb


def expand_shapes(
    model, batch: int, shapes: tuple[np.ndarray, ...], pins: Pins, limits: SearchLimits, flash_attention: bool = True
) -> dict[str, np.ndarray]:
    """Every knob combination of the given shapes, as a table (see planner.cost.evaluate.COLUMNS)."""
    shape_idx, mb = micro_batch_pairs(batch, shapes, pins, limits)
    return expand_pairs(model, batch, tuple(a[shape_idx] for a in shapes), mb, pins, limits, flash_attention)


def _schedules(pp: int, m: int, L: int, pins: Pins, limits: SearchLimits) -> list[tuple[int, int]]:
    """(schedule code, virtual stages) options of a pipeline of pp ranks with m micro-batches."""
    scheds: list[tuple[int, int]] = []
    if pp == 1:
        # One stage: every schedule is the same loop; report it as 1F1B unless only GPipe is allowed. A pinned
        # virtual_stages > 1 (the interleaved schedule) cannot run on one stage: no option (honoured, not ignored).
        for name in ("1f1b", "gpipe"):
            if pins.allow("schedule", name) and pins.allow("virtual_stages", 1):
                return [(SCHEDULES.index(name), 1)]
        return scheds
    if m >= pp:
        scheds += [(1, 1), (3, 1)]
        if pins.explicitly_allows("schedule", "gpipe") or not limits.prune_dominated:
            scheds.append((0, 1))
        if m % pp == 0:
            scheds += [(2, v) for v in range(2, limits.max_virtual_stages + 1) if pp * v <= L]
    else:
        scheds.append((0, 1))
    return [(s, v) for s, v in scheds if pins.allow("schedule", SCHEDULES[s]) and pins.allow("virtual_stages", v)]


def _zero_options(dp: int, pp: int, pins: Pins, limits: SearchLimits) -> list[tuple[int, int]]:
    """(ZeRO stage, sharding group size) options for data-parallel degree dp (HSDP groups for ZeRO-3).

    With pp > 1, ZeRO-2 and ZeRO-3 keep ZeRO-1's memory (the pipeline schedule holds gradients and gathered
    weights until the step's reduction, cost.memory.state_sharding_stage) at ZeRO-1's or more communication,
    so they are dominated and searched only when asked for."""
    zs = []
    for z in range(4):
        if not pins.allow("zero", z):
            continue
        if pp > 1 and z >= 2 and limits.prune_dominated and not pins.explicitly_allows("zero", z):
            continue
        shards = [1] if z == 0 else divisors(dp) if z == 3 else [dp]
        if "dp_shard" in pins.values:
            pinned = int(pins.get("dp_shard"))
            shards = [s for s in ([pinned] if z > 0 or pinned == 1 else []) if dp % s == 0]
        zs.extend((z, s) for s in shards)
    return zs


def _padded(lists: list[list[tuple[int, ...]]], width: int) -> tuple[np.ndarray, np.ndarray]:
    """Ragged option lists as a (keys, max_len, width) array and their lengths."""
    n = max((len(x) for x in lists), default=0)
    out = np.zeros((len(lists), max(n, 1), width), dtype=np.int64)
    for i, x in enumerate(lists):
        if x:
            out[i, : len(x)] = x
    return out, np.array([len(x) for x in lists], dtype=np.int64)


def expand_pairs(
    model, batch: int, shapes: tuple[np.ndarray, ...], mb: np.ndarray, pins: Pins, limits: SearchLimits,
    flash_attention: bool = True,
) -> dict[str, np.ndarray]:
    """Every knob combination of (shape, micro_batch) rows, as a table, vectorised.

    Row order: input row, then schedule, (ZeRO, shard), recompute, SP, mesh order (the last varies fastest).
    Options depending on a row's values are listed once per distinct value and gathered with numpy.
    """
    tp, cp, pp, dp, ep = (np.asarray(a, dtype=np.int64) for a in shapes)
    mb = np.asarray(mb, dtype=np.int64)
    m = batch // (dp * mb)
    pin_sp = pins.get("sequence_parallel")
    pin_order = pins.get("mesh_axes")
    orders = list(range(NUM_SEARCHED_ORDERS)) if pin_order is None else [MESH_ORDERS.index(tuple(pin_order))]
    rcs = [i for i, r in enumerate(RECOMPUTE) if pins.allow("recompute", r)]
    if flash_attention and not pins.explicitly_allows("recompute", "selective") and limits.prune_dominated:
        # With FlashAttention no attention-score activations are stored, so selective recomputation saves no
        # memory and only adds the attention core's forward again: dominated by "none".
        rcs = [i for i in rcs if RECOMPUTE[i] != "selective"]
    # Schedules per distinct (pp, m); ZeRO options per distinct dp.
    sched_keys, sched_inv = np.unique(np.stack([pp, m]), axis=1, return_inverse=True)
    sched_opts, n_sched = _padded([_schedules(int(p), int(q), model.num_layers, pins, limits) for p, q in sched_keys.T], 2)
    dp_keys, dp_inv = np.unique(np.stack([dp, np.minimum(pp, 2)]), axis=1, return_inverse=True)
    zero_opts, n_zero = _padded([_zero_options(int(d), int(p), pins, limits) for d, p in dp_keys.T], 2)
    sched_inv, dp_inv = sched_inv.reshape(-1), dp_inv.reshape(-1)
    # SP: off for tp == 1; else the pin, or on (off is dominated), or both when dominated options are kept.
    sp_multi = [1] if pin_sp is None and limits.prune_dominated else [1, 0] if pin_sp is None else [int(pin_sp)]
    # A pinned sequence_parallel=True needs tp > 1: tp == 1 shapes then have no valid row (not a silent "off").
    n_sp = np.where(tp == 1, 0 if pin_sp else 1, len(sp_multi))
    # Mesh orders only matter with both PP and DP (otherwise they give the same groups): one unless pinned.
    n_order = np.where((pp > 1) & (dp > 1), len(orders), 1 if pin_order is None else len(orders))
    radix = [n_sched[sched_inv], n_zero[dp_inv], np.full(len(tp), len(rcs)), n_sp, n_order]
    count = np.prod(radix, axis=0) if len(tp) else np.zeros(0, dtype=np.int64)
    row = np.repeat(np.arange(len(tp)), count)
    j = np.arange(len(row)) - np.repeat(np.cumsum(count) - count, count)
    digits = []
    for r in reversed(radix):  # mixed-radix digits of j, last option fastest
        digits.append(j % r[row])
        j = j // r[row]
    d_order, d_sp, d_rc, d_zero, d_sched = digits
    sched = sched_opts[sched_inv[row], d_sched]
    zero = zero_opts[dp_inv[row], d_zero]
    sp = np.where(tp[row] == 1, 0, np.array(sp_multi, dtype=np.int64)[d_sp])
    table = {
        "dp": dp[row], "tp": tp[row], "pp": pp[row], "cp": cp[row], "ep": ep[row], "mb": mb[row], "m": m[row],
        "sched": sched[:, 0], "v": sched[:, 1], "zero": zero[:, 0], "dp_shard": zero[:, 1],
        "rc": np.array(rcs, dtype=np.int64)[d_rc] if rcs else np.zeros(0, dtype=np.int64), "sp": sp,
        "order": np.array(orders, dtype=np.int64)[d_order],
    }
    table = {k: np.ascontiguousarray(v, dtype=np.int64) for k, v in table.items()}
    if pins.keep is not None and len(table["dp"]):
        rows = np.nonzero(pins.keep(table))[0]
        table = {k: v[rows] for k, v in table.items()}
    return table
