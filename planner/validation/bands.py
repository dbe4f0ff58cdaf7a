"""Error bands: how far real step times fell from the prediction on the validated runs that share its features.

A prediction's features are those the cost model's accuracy depends on: the GPU family, the runtime, whether
TP stays inside an NVLink domain, spans several or is off, the pipeline schedule (or none), CP, EP, ZeRO-3/FSDP,
and the scale (<= 64, <= 1024 or more GPUs). For each validated run (records.py) the deviation of the real
step time from the prediction is x = published / predicted - 1 = -error / (1 + error): x = +0.10 means the run
took 10 % longer than predicted. A band is the [min, max] of x over the validated runs that share the
prediction's features; when fewer than `MIN_RUNS` runs from `MIN_SOURCES` sources share all of them, features
are dropped from the least to the most telling (`LEVELS`: scale first, the GPU family last) until enough do, and
the band says which it used.

The band's upper end drives `--objective pessimistic` (score = step time x (1 + high)); `high_for_table` and
`least_high_for_shapes` give it vectorised over the search's table and a valid lower bound per shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from planner.layout.schedules import SCHEDULE_NAMES  # by table code (the registry's order)
from planner.validation.records import ValidatedRun, load_validated_runs

MIN_RUNS = 5
"""Fewest runs a band rests on. The next run falls inside the [min, max] of n exchangeable earlier ones with
probability (n - 1) / (n + 1) (order statistics): 2/3 at n = 5, which is the least this file accepts; the
published-runs benchmark prints the leave-one-out coverage the committed runs actually give."""
MIN_SOURCES = 2
"""Fewest sources a band's runs come from. Runs of one source (one recipe measured at several scales, one paper's
table) share its unstated settings and its systematic error, so they are not the exchangeable draws `MIN_RUNS`
assumes: five DGX Cloud Benchmarking runs of one Llama 3.1 8B recipe agree within 1.5 % of each other, which says
how repeatable that recipe is, not how close the next stack or model will fall."""
SCALE_EDGES = (64, 1024)
"""GPU-count buckets: up to a few nodes, up to a thousand GPUs, beyond."""
TP_CLASSES = ("off", "within NVLink", "beyond NVLink")
SCALE_NAMES = ("<= 64 GPUs", "65-1024 GPUs", "> 1024 GPUs")

LEVELS: tuple[tuple[str, ...], ...] = (
    ("family", "runtime", "tp", "pp", "cp", "ep", "fsdp", "scale"),
    ("family", "runtime", "tp", "pp", "cp", "ep", "fsdp"),
    ("family", "runtime", "tp", "piped", "cp", "ep", "fsdp"),
    ("family", "runtime", "tp_on", "piped", "cp", "ep", "fsdp"),
    ("family", "runtime", "tp_on", "piped", "cp", "ep"),
    ("family", "runtime", "cp", "ep"),
    ("family", "cp", "ep"),
    ("family", "ep"),
    ("family",),
    (),
)
"""Feature sets tried in order, most specific first: the schedule's details, TP's reach and ZeRO-3 go first, the
runtime before MoE/CP (an unvalidated runtime still learns from runs of its GPU family that are, like it, dense
or MoE), the GPU family last."""


def gpu_family(profile_name: str) -> str:
    """The family of a GPU profile: its name up to the first dash ('a100-80gb' -> 'a100', 'h100-sxm' -> 'h100')."""
    return str(profile_name).split("-")[0].lower()


@dataclass(frozen=True)
class Features:
    """What a prediction's accuracy depends on (module docstring)."""

    family: str
    runtime: str
    tp: int  # index into TP_CLASSES
    pp: str  # schedule name, or "none" without pipelining
    cp: bool
    ep: bool
    fsdp: bool
    scale: int  # index into SCALE_NAMES

    def value(self, name: str):
        if name == "piped":
            return self.pp != "none"
        if name == "tp_on":
            return self.tp > 0
        return getattr(self, name)

    def describe(self, names: tuple[str, ...]) -> str:
        words = {
            "family": self.family.upper(), "runtime": f"runtime {self.runtime}", "tp": f"TP {TP_CLASSES[self.tp]}",
            "tp_on": "TP on" if self.tp else "TP off", "pp": f"PP {self.pp}" if self.pp != "none" else "no PP",
            "piped": "PP on" if self.pp != "none" else "no PP", "cp": "CP on" if self.cp else "no CP",
            "ep": "EP on" if self.ep else "no EP", "fsdp": "ZeRO-3/FSDP" if self.fsdp else "no ZeRO-3",
            "scale": SCALE_NAMES[self.scale],
        }
        return ", ".join(words[n] for n in names) or "any run"


