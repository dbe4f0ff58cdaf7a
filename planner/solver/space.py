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
Korthikanti et al. 2022), and GPipe when 1F1B is valid (same time, more activation memory).
HSDP sharding groups smaller than DP are searched for ZeRO-3 (where they trade gather bandwidth for memory).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.cost.evaluate import MESH_ORDERS, NUM_SEARCHED_ORDERS, RECOMPUTE, SCHEDULES
from planner.errors import UserError

PIN_FIELDS = (
    "dp", "tp", "pp", "cp", "ep", "micro_batch", "num_microbatches", "schedule", "virtual_stages", "zero",
    "dp_shard", "recompute", "sequence_parallel", "mesh_axes",
)


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

    def __post_init__(self) -> None:
        unknown = set(self.values) - set(PIN_FIELDS)
        if unknown:
            raise UserError(
                f"unknown pin {sorted(unknown)}", fix=f"pin one of {', '.join(PIN_FIELDS)}"
            )

    def allow(self, name: str, value: Any) -> bool:
        return name not in self.values or self.values[name] == value

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


def expand_shapes(
    model, batch: int, shapes: tuple[np.ndarray, ...], pins: Pins, limits: SearchLimits, flash_attention: bool = True
) -> dict[str, np.ndarray]:
    """Every knob combination of the given shapes, as a table (see planner.cost.evaluate.COLUMNS)."""
    L = model.num_layers
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("dp", "tp", "pp", "cp", "ep", "mb", "m", "sched", "v", "zero", "dp_shard", "rc", "sp", "order")}
    pin_sched = pins.get("schedule")
    pin_sp = pins.get("sequence_parallel")
    pin_order = pins.get("mesh_axes")
    if pin_order is None:
        orders = list(range(NUM_SEARCHED_ORDERS))
    else:
        orders = [MESH_ORDERS.index(tuple(pin_order))]
    rcs = [i for i, r in enumerate(RECOMPUTE) if pins.allow("recompute", r)]
    if flash_attention and "recompute" not in pins.values and limits.prune_dominated:
        # With FlashAttention no attention-score activations are stored, so selective recomputation saves no
        # memory and only adds the attention core's forward again: dominated by "none".
        rcs = [i for i in rcs if RECOMPUTE[i] != "selective"]
    for tp, cp, pp, dp, ep in zip(*shapes):
        tp, cp, pp, dp, ep = int(tp), int(cp), int(pp), int(dp), int(ep)
        per_replica = batch // dp
        mbs = [b for b in divisors(per_replica) if b <= limits.max_micro_batch and pins.allow("micro_batch", b)]
        # (schedule code, v) options depend on m
        sps = [False] if tp == 1 else ([pin_sp] if pin_sp is not None else [True] if limits.prune_dominated else [True, False])
        zs = []
        for z in range(4):
            if not pins.allow("zero", z):
                continue
            if z == 0:
                shards = [1]
            elif z == 3:
                shards = divisors(dp)
            else:
                shards = [dp]
            if "dp_shard" in pins.values:
                shards = [s for s in ([int(pins.get("dp_shard"))] if z > 0 or int(pins.get("dp_shard")) == 1 else []) if dp % s == 0]
            zs.extend((z, s) for s in shards)
        my_orders = orders if (pp > 1 and dp > 1) else orders[:1] if pin_order is None else orders
        shard_of_zs = np.array([sh for _, sh in zs])
        zs_idx = _product([np.arange(len(zs)), np.array(rcs), np.array([int(x) for x in sps]), np.array(my_orders)])
        if zs_idx.shape[1] == 0:
            continue
        for b in mbs:
            m = per_replica // b
            if not pins.allow("num_microbatches", m):
                continue
            scheds: list[tuple[int, int]] = []
            if pp == 1:
                if pin_sched is None or pin_sched in ("1f1b", "gpipe"):
                    scheds = [(SCHEDULES.index(pin_sched or "1f1b"), 1)]
            else:
                if m >= pp:
                    scheds += [(1, 1), (3, 1)]
                    if pin_sched == "gpipe" or not limits.prune_dominated:
                        scheds.append((0, 1))
                    if m % pp == 0:
                        scheds += [(2, v) for v in range(2, limits.max_virtual_stages + 1) if pp * v <= L]
                else:
                    scheds.append((0, 1))
                scheds = [(s, v) for s, v in scheds if (pin_sched is None or SCHEDULES[s] == pin_sched) and pins.allow("virtual_stages", v)]
            if not scheds:
                continue
            sv = np.array(scheds)
            n_inner = zs_idx.shape[1]
            k = len(sv) * n_inner
            zi = np.tile(zs_idx[0], len(sv))
            blocks = {
                "dp": np.full(k, dp, dtype=np.int64), "tp": np.full(k, tp, dtype=np.int64), "pp": np.full(k, pp, dtype=np.int64), "cp": np.full(k, cp, dtype=np.int64), "ep": np.full(k, ep, dtype=np.int64), "mb": np.full(k, b, dtype=np.int64), "m": np.full(k, m, dtype=np.int64),
                "sched": np.repeat(sv[:, 0], n_inner), "v": np.repeat(sv[:, 1], n_inner),
                "zero": np.array([z for z, _ in zs], dtype=np.int64)[zi], "dp_shard": shard_of_zs[zi],
                "rc": np.tile(zs_idx[1], len(sv)), "sp": np.tile(zs_idx[2], len(sv)), "order": np.tile(zs_idx[3], len(sv)),
            }
            for key, arr in blocks.items():
                cols[key].append(arr)
    return {k: (np.concatenate(v).astype(np.int64) if v else np.zeros(0, dtype=np.int64)) for k, v in cols.items()}


def _product(arrays: list[np.ndarray]) -> np.ndarray:
    """Cartesian product of 1-D arrays as a (len(arrays), N) integer array."""
    if any(len(a) == 0 for a in arrays):
        return np.zeros((len(arrays), 0), dtype=np.int64)
    return np.array(np.meshgrid(*arrays, indexing="ij")).reshape(len(arrays), -1).astype(np.int64)
