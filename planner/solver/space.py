"""The search space: every valid DP x TP x PP x CP x EP shape and, per shape, every knob combination.

Validity is the rule set of `planner.layout.rules` (each rule named, with its reason), applied through the
candidate generators of `planner.layout.choices` as soon as the columns a rule reads are known: per knob
(tp, cp, pp, dp, ep), per shape, per (shape, micro-batch), per (pp, m) for the schedules and per (dp, pp)
for the ZeRO options; every rule once more over each expanded table (rules that span those groups).
Ranges searched (`SearchLimits`): tp up to twice the NVLink domain, cp up to 16, micro-batches up to 64,
virtual stages up to 8; dp among the divisors of the global batch (every sequence trained once).
Dominated options are left out unless pinned, because they can never be strictly better under the cost model:
sequence parallelism off when tp > 1 (SP moves the same bytes with less element-wise work and less memory,
Korthikanti et al. 2022), a schedule the registry marks dominated (GPipe where 1F1B is valid: same time,
more activation memory), ZeRO-2/3 with pp > 1 where ZeRO-1 is valid with the same sharding group (ZeRO-1's
memory, at least its communication; ZeRO-3's HSDP groups stay; a framework without ZeRO-1, TorchTitan, has
them searched) and selective recomputation with
FlashAttention (no score activations to drop). The framework the cost context plans for (`ctx.framework`)
selects the rules (`rules.rules_for`): its feature sets are rules too, so its missing schedules, recompute
policies, ZeRO stages and mesh orders never enter the tables.
HSDP sharding groups smaller than DP are searched for ZeRO-3 (where they trade gather bandwidth for memory).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.errors import UserError
from planner.layout import choices, rules
from planner.layout.choices import SET_PINS, divisors
from planner.layout.layout import KNOBS
from planner.layout.numeric import distinct_rows
from planner.layout.rules import DEFAULT_FRAMEWORK, Facts, Tally
from planner.layout.table import MESH_ORDERS, NUM_SEARCHED_ORDERS, RECOMPUTE_NAMES, RecomputeCode

PIN_FIELDS = KNOBS
SET_PIN_FIELDS = SET_PINS
__all__ = ["PIN_FIELDS", "SET_PIN_FIELDS", "Pins", "SearchLimits", "Space", "divisors", "expand_pairs",
           "expand_shapes", "mesh_order_codes", "micro_batch_pairs", "shape_candidates"]


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

    def __post_init__(self) -> None:
        unknown = set(self.values) - set(PIN_FIELDS)
        if unknown:
            raise UserError(
                f"unknown pin {sorted(unknown)}", fix=f"pin one of {', '.join(PIN_FIELDS)}"
            )

    def allow(self, name: str, value: Any) -> bool:
        """Whether `value` of knob `name` is allowed: unpinned, equal to the pin, or in a pinned set of choices
        (for the knobs in `SET_PIN_FIELDS`, e.g. the schedules a framework implements)."""
        return choices.allowed(self.values, name, value)

    def explicitly_allows(self, name: str, value: Any) -> bool:
        """Pinned to `value` or to a set containing it (dominated options are searched only when asked for)."""
        return name in self.values and self.allow(name, value)

    def get(self, name: str) -> Any:
        return self.values.get(name)


@dataclass
class Space:
    """What one search enumerates: the facts the rules read, the pins and limits, and where rejections go."""

    facts: Facts
    pins: Pins
    limits: SearchLimits
    domain: int  # GPUs of one NVLink domain (the default tp limit is twice it)
    flash_attention: bool = True
    framework: str = DEFAULT_FRAMEWORK  # whose rules apply besides the generic ones (layout.rules)
    tally: Tally = field(default_factory=Tally)


def space_of(ctx: Any, pins: Pins, limits: SearchLimits) -> Space:
    """The space of a cost context's model, workload and cluster."""
    n = int(ctx.cluster.num_gpus)
    return Space(Facts.of(ctx.model, ctx.workload, n), pins, limits, nvlink_domain_size(ctx.cluster),
                 bool(ctx.flash_attention), ctx.framework)


def nvlink_domain_size(cluster) -> int:
    """GPUs that share one NVLink switch fabric: a rack-scale domain, else one host."""
    domain = getattr(cluster, "nvlink_domain", None)
    if domain is not None:
        return int(domain.hosts) * int(cluster.gpus_per_node)
    return int(cluster.gpus_per_node)


