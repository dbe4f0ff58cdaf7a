"""Which pin left no valid layout, and why: the "no valid layout" message (`planner.api.infeasible_message`).

`meshplan plan --model llama3-8b --tp 3` used to say "change --global-batch"; the cause is that 3 does not
divide the 32 attention heads. The search space is built in stages (`planner.solver.space`): shapes
(tp, cp, pp, dp, ep), then micro-batch sizes, then schedules and ZeRO options. For each pinned knob this
module asks the SAME stage functions which values the knob could take with every other pin kept and its own
pin left out; a pinned value outside that set is the culprit, reported with the set and the stage's rule in
numbers. When every pin is valid alone, the smallest conflicting pair of pins is named.

No rule is restated as code here (the stage functions are the rules); the sentences stating each rule for
the user are the only other copy. They go when the one rule set lands (`planner/layout/rules`), whose
checks name themselves.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np

from planner.cost.evaluate import SCHEDULES
from planner.solver.exact import nvlink_domain_size
from planner.solver.space import (
    Pins,
    SearchLimits,
    _schedules,
    _zero_options,
    micro_batch_pairs,
    shape_candidates,
)

SHAPE_KNOBS = ("tp", "cp", "pp", "dp", "ep")
FLAGS = {"micro_batch": "--micro-batch", "num_microbatches": "--num-microbatches", "virtual_stages": "--virtual-stages",
         "dp_shard": "--dp-shard", "sequence_parallel": "--sequence-parallel", "mesh_axes": "--mesh-axes"}


def _flag(knob: str) -> str:
    return FLAGS.get(knob, f"--{knob}")


def _rule(knob: str, ctx: Any, limits: SearchLimits) -> str:
    """The validity rule of `knob`, in this request's numbers (see planner.solver.space's docstring)."""
    m, w = ctx.model, ctx.workload
    n = int(ctx.cluster.num_gpus)
    experts = m.moe.num_experts if m.moe is not None else 1
    return {
        "tp": f"TP splits attention heads and the MLP: it must divide the {m.num_heads} heads and the FFN width "
              f"{m.ffn_hidden_size}, divide or be a multiple of the {m.num_kv_heads} KV heads, and be at most "
              f"{limits.max_tp or 2 * nvlink_domain_size(ctx.cluster)} (--max-tp)",
        "cp": f"CP cuts each sequence into 2 x cp load-balanced chunks: {w.seq_len} tokens must divide by 2 x cp, "
              f"cp <= {limits.max_cp} (--max-cp)",
        "pp": f"every pipeline stage needs a layer and a GPU: pp <= {m.num_layers} layers and <= {n} GPUs",
        "dp": f"each DP replica takes a whole share of the {w.batch}-sequence global batch: dp must divide {w.batch} "
              f"and fit the {n} GPUs",
        "ep": f"EP splits the experts: ep must divide the model's {experts} expert(s)"
              + (" (it has none: ep is 1)" if m.moe is None else ""),
        "micro_batch": f"global batch {w.batch} = dp x micro_batch x num_microbatches: micro_batch must divide "
                       f"{w.batch} / dp and be <= {limits.max_micro_batch} (--max-micro-batch)",
        "num_microbatches": f"global batch {w.batch} = dp x micro_batch x num_microbatches",
        "schedule": "1F1B, ZB-H1 and interleaved need num_microbatches >= pp (interleaved also num_microbatches % "
                    "pp == 0); without pipeline parallelism (pp = 1) only 1f1b/gpipe apply",
        "virtual_stages": f"virtual_stages > 1 means the interleaved schedule: pp > 1, num_microbatches % pp == 0 and "
                          f"pp x virtual_stages <= {m.num_layers} layers",
        "zero": "ZeRO shards over data parallelism",
        "dp_shard": "dp_shard (the ZeRO/FSDP group) must divide dp and needs --zero >= 1",
        "sequence_parallel": "sequence parallelism splits activations over the TP group: it needs tp > 1",
    }.get(knob, "")


def _shapes(ctx: Any, pins: Pins, limits: SearchLimits) -> tuple[np.ndarray, ...]:
    return shape_candidates(ctx.model, int(ctx.cluster.num_gpus), ctx.workload.batch, ctx.workload.seq_len, pins,
                            limits, nvlink_domain_size(ctx.cluster))


def _values(knob: str, ctx: Any, pins: Pins, limits: SearchLimits) -> set:
    """Values of `knob` in the search space under `pins` (which should not pin `knob` itself)."""
    shapes = _shapes(ctx, pins, limits)
    if knob in SHAPE_KNOBS:
        return set(shapes[SHAPE_KNOBS.index(knob)].tolist())
    if knob == "sequence_parallel":  # needs tp > 1 (no option at all when every shape has tp = 1)
        return {False, True} if (shapes[0] > 1).any() else ({False} if len(shapes[0]) else set())
    batch = ctx.workload.batch
    idx, mb = micro_batch_pairs(batch, shapes, pins, limits)
    if knob == "micro_batch":
        return set(mb.tolist())
    dp, pp = shapes[3][idx], shapes[2][idx]
    m = batch // np.maximum(dp * mb, 1)
    if knob == "num_microbatches":
        return set(m.tolist())
    if knob in ("schedule", "virtual_stages"):
        opts = {o for p, q in set(zip(pp.tolist(), m.tolist())) for o in _schedules(p, q, ctx.model.num_layers, pins, limits)}
        return {SCHEDULES[s] for s, _ in opts} if knob == "schedule" else {v for _, v in opts}
    if knob in ("zero", "dp_shard"):
        opts = {o for d, p in set(zip(dp.tolist(), np.minimum(pp, 2).tolist())) for o in _zero_options(d, p, pins, limits)}
        return {z for z, _ in opts} if knob == "zero" else {s for _, s in opts}
    return set()


def _without(pins: Pins, *knobs: str) -> Pins:
    return Pins({k: v for k, v in pins.values.items() if k not in knobs})


def _allowed(pins: Pins, knob: str, values: set) -> bool:
    return any(pins.allow(knob, v) for v in values)


def _show(values: set) -> str:
    """'1, 2, 4, 8' or '1..16' (runs of consecutive integers joined), in order."""
    if not values:
        return "none"
    items = sorted(values, key=lambda v: (isinstance(v, str), v))
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        return ", ".join(str(v) for v in items)
    runs: list[list[int]] = []
    for v in items:
        if runs and v == runs[-1][-1] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(f"{r[0]}..{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


def _pin(knob: str, value: Any) -> str:
    """How the user wrote the pin: '--tp 3', '--sequence-parallel', '--no-sequence-parallel'."""
    if isinstance(value, bool):
        return _flag(knob) if value else _flag(knob).replace("--", "--no-", 1)
    shown = ",".join(map(str, value)) if isinstance(value, tuple | list) else str(value)
    return f"{_flag(knob)} {shown}"


def pin_conflict(ctx: Any, pins: Pins, limits: SearchLimits) -> str | None:
    """One line naming the pin (or pair of pins) that leaves no valid layout, its valid values and the rule;
    None when the pins are not the cause. Checked in order: each pin alone, the pinned degrees against the
    GPU count, each pair of pins, each pin against all the others."""
    pinned = [k for k in pins.values if k != "mesh_axes"]  # every mesh order is valid for every shape
    for knob in pinned:
        values = _values(knob, ctx, Pins({}), limits)
        if not _allowed(pins, knob, values):
            return (f"{_pin(knob, pins.get(knob))} is not possible here: {_rule(knob, ctx, limits)}; so {knob} can be "
                    f"{_show(values)}; fix: pin one of those or drop {_flag(knob)}")
    degrees = [k for k in ("dp", "tp", "pp", "cp") if isinstance(pins.get(k), int)]
    product = int(np.prod([int(pins.get(k)) for k in degrees])) if degrees else 1
    n = int(ctx.cluster.num_gpus)
    if product > n:
        return (f"the pinned degrees {' x '.join(f'{k}={pins.get(k)}' for k in degrees)} need {product} GPUs but "
                f"the cluster has {n}; fix: pin smaller degrees or add GPUs (--nodes/--gpus)")
    for a, b in combinations(pinned, 2):
        pair = Pins({a: pins.get(a)})
        values = _values(b, ctx, pair, limits)
        if not _allowed(pins, b, values):
            return (f"{_pin(a, pins.get(a))} and {_pin(b, pins.get(b))} leave no valid layout together: "
                    f"{_rule(b, ctx, limits)}; with {a}={pins.get(a)}, {b} can be {_show(values)}; fix: change one "
                    "of them")
    for knob in pinned:
        values = _values(knob, ctx, _without(pins, knob), limits)
        if not _allowed(pins, knob, values):
            others = ", ".join(f"{k}={pins.get(k)}" for k in pinned if k != knob)
            return (f"{_pin(knob, pins.get(knob))} leaves no valid layout with {others}: {_rule(knob, ctx, limits)}; "
                    f"{knob} can then be {_show(values)}; fix: change one of the pins")
    return None
