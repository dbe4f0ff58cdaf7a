"""Check the planner's ranking of layouts against the orderings sources measured side by side.

    .venv/bin/python benchmarks/published_orderings.py [--ids ID,ID,...]

Reads benchmarks/data/published_orderings.yaml: rankings of parallel layouts that a source measured on the same
model, GPUs and batch and states in its text ("peak performance when the tensor-parallel size is equal to the number
of GPUs in a single node"). A planner's claim that some layout beats a published one is a claim about such a
ranking, so each entry is predicted here: every listed layout pinned inside the source's framework
(published_runs.FRAMEWORKS: the software the source ran), the settings the source leaves unstated at their best, as
for the published runs. It prints each layout's predicted step time and throughput per GPU, the entry's claim and
whether the predictions keep it, with the margin: how much faster the claimed winner is predicted (fastest_first),
the smallest step between neighbours (slower_along), or the gains per batch (gain_shrinks).
"""

from __future__ import annotations

import argparse
import sys
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from published_cases import ARCHS, GPT2_PADDED_VOCAB
from published_runs import FRAMEWORKS, framework_features
from pydantic import BaseModel, ConfigDict, Field, ValidationError

import hardware_profiles
from planner.api import search_result
from planner.layout import Workload
from planner.model import ModelSpec

DATA = Path(__file__).parent / "data" / "published_orderings.yaml"
SEQ_LEN = 2048  # Narayanan et al. 2021 Sec. 5: 'a sequence length of 2048'
Claim = Literal["fastest_first", "slower_along", "gain_shrinks", "needs_recompute"]


class OrderingModel(BaseModel):
    """A Megatron GPT shape as the source states it (the 4h MLP and the 51,200 vocabulary are the paper's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    where: str = Field(min_length=1, description="Where the source states the shape, quoted.")


class Ordering(BaseModel):
    """One measured ranking: the layouts in the order the source's text puts them, and the claim about them."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    source: str
    where: str = Field(min_length=1, description="Section and figure, and what the text gives about the setup.")
    quote: str = Field(min_length=1, description="The sentence of the source that states the ordering.")
    model: str
    gpus: int = Field(gt=0)
    framework: str = "megatron-lm-2021"
    global_batch: int | None = Field(None, gt=0)
    batches: tuple[int, ...] = Field((), description="gain_shrinks: the batch sizes, smallest first.")
    micro_batch: int | None = Field(None, gt=0, description="Stated micro-batch size; unset: searched.")
    recompute: str | None = Field(None, description="Stated activation recomputation; unset: searched.")
    unstated: str = Field(description="What the source leaves open; the search takes its best setting.")
    claim: Claim
    layouts: tuple[dict[str, Any], ...] = Field(min_length=1)


class Orderings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    sources: dict[str, str]
    models: dict[str, OrderingModel]
    orderings: tuple[Ordering, ...]


@cache
def load_orderings(path: Path = DATA) -> Orderings:
    data = Orderings.model_validate(yaml.safe_load(path.read_text()))
    for entry in data.orderings:
        if entry.source not in data.sources or entry.model not in data.models or entry.framework not in FRAMEWORKS:
            raise ValueError(f"{path}: ordering {entry.id}: unknown source, model or framework")
        if (entry.claim == "gain_shrinks") != bool(entry.batches) or (entry.global_batch is None) == (not entry.batches):
            raise ValueError(f"{path}: ordering {entry.id}: give `batches` for gain_shrinks, `global_batch` otherwise")
    return data


def build_ordering_model(name: str, shape: OrderingModel) -> ModelSpec:
    return ModelSpec(name=name, num_layers=shape.layers, hidden_size=shape.hidden, num_heads=shape.heads,
                     num_kv_heads=shape.heads, ffn_hidden_size=4 * shape.hidden, vocab_size=GPT2_PADDED_VOCAB,
                     max_seq_len=SEQ_LEN, qkv_bias=True, source=shape.where[:200], **ARCHS["gpt"])