def shape_candidates(space: Space) -> tuple[np.ndarray, ...]:
    """Arrays (tp, cp, pp, dp, ep) of every valid shape, in meshgrid order of ascending values."""
    f, pins, lim = space.facts, space.pins.values, space.limits
    n = int(f.num_gpus)

    def vals(knob: str, natural) -> list[int]:
        return choices.values(knob, natural, f, pins, space.framework, space.tally)

    tps = vals("tp", range(1, (lim.max_tp or max(2 * space.domain, 1)) + 1))
    cps = vals("cp", range(1, lim.max_cp + 1))
    pps = vals("pp", range(1, n + 1))
    dps = vals("dp", [d for d in divisors(f.global_batch) if d <= n])  # only these can meet batch_matches
    eps = vals("ep", range(1, f.num_experts + 1))
    if not (tps and cps and pps and dps and eps):
        return tuple(np.zeros(0, dtype=np.int64) for _ in range(5))
    grid = np.array(np.meshgrid(tps, cps, pps, dps, eps, indexing="ij")).reshape(5, -1).astype(np.int64)
    tp, cp, pp, dp, ep = grid
    ok = choices.keep({"tp": tp, "cp": cp, "pp": pp, "dp": dp, "ep": ep}, f, pins, space.framework, space.tally,
                      "shape")
    return tp[ok], cp[ok], pp[ok], dp[ok], ep[ok]


