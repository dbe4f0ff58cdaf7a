"""`planner.sweep`: the best layout of every combination of models, clusters, sizes, batches and sequence
lengths, as one table: the question to answer before renting ("how many GPUs, and of which kind?").

    import planner
    df = planner.sweep("llama3-70b", ["dgx-h100", "gb200-nvl72"], nodes=[8, 16, 32, 64],
                       global_batch_tokens=4 * 2**20, seq_len=8192, tokens=15e12, price_per_gpu_hour=2.5)
    df[["cluster", "gpus", "layout", "tokens_per_s", "train_time_s", "cost"]]

Each argument takes one value or a list; every combination is searched exactly (`planner.api.search_result`,
the best plan costed rank by rank as `planner.search` does). The searches of one process share the cluster
topologies and their collective coefficients (`planner.cost.comm.AxisBandwidth`), so a sweep costs about a
warm search per point. A point where nothing fits, or whose inputs do not go together, still gets a row:
`status` says why in a few words. `meshplan sweep` is the command-line face of this module.

Columns (`COLUMNS`; SI units in the names, GiB = 2**30 bytes):
  model, cluster, gpu, nodes, gpus, global_batch, global_batch_tokens, seq_len   the point's inputs
  status          "ok", or why there is no plan
  layout, dp, tp, pp, cp, ep, gpus_used   the best layout (gpus_used < gpus when idle GPUs win)
  step_time_s, tokens_per_s, mfu (fraction), peak_memory_gib, memory_capacity_gib
  tokens          the training token budget (`tokens=`), train_time_s = tokens / tokens_per_s
  gpu_hours       every GPU of the cluster (idle ones are rented too) for train_time_s
  price_per_gpu_hour, cost = gpu_hours x price, cost_per_million_tokens (the price is the user's; there is
                  no built-in price). Without `tokens` or a price those columns are empty (NaN).
  search_s        wall seconds of the point's search and costing
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from planner.errors import InfeasibleError, UserError

if TYPE_CHECKING:
    import pandas as pd

    from planner.layout import Workload
    from planner.model import ModelSpec
    from planner.plan import Plan

GiB = 2**30
INPUT_COLUMNS = ("model", "cluster", "gpu", "nodes", "gpus", "global_batch", "global_batch_tokens", "seq_len")
COLUMNS = (*INPUT_COLUMNS, "status", "layout", "dp", "tp", "pp", "cp", "ep", "gpus_used", "step_time_s",
           "tokens_per_s", "mfu", "peak_memory_gib", "memory_capacity_gib", "tokens", "train_time_s", "gpu_hours",
           "price_per_gpu_hour", "cost", "cost_per_million_tokens", "search_s")
OK = "ok"

Progress = Callable[[int, int, str], None]
"""Called after each point with (points done, points in all, the point's label)."""


@dataclass(frozen=True)
class Point:
    """One combination to search: resolved inputs, or the one-line reason they could not be resolved."""

    labels: dict[str, Any]  # the input columns as the user gave them (names, sizes)
    model: ModelSpec | None = None
    cluster: Any = None  # hardware_profiles.Cluster
    workload: Workload | None = None
    options: dict[str, Any] = field(default_factory=dict)  # cost-model options (flash_attention)
    error: str | None = None

    @property
    def label(self) -> str:
        """What the progress bar shows while the point runs: model, cluster, size."""
        model, cluster = self.labels.get("model"), self.labels.get("cluster")
        size = (f"{self.labels['gpus']} GPUs" if self.labels.get("gpus") is not None
                else f"{self.labels['nodes']} nodes" if self.labels.get("nodes") is not None else None)
        return " ".join(str(v) for v in (model, cluster, size) if v is not None)


def as_list(value: Any, name: str) -> list[Any]:
    """One value or a sequence of them, as a list (None stays one 'unset' entry); `name` for the error."""
    if isinstance(value, (list, tuple, range)):
        if not value:
            raise UserError(f"{name}=[] lists no values", fix=f"give {name} at least one value")
        return list(value)
    return [value]


def reason(exc: Exception) -> str:
    """The what of a user error, without its fix: short enough for a table cell."""
    errors = getattr(exc, "errors", None)
    if callable(errors):  # a pydantic ValidationError (the workload's own checks): its first message
        first = errors()[0]
        return str(first.get("msg", exc)).removeprefix("Value error, ")
    return str(exc).split("; fix:")[0]


def sweep(
    model: Any = "llama3-70b",
    cluster: Any = "dgx-h100",
    *,
    nodes: int | Sequence[int] | None = None,
    gpus: int | Sequence[int] | None = None,
    global_batch: int | Sequence[int] | None = None,
    global_batch_tokens: int | Sequence[int] | None = None,
    seq_len: int | Sequence[int] | None = None,
    tokens: float | None = None,
    price_per_gpu_hour: float | None = None,
    progress: Progress | None = None,
    **pins: Any,
) -> pd.DataFrame:
    """The best plan of every combination of the inputs (each one value or a list), one row per combination.

    `model`: preset names, model files or `ModelSpec`s; `cluster`: profile names, files or `Cluster`s; sizes
    by `nodes` or `gpus` (the profile's default size when neither is given); the batch by `global_batch`
    (sequences) or `global_batch_tokens`, and `seq_len`, defaulting per model as in `meshplan plan`
    (`Workload.for_model`: 512 sequences of 8192 tokens, capped at the model's context); `tokens`: a training budget for time,
    GPU-hours and cost; `price_per_gpu_hour`: your price (there is no built-in one); `pins` as in
    `planner.search` (`tp=8`, `recompute="full"`, ...) apply to every point. See the module docstring for
    the columns.
    """
    import hardware_profiles
    from planner.layout import Workload
    from planner.model import ModelSpec, load_model

    if nodes is not None and gpus is not None:
        raise UserError("give nodes or gpus, not both", fix="drop one of them")
    sizes = ([("nodes", n) for n in as_list(nodes, "nodes")] if gpus is None
             else [("gpus", g) for g in as_list(gpus, "gpus")])
    loaded: dict[tuple, Any] = {}  # each model and cluster size resolved once

    def once(key: tuple, make: Callable[[], Any]) -> Any:
        if key not in loaded:
            loaded[key] = make()
        return loaded[key]

    def point(m: Any, c: Any, size: tuple[str, int | None], batch: int | None, batch_tokens: int | None,
              seq: int | None) -> Point:
        labels = {"model": getattr(m, "name", m), "cluster": getattr(c, "name", c), size[0]: size[1],
                  "global_batch": batch, "global_batch_tokens": batch_tokens, "seq_len": seq}
        try:
            spec = m if isinstance(m, ModelSpec) else once(("model", m), lambda: load_model(m))
            resolved = once(("cluster", id(c), size), lambda: hardware_profiles.cluster(c, **{size[0]: size[1]}))
            workload = Workload.for_model(spec, global_batch=batch, global_batch_tokens=batch_tokens, seq_len=seq)
        except (UserError, hardware_profiles.ProfileError, ValueError) as exc:
            return Point(labels, error=reason(exc))
        return Point(labels, spec, resolved, workload)

    combos = itertools.product(as_list(model, "model"), as_list(cluster, "cluster"), sizes,
                               as_list(global_batch, "global_batch"),
                               as_list(global_batch_tokens, "global_batch_tokens"), as_list(seq_len, "seq_len"))
    return run(
        [point(*combo) for combo in combos], tokens=tokens, price_per_gpu_hour=price_per_gpu_hour,
        progress=progress, **pins,
    )


def run(points: Iterable[Point], *, tokens: float | None = None, price_per_gpu_hour: float | None = None,
        progress: Progress | None = None, **pins: Any) -> pd.DataFrame:
    """Search every point and return the table (rows in the points' order; see `COLUMNS`)."""
    import pandas as pd

    if tokens is not None and not tokens > 0:
        raise UserError(f"tokens={tokens!r} must be a positive number of training tokens", fix="e.g. 15e12")
    if price_per_gpu_hour is not None and not price_per_gpu_hour > 0:
        raise UserError(f"price_per_gpu_hour={price_per_gpu_hour!r} must be positive", fix="e.g. 2.5")
    points = list(points)
    # Points of one cluster run together, so its topology and coefficients are built once and stay cached.
    order = sorted(range(len(points)), key=lambda i: _cluster_key(points[i]))
    rows: list[dict[str, Any] | None] = [None] * len(points)
    for done, i in enumerate(order, 1):
        rows[i] = _row(points[i], tokens, price_per_gpu_hour, pins)
        if progress is not None:
            progress(done, len(points), points[i].label)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _cluster_key(p: Point) -> str:
    return "" if p.cluster is None else p.cluster.fingerprint()


def _row(p: Point, tokens: float | None, price: float | None, pins: dict[str, Any]) -> dict[str, Any]:
    """One table row: the point's inputs, then its best plan or why there is none."""
    from planner import api

    row: dict[str, Any] = dict.fromkeys(COLUMNS, math.nan)
    row.update({k: v for k, v in p.labels.items() if k in INPUT_COLUMNS})
    row.update(tokens=math.nan if tokens is None else tokens, status=p.error, layout="",
               price_per_gpu_hour=math.nan if price is None else price)
    if p.error is not None:
        return row
    cluster, workload = p.cluster, p.workload
    row.update(model=p.model.name, cluster=cluster.name, gpu="+".join(sorted(cluster.gpus)), nodes=cluster.num_nodes,
               gpus=cluster.num_gpus, global_batch=workload.batch, global_batch_tokens=workload.tokens_per_step,
               seq_len=workload.seq_len)
    start = time.perf_counter()
    try:
        ctx, result = api.search_result(p.model, cluster, workload, top=1, **pins, **p.options)
        row["memory_capacity_gib"] = ctx.memory_capacity_bytes / GiB
        if not len(result.step_time_s):
            from planner.infeasible import short_reason

            row["status"] = short_reason(ctx, result)
            return row
        plan = api.plans_from_result(ctx, result, pins, placed=False)[0]  # a table row: no placement
    except (InfeasibleError, UserError) as exc:
        row["status"] = reason(exc)
        return row
    finally:
        row["search_s"] = time.perf_counter() - start
    row.update(_plan_columns(plan, cluster.num_gpus, tokens, price))
    return row


def _plan_columns(plan: Plan, gpus: int, tokens: float | None, price: float | None) -> dict[str, Any]:
    pred, lay = plan.prediction, plan.layout
    out: dict[str, Any] = {
        "status": OK, "layout": lay.describe(), "dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "ep": lay.ep,
        "gpus_used": lay.world_size, "step_time_s": pred.step_time_s, "tokens_per_s": pred.tokens_per_s,
        "mfu": pred.mfu, "peak_memory_gib": pred.peak_memory_bytes / GiB,
    }
    gpu_s_per_token = gpus / pred.tokens_per_s  # every rented GPU, idle or not
    if tokens is not None:
        out["train_time_s"] = tokens / pred.tokens_per_s
        out["gpu_hours"] = gpu_s_per_token * tokens / 3600
    if price is not None:
        out["cost_per_million_tokens"] = gpu_s_per_token * 1e6 / 3600 * price
        if tokens is not None:
            out["cost"] = out["gpu_hours"] * price
    return out
