"""Candidate values of each knob, filtered by the rules: what the search and `explain` enumerate.

A generator lists a knob's natural range (or the pinned values), builds a small table of candidates with
every column already known (the knob, the columns it is combined with, and every knob pinned to one value
as a constant column) and keeps the rows that `rules.mask` accepts. So each rule is applied as soon as the
columns it reads are known, written once in `planner.layout.rules`, and a `rules.Tally` can say which rule
removed every candidate of a stage ("tp=3: num_heads=32 is not divisible by tp").

Pins map Layout field names to a value, or for the knobs in `SET_PINS` to a tuple of allowed values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from planner.errors import UserError
from planner.layout import rules
from planner.layout.rules import Facts, Tally
from planner.layout.schedules import SCHEDULES, SEARCH_ORDER
from planner.layout.table import FIELD_OF_COLUMN, MESH_ORDERS, RECOMPUTE_NAMES

SET_PINS = ("schedule", "recompute", "zero")
"""Knobs that also take a set of allowed values: what a framework implements (`schedule=("1f1b", "interleaved")`)."""
ONE_RANK_SCHEDULES = ("1f1b", "gpipe")
"""Without pipelining every schedule runs the same loop; the search reports it under the first one allowed."""
COLUMN_OF_FIELD = {f: c for c, f in FIELD_OF_COLUMN.items()}


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def encode(field: str, value: Any) -> int:
    """A Layout field's value as its table column's integer (schedule and recompute codes, order index)."""
    if field == "schedule":
        return int(SCHEDULES[value].code)
    if field == "recompute":
        return RECOMPUTE_NAMES.index(value)
    if field == "mesh_axes":
        return MESH_ORDERS.index(tuple(value))
    return int(value)


def pinned_columns(pins: Mapping[str, Any]) -> dict[str, int]:
    """Columns of the knobs pinned to one value (a set of allowed values is not one value)."""
    out = {}
    for name, value in pins.items():
        if name not in COLUMN_OF_FIELD or (isinstance(value, (tuple, list, set, frozenset)) and name != "mesh_axes"):
            continue
        try:
            out[COLUMN_OF_FIELD[name]] = encode(name, value)
        except (KeyError, ValueError):
            continue  # an unknown value allows nothing; the generators' pin checks drop every candidate
    return out


def allowed(pins: Mapping[str, Any], name: str, value: Any) -> bool:
    """Whether `value` of knob `name` is allowed: unpinned, equal to the pin, or in a pinned set of values."""
    if name not in pins:
        return True
    pinned = pins[name]
    if name in SET_PINS and isinstance(pinned, (tuple, list, set, frozenset)):
        return value in pinned
    return pinned == value


def keep(table: dict[str, np.ndarray], facts: Facts, pins: Mapping[str, Any], framework: str,
         tally: Tally | None, stage: str) -> np.ndarray:
    """Rows of a candidate table that meet every rule evaluable on its columns plus the pinned constants."""
    n = len(next(iter(table.values())))
    full = {**{k: np.full(n, v, dtype=np.int64) for k, v in pinned_columns(pins).items() if k not in table}, **table}
    return rules.mask(full, facts, framework, tally=tally, stage=stage)


def values(knob: str, natural: Iterable[int], facts: Facts, pins: Mapping[str, Any], framework: str,
           tally: Tally | None = None) -> list[int]:
    """Allowed values of one integer knob (a table column): the pinned value(s) or `natural`, by the rules."""
    field = FIELD_OF_COLUMN[knob]
    if field not in pins:
        cands = list(natural)
    elif isinstance(pins[field], (tuple, list, set, frozenset)):
        cands = [int(x) for x in natural if allowed(pins, field, int(x))]
    else:
        cands = [int(pins[field])]
    if not cands:
        return []
    col = np.array(cands, dtype=np.int64)
    return col[keep({knob: col}, facts, pins, framework, tally, knob)].tolist()


def schedule_candidates(pp: int, max_virtual_stages: int) -> list[tuple[int, int]]:
    """(schedule code, virtual stages) a pipeline of pp ranks could use, in the search's order."""
    if pp == 1:
        return [(int(SCHEDULES[name].code), 1) for name in ONE_RANK_SCHEDULES]
    out = []
    for name in SEARCH_ORDER:
        s = SCHEDULES[name]
        out += [(int(s.code), v) for v in (range(2, max_virtual_stages + 1) if s.virtual_stages else (1,))]
    return out