def tp_class(tp, domain) -> np.ndarray:
    tp = np.asarray(tp)
    return np.where(tp == 1, 0, np.where(tp <= domain, 1, 2))


def scale_class(gpus) -> np.ndarray:
    return np.searchsorted(np.asarray(SCALE_EDGES), np.asarray(gpus), side="left")


def features(family: str, runtime: str, tp: int, pp: int, cp: int, ep: int, zero: int, schedule: str, gpus: int,
             domain: int) -> Features:
    """Features of one layout on a cluster whose NVLink domain has `domain` GPUs."""
    return Features(family=family, runtime=runtime, tp=int(tp_class(tp, domain)), pp=schedule if pp > 1 else "none",
                    cp=cp > 1, ep=ep > 1, fsdp=zero == 3, scale=int(scale_class(gpus)))


def run_features(run: ValidatedRun) -> Features:
    return features(run.family, run.runtime, run.tp, run.pp, run.cp, run.ep, run.zero, run.schedule, run.gpus,
                    run.nvlink_domain)


def deviation(error: float) -> float:
    """Real over predicted step time, minus one, from the signed prediction error (module docstring)."""
    return -error / (1.0 + error)


@dataclass(frozen=True)
class Band:
    """Where the real step time fell relative to the prediction on comparable validated runs."""

    low: float
    high: float
    runs: int
    basis: str


def band_among(f: Features, runs) -> Band:
    """The band of a prediction with features `f` among validated `runs` (module docstring)."""
    data = [(run_features(r), deviation(r.error), r.source) for r in runs]
    for names in LEVELS:
        want = tuple(f.value(n) for n in names)
        shared = [(x, src) for g, x, src in data if tuple(g.value(n) for n in names) == want]
        xs, sources = [x for x, _ in shared], {src for _, src in shared}
        if (len(xs) >= MIN_RUNS and len(sources) >= MIN_SOURCES) or (not names and xs):
            what = f.describe(names)
            from_ = f" from {len(sources)} sources" if names else ""
            return Band(low=min(xs), high=max(xs), runs=len(xs),
                        basis=f"{len(xs)} validated runs{from_} with {what}" if names else f"all {len(xs)} validated runs")
    return Band(low=0.0, high=0.0, runs=0, basis="no validated runs")


@cache
def band_for(f: Features) -> Band:
    """The band of a prediction with features `f` among the committed validated runs (cached)."""
    return band_among(f, load_validated_runs().runs)


def context_features(ctx) -> tuple[str, str, int]:
    """(GPU family, runtime, NVLink domain size) of a cost context."""
    from planner.solver.space import nvlink_domain_size

    return gpu_family(ctx.gpu.name), str(ctx.workload.runtime), nvlink_domain_size(ctx.cluster)


def high_for_table(ctx, table: dict[str, np.ndarray]) -> np.ndarray:
    """The band's upper end for every row of a search table (planner.layout.table.COLUMNS)."""
    family, runtime, domain = context_features(ctx)
    world = table["dp"] * table["tp"] * table["pp"] * table["cp"]
    key = np.stack([tp_class(table["tp"], domain), np.where(table["pp"] > 1, table["sched"] + 1, 0),
                    table["cp"] > 1, table["ep"] > 1, table["zero"] == 3, scale_class(world)], axis=1).astype(np.int64)
    uniq, inverse = np.unique(key, axis=0, return_inverse=True)
    highs = np.array([band_for(Features(family, runtime, int(k[0]), SCHEDULE_NAMES[k[1] - 1] if k[1] else "none",
                                        bool(k[2]), bool(k[3]), bool(k[4]), int(k[5]))).high for k in uniq])
    return highs[inverse.reshape(-1)]


def least_high_for_shapes(ctx, tp, cp, pp, dp, ep) -> np.ndarray:
    """A lower bound of the band's upper end over every layout of each shape: the least over the knobs the
    shape leaves open (schedule, ZeRO-3 or not)."""
    out = np.full(len(tp), np.inf)
    for sched in range(len(SCHEDULE_NAMES)):
        for zero in (0, 3):
            table = {"tp": tp, "cp": cp, "pp": pp, "dp": dp, "ep": ep, "sched": np.full(len(tp), sched),
                     "zero": np.full(len(tp), zero)}
            out = np.minimum(out, high_for_table(ctx, table))
    return out
