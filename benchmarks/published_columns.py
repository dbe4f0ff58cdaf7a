"""The search-derived columns of benchmarks/published_runs.py: the published layout's rank, the spread of its
prediction over unstated knobs, and a search row in a few words."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from planner.api import search_result
from planner.layout import COLUMNS, RECOMPUTE_NAMES, SCHEDULE_NAMES, Workload


def _shape(row: dict[str, Any]) -> tuple[int, ...]:
    return tuple(int(row[k]) for k in ("tp", "pp", "dp", "cp", "ep"))


def published_rank(model, cluster, workload: Workload, stated: dict[str, Any], pinned_s: float,
                   published_shape: tuple[int, ...]) -> str:
    """Rank of the published (tp, pp, dp, cp, ep) among the distinct shapes the planner finds with the same
    stated knobs and framework features, each shape at its own best unstated settings: 1 + the number of other
    shapes strictly faster than the published layout's prediction. Grows the searched top-K until the answer is
    certain (">N" when at least N other shapes are faster)."""
    top = 64
    while True:
        _, res = search_result(model, cluster, workload, top=top, framework="any", **stated)
        faster: set[tuple[int, ...]] = set()
        for i in range(len(res.step_time_s)):
            row = {k: res.table[k][i] for k in ("tp", "pp", "dp", "cp", "ep")}
            if res.step_time_s[i] < pinned_s * (1 - 1e-9) and _shape(row) != published_shape:
                faster.add(_shape(row))
        exhausted = len(res.step_time_s) < top or res.step_time_s[-1] >= pinned_s * (1 - 1e-9)
        if exhausted or len(faster) >= 5 or top >= 4096:
            return str(len(faster) + 1) if exhausted else f">{len(faster)}" if len(faster) >= 5 else f">={len(faster) + 1}"
        top *= 4


def layout_label(table: dict[str, np.ndarray], i: int = 0) -> str:
    """A row of a search table in a few words: shape, micro-batch, schedule and interleaving, ZeRO stage,
    recomputation (rc-) and sequence parallelism (sp) where on."""
    r = {k: int(v[i]) for k, v in table.items()}
    text = f"tp{r['tp']} pp{r['pp']} dp{r['dp']}" + (f" cp{r['cp']}" if r["cp"] > 1 else "") + (
        f" ep{r['ep']}" if r["ep"] > 1 else "") + f" mb{r['mb']}"
    if r["pp"] > 1:
        text += f" {SCHEDULE_NAMES[r['sched']]}" + (f"-v{r['v']}" if r["v"] > 1 else "")
    text += f" z{r['zero']} rc-{RECOMPUTE_NAMES[r['rc']]}"
    return text + (" sp" if r["sp"] and r["tp"] > 1 else "")


def unstated_spread(model, cluster, workload: Workload, pins: dict[str, Any],
                    recost: Callable[[dict[str, int]], float] | None = None,
                    builds: Callable[[dict[str, int]], bool] | None = None) -> tuple[float, float, int]:
    """(fastest, slowest, count) of the predictions over the micro-batch x interleaving settings the pins leave
    open, each setting at its best other knobs: how much the unstated knobs alone move the prediction. `recost`
    re-prices each setting's best row (the published framework's layer split, published_partitions.py); `builds`
    keeps only the rows the published framework can build (a setting it refuses is not one the run could have used;
    when none builds, every setting counts, as the run did build one)."""
    _, res = search_result(model, cluster, workload, top=1, keep_all=True, framework="any", **pins)
    rows = res.all_feasible
    if not rows or len(rows["step_time_ms"]) == 0:
        return float("nan"), float("nan"), 0
    built = [builds({k: int(rows[k][i]) for k in COLUMNS}) if builds else True for i in range(len(rows["step_time_ms"]))]
    if not any(built):
        built = [True] * len(built)
    best: dict[tuple[int, int], tuple[float, int]] = {}
    for i, (mb, v, t) in enumerate(zip(rows["mb"].tolist(), rows["v"].tolist(), rows["step_time_ms"].tolist())):
        if built[i] and t / 1e3 < best.get((mb, v), (np.inf, -1))[0]:
            best[(mb, v)] = (t / 1e3, i)
    times = [recost({k: int(rows[k][i]) for k in COLUMNS}) if recost else t for t, i in best.values()]
    return min(times), max(times), len(times)