def schedule_options(pp: np.ndarray, m: np.ndarray, facts: Facts, pins: Mapping[str, Any], framework: str,
                     max_virtual_stages: int, prune_dominated: bool, tally: Tally | None = None
                     ) -> list[list[tuple[int, int]]]:
    """Per (pp, m) key, the (schedule code, virtual stages) options, in the search's order.

    Without pipelining the loop is reported once (`ONE_RANK_SCHEDULES`). A schedule the registry marks
    `dominated_by` another (same makespan, more memory) is left out where that one is valid, unless pinned
    or `prune_dominated` is off (the brute-force oracle)."""
    by_key: list[list[tuple[int, int]]] = [[] for _ in range(len(pp))]
    if not len(pp):
        return by_key
    # Every key's candidates in the search's order, one block per key: those of one rank, or of a pipeline
    # (the same list for every pp > 1).
    pp, m = np.asarray(pp, dtype=np.int64), np.asarray(m, dtype=np.int64)
    one, many = (np.array(schedule_candidates(p, max_virtual_stages), dtype=np.int64).reshape(-1, 2) for p in (1, 2))
    single = pp == 1
    counts = np.where(single, len(one), len(many))
    owner_arr = np.repeat(np.arange(len(pp)), counts)
    slot = np.arange(len(owner_arr)) - np.repeat(np.cumsum(counts) - counts, counts)
    width = max(len(one), len(many))
    pad = np.zeros((2, width, 2), dtype=np.int64)
    pad[0, : len(one)], pad[1, : len(many)] = one, many
    cand = pad[np.where(single[owner_arr], 0, 1), slot]
    table = {"pp": pp[owner_arr], "m": m[owner_arr], "sched": cand[:, 0], "v": cand[:, 1]}
    if not len(owner_arr):
        return by_key
    ok = keep(table, facts, pins, framework, tally, "schedule")
    kept = np.nonzero(ok)[0]
    owner, sched, virtual, pps = (a[kept].tolist() for a in (owner_arr, table["sched"], table["v"], table["pp"]))
    valid = set(zip(owner, sched))
    codes = {s.code: s for s in SCHEDULES.values()}
    allow_schedule = {c: allowed(pins, "schedule", s.name) for c, s in codes.items()}
    allow_virtual: dict[int, bool] = {}
    for i, code, v, p in zip(owner, sched, virtual, pps):
        s = codes[code]
        if v not in allow_virtual:
            allow_virtual[v] = allowed(pins, "virtual_stages", v)
        if not (allow_schedule[code] and allow_virtual[v]):
            continue
        if p == 1:
            if not by_key[i]:
                by_key[i].append((int(s.code), v))
            continue
        dominator = SCHEDULES[s.dominated_by] if s.dominated_by else None
        if (dominator is not None and prune_dominated and (i, int(dominator.code)) in valid
                and not (allow_schedule[code] and "schedule" in pins)):
            continue
        by_key[i].append((int(s.code), v))
    return by_key


def zero_options(dp: np.ndarray, pp: np.ndarray, facts: Facts, pins: Mapping[str, Any], framework: str,
                 prune_dominated: bool, tally: Tally | None = None) -> list[list[tuple[int, int]]]:
    """Per (dp, pp) key, the (ZeRO stage, sharding group size) options.

    Searched: ZeRO-0 unsharded, ZeRO-1/2 over all of DP, ZeRO-3 over every group size dividing DP (HSDP trades
    gather bandwidth for memory there); a pinned dp_shard is the only size tried. With pp > 1, ZeRO-2 and
    ZeRO-3 keep ZeRO-1's memory (the pipeline schedule holds gradients and gathered weights until the step's
    reduction) at ZeRO-1's or more communication, so they are dominated where ZeRO-1 is valid with the same
    sharding group (all of DP) and searched only when pinned; ZeRO-3's HSDP groups (dp_shard < dp) have no
    ZeRO-1 twin and stay (with overlap interference priced, the brute-force oracle found an HSDP ZeRO-3
    pipeline faster than any ZeRO-1 one); a framework without ZeRO-1 (TorchTitan) has them all searched."""
    cols: dict[str, list[int]] = {"dp": [], "pp": [], "zero": [], "dp_shard": []}
    owner = []
    shard_pin = pins.get("dp_shard")
    for i, (d, p) in enumerate(zip(dp.tolist(), pp.tolist())):
        for z in range(4):
            if not allowed(pins, "zero", z):
                continue
            shards = [int(shard_pin)] if shard_pin is not None else [1] if z == 0 else divisors(d) if z == 3 else [d]
            for s in shards:
                for k, x in zip(cols, (d, p, z, s)):
                    cols[k].append(x)
                owner.append(i)
    out: list[list[tuple[int, int]]] = [[] for _ in range(len(dp))]
    if not owner:
        return out
    table = {k: np.array(x, dtype=np.int64) for k, x in cols.items()}
    ok = keep(table, facts, pins, framework, tally, "zero")
    zero1_valid = {owner[j] for j in np.nonzero(ok & (table["zero"] == 1))[0].tolist()}
    for j in np.nonzero(ok)[0].tolist():
        z, i = int(table["zero"][j]), owner[j]
        if (z >= 2 and int(table["pp"][j]) > 1 and prune_dominated and i in zero1_valid
                and int(table["dp_shard"][j]) == int(table["dp"][j])
                and not ("zero" in pins and allowed(pins, "zero", z))):
            continue
        out[i].append((z, int(table["dp_shard"][j])))
    return out


def refuse_pins(pins: Mapping[str, Any], framework: str) -> None:
    """Refuse, in one line naming the framework's rule, a pinned value of a set-valued knob (schedule,
    recompute, zero) that `framework` does not run: the search would only drop it silently."""
    for name in SET_PINS:
        pinned = pins.get(name)
        for value in pinned if isinstance(pinned, (tuple, list, set, frozenset)) else () if pinned is None else (pinned,):
            try:
                row = {COLUMN_OF_FIELD[name]: encode(name, value)}
            except (KeyError, ValueError):
                continue  # not a value of the knob at all: the pins' own validation says so
            if name == "schedule":  # a schedule is a label without pipelining: judge it with a pipeline
                row["pp"] = 2 if pins.get("pp") in (None, 1) else int(pins["pp"])
                if pins.get("pp") == 1:
                    continue
            found = [(r, text) for r, text in rules.broken(row, Facts(), rules.rules_for(framework)) if r.frameworks]
            if found:
                raise UserError(rules.described(found), where=f"--{name} {value} with --framework {framework}",
                                fix=f"{rules.fixes(found, Facts())}, or another --framework")