def predict_s(entry: Ordering, layout: dict[str, Any], batch: int, recompute: Any = None) -> float | None:
    """The predicted step time of `layout` at `batch` inside the entry's framework (None: nothing fits)."""
    data = load_orderings()
    model = build_ordering_model(entry.model, data.models[entry.model])
    options = dict(FRAMEWORKS[entry.framework]["workload"])
    dtype = options.pop("dtype", "bf16")
    work = Workload(global_batch=batch, seq_len=SEQ_LEN, dtype=dtype, **options)
    pins = {**framework_features(entry.framework), "cp": 1, "ep": 1, **layout}
    if entry.micro_batch:
        pins["micro_batch"] = entry.micro_batch
    if recompute or entry.recompute:
        pins["recompute"] = recompute or entry.recompute
    cluster = hardware_profiles.cluster("selene", gpus=entry.gpus)
    _, found = search_result(model, cluster, work, top=1, framework="any", **pins)
    return float(found.step_time_s[0]) if len(found.step_time_s) else None


def check(entry: Ordering) -> dict[str, Any]:
    """The entry's predictions, whether they keep its claim, and the margin by which they do (or do not)."""
    if entry.claim == "needs_recompute":
        (layout,) = entry.layouts
        without = predict_s(entry, layout, entry.global_batch, recompute="none")
        return {"holds": without is None, "margin": "no fit without recomputation" if without is None else
                f"fits without recomputation at {entry.global_batch / without / entry.gpus:.4f} seq/s per GPU",
                "times": {"recompute none": without}}
    if entry.claim == "gain_shrinks":
        first, second = entry.layouts
        gains = []
        times: dict[str, float | None] = {}
        for b in entry.batches:
            a, b_s = predict_s(entry, first, b), predict_s(entry, second, b)
            times[f"b{b} {_label(first)}"], times[f"b{b} {_label(second)}"] = a, b_s
            gains.append(float("nan") if a is None or b_s is None else 100 * (a / b_s - 1))
        holds = all(g > 0 for g in gains) and all(x > y for x, y in zip(gains, gains[1:]))
        return {"holds": holds, "margin": "gains " + ", ".join(f"{g:+.1f} %" for g in gains), "times": times}
    times = {_label(lay): predict_s(entry, lay, entry.global_batch) for lay in entry.layouts}
    steps = list(times.values())
    if any(t is None for t in steps):
        return {"holds": False, "margin": "a listed layout does not fit", "times": times}
    if entry.claim == "fastest_first":
        margin = min(100 * (t / steps[0] - 1) for t in steps[1:])
        return {"holds": margin > 0, "margin": f"runner-up {margin:+.1f} % slower", "times": times}
    margin = min(100 * (later / earlier - 1) for earlier, later in zip(steps, steps[1:]))
    return {"holds": margin > 0, "margin": f"smallest step {margin:+.1f} %", "times": times}


def _label(layout: dict[str, Any]) -> str:
    return " ".join(f"{k}{v}" for k, v in layout.items())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ids", help="comma-separated ordering ids (default: all)")
    args = ap.parse_args(argv)
    try:
        data = load_orderings()
    except (ValidationError, ValueError) as exc:
        print(f"{DATA}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    wanted = args.ids.split(",") if args.ids else None
    unknown = sorted(set(wanted or ()) - {o.id for o in data.orderings})
    if unknown:
        print(f"unknown ordering id: {', '.join(unknown)}; see {DATA}", file=sys.stderr)
        return 2
    kept = 0
    chosen = [o for o in data.orderings if wanted is None or o.id in wanted]
    for entry in chosen:
        result = check(entry)
        kept += result["holds"]
        print(f"{entry.id}: {entry.claim} {'KEPT' if result['holds'] else 'NOT KEPT'} ({result['margin']})")
        print(f"  {data.sources[entry.source].split(',')[0]}, {entry.where}")
        for name, t in result["times"].items():
            batch = int(name[1:].split()[0]) if name.startswith("b") and name[1:2].isdigit() else entry.global_batch
            per_gpu = "" if t is None else f"  {batch / t / entry.gpus:.4f} seq/s per GPU"
            print(f"    {name:40s} {'no fit' if t is None else f'{t:9.3f} s'}{per_gpu}")
    print(f"orderings kept: {kept} of {len(chosen)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