def micro_batch_pairs(space: Space, shapes: tuple[np.ndarray, ...]):
    """(shape index, micro_batch) of every allowed micro-batch size of each shape, shapes in order."""
    batch, pins = int(space.facts.global_batch), space.pins
    dp = shapes[3]
    options: list[list[int]] = []  # per distinct dp
    dps, inverse = np.unique(dp, return_inverse=True)
    for d in dps.tolist():
        per_replica = batch // d
        options.append([b for b in ([int(pins.get("micro_batch"))] if "micro_batch" in pins.values else
                                    [b for b in divisors(per_replica) if b <= space.limits.max_micro_batch])
                        if pins.allow("num_microbatches", per_replica // b)])
    padded, lengths = _padded([[(b,) for b in opts] for opts in options], 1)
    count = lengths[inverse.reshape(-1)]
    shape_idx = np.repeat(np.arange(len(dp)), count)
    mb = padded[inverse.reshape(-1), :, 0][np.arange(padded.shape[1]) < count[:, None]]
    cols = {**{k: a[shape_idx] for k, a in zip(("tp", "cp", "pp", "dp", "ep"), shapes)}, "mb": mb,
            "m": batch // (dp[shape_idx] * mb)}
    ok = choices.keep(cols, space.facts, pins.values, space.framework, space.tally, "micro-batch")
    return shape_idx[ok], mb[ok]


def expand_shapes(space: Space, shapes: tuple[np.ndarray, ...]) -> dict[str, np.ndarray]:
    """Every knob combination of the given shapes, as a table (see planner.layout.table.COLUMNS)."""
    shape_idx, mb = micro_batch_pairs(space, shapes)
    return expand_pairs(space, tuple(a[shape_idx] for a in shapes), mb)


def _padded(lists: list[list[tuple[int, ...]]], width: int) -> tuple[np.ndarray, np.ndarray]:
    """Ragged option lists as a (keys, max_len, width) array and their lengths."""
    n = max((len(x) for x in lists), default=0)
    out = np.zeros((len(lists), max(n, 1), width), dtype=np.int64)
    for i, x in enumerate(lists):
        if x:
            out[i, : len(x)] = x
    return out, np.array([len(x) for x in lists], dtype=np.int64)


def mesh_order_codes(pins: Pins) -> list[int]:
    """The mesh orders (codes of `MESH_ORDERS`) the search builds rows with: the pinned one, else the searched."""
    pin_order = pins.get("mesh_axes")
    return list(range(NUM_SEARCHED_ORDERS)) if pin_order is None else [MESH_ORDERS.index(tuple(pin_order))]


def _kept_options(opts: np.ndarray, counts: np.ndarray, keep_fn) -> tuple[np.ndarray, np.ndarray]:
    """Padded per-row (zero, dp_shard) options less those `keep_fn(row, zero, dp_shard)` refuses, order kept."""
    row, slot = np.nonzero(np.arange(opts.shape[1]) < counts[:, None])
    keep = keep_fn(row, opts[row, slot, 0], opts[row, slot, 1])
    row, slot = row[keep], slot[keep]
    kept = np.bincount(row, minlength=len(counts)).astype(np.int64)
    packed = np.zeros_like(opts)
    packed[row, np.arange(len(row)) - np.repeat(np.cumsum(kept) - kept, kept)] = opts[row, slot]
    return packed, kept


def expand_pairs(space: Space, shapes: tuple[np.ndarray, ...], mb: np.ndarray, *, with_source: bool = False,
                 zero_filter: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None = None):
    """Every knob combination of (shape, micro_batch) rows, as a table, vectorised (with `with_source`: and the
    input row each table row comes from). `zero_filter(row, zero, dp_shard)`, if given, says per (input row,
    ZeRO option) whether to build that option's rows at all (the search's bound); the table is then the same
    as without it less the rows of the options it refused, in the same order.

    Row order: input row, then schedule, (ZeRO, shard), recompute, SP, mesh order (the last varies fastest).
    Options depending on a row's values are listed once per distinct value and gathered with numpy.
    """
    pins, limits, facts = space.pins, space.limits, space.facts
    tp, cp, pp, dp, ep = (np.asarray(a, dtype=np.int64) for a in shapes)
    mb = np.asarray(mb, dtype=np.int64)
    m = int(facts.global_batch) // (dp * mb)
    pin_sp = pins.get("sequence_parallel")
    pin_order = pins.get("mesh_axes")
    orders = mesh_order_codes(pins)
    rcs = [i for i, r in enumerate(RECOMPUTE_NAMES) if pins.allow("recompute", r)]
    if space.flash_attention and not pins.explicitly_allows("recompute", "selective") and limits.prune_dominated:
        # With FlashAttention no attention-score activations are stored, so selective recomputation saves no
        # memory and only adds the attention core's forward again: dominated by "none".
        rcs = [i for i in rcs if i != RecomputeCode.SELECTIVE]
    if rcs:  # the policies the framework runs (its recompute rule reads that column alone)
        col = np.array(rcs, dtype=np.int64)
        rcs = col[choices.keep({"rc": col}, facts, pins.values, space.framework, space.tally, "recompute")].tolist()
    # Schedules per distinct (pp, m); ZeRO options per distinct dp.
    sched_first, sched_inv = distinct_rows(pp, m)  # one packed sort, not np.unique's row-wise one
    sched_keys = np.stack([pp[sched_first], m[sched_first]])
    sched_opts, n_sched = _padded(choices.schedule_options(
        sched_keys[0], sched_keys[1], facts, pins.values, space.framework, limits.max_virtual_stages,
        limits.prune_dominated, space.tally), 2)
    dp_first, dp_inv = distinct_rows(dp, np.minimum(pp, 2))
    dp_keys = np.stack([dp[dp_first], np.minimum(pp, 2)[dp_first]])
    zero_opts, n_zero = _padded(choices.zero_options(dp_keys[0], dp_keys[1], facts, pins.values, space.framework,
                                                     limits.prune_dominated, space.tally), 2)
    zero_opts, n_zero = zero_opts[dp_inv], n_zero[dp_inv]  # per input row
    if zero_filter is not None and len(tp):
        zero_opts, n_zero = _kept_options(zero_opts, n_zero, zero_filter)
    # SP: off for tp == 1; else the pin, or on (off is dominated), or both when dominated options are kept.
    sp_multi = [1] if pin_sp is None and limits.prune_dominated else [1, 0] if pin_sp is None else [int(pin_sp)]
    # A pinned sequence_parallel=True needs tp > 1: tp == 1 shapes then have no valid row (not a silent "off").
    n_sp = np.where(tp == 1, 0 if pin_sp else 1, len(sp_multi))
    # Mesh orders only matter with both PP and DP (otherwise they give the same groups): one unless pinned.
    n_order = np.where((pp > 1) & (dp > 1), len(orders), 1 if pin_order is None else len(orders))
    radix = [n_sched[sched_inv], n_zero, np.full(len(tp), len(rcs)), n_sp, n_order]
    count = np.prod(radix, axis=0) if len(tp) else np.zeros(0, dtype=np.int64)
    row = np.repeat(np.arange(len(tp)), count)
    j = np.arange(len(row)) - np.repeat(np.cumsum(count) - count, count)
    digits = []
    for r in reversed(radix):  # mixed-radix digits of j, last option fastest
        digits.append(j % r[row])
        j = j // r[row]
    d_order, d_sp, d_rc, d_zero, d_sched = digits
    sched = sched_opts[sched_inv[row], d_sched]
    zero = zero_opts[row, d_zero]
    sp = np.where(tp[row] == 1, 0, np.array(sp_multi, dtype=np.int64)[d_sp])
    table = {
        "dp": dp[row], "tp": tp[row], "pp": pp[row], "cp": cp[row], "ep": ep[row], "mb": mb[row], "m": m[row],
        "sched": sched[:, 0], "v": sched[:, 1], "zero": zero[:, 0], "dp_shard": zero[:, 1],
        "rc": np.array(rcs, dtype=np.int64)[d_rc] if rcs else np.zeros(0, dtype=np.int64), "sp": sp,
        "order": np.array(orders, dtype=np.int64)[d_order],
    }
    table = {k: np.ascontiguousarray(v, dtype=np.int64) for k, v in table.items()}
    # Every rule once more over the whole rows: those that read columns of several groups above.
    ok = rules.mask(table, facts, space.framework, tally=space.tally, stage="layout")
    if not ok.all():
        table, row = {k: v[ok] for k, v in table.items()}, row[ok]
    return (table, row) if with_source else table
