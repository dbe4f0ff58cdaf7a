"""The per-rank GEMM shapes of the validated published runs, for one GPU harness to time them all.

    .venv/bin/python benchmarks/training_gemm_shapes.py [--out benchmarks/data/training_gemm_shapes.json]

The cost model times every weight GEMM on one FLOP-only curve (planner.cost.efficiency), fitted to a handful of
shapes. Whether the inner dimension K matters too (small-K GEMMs: the down-projection at high TP, MoE experts split
over TP) can only be settled by timing the shapes the validation rows actually run, in one harness. This script
lists them: for every exact case of benchmarks/data/published_runs.yaml (no gaps), its published layout at the
micro-batch the planner predicts it with (and at micro-batch 1 too when the source leaves it unstated, the other end
of the spread), each weight GEMM of `planner.model.flops.layer_gemms` on one rank (dense and MoE layers, the LM head)
in the three passes a training step runs, each as C[m,n] = A[m,k] @ B[k,n] with the operands stored as nn.Linear
and Megatron's linear layers store them (weight W[out, in], activations X[tokens, in], gradients dY[tokens, out]):

    fwd    Y = X @ W^T      (tokens, in, out)    B is the transposed view of W
    dgrad  dX = dY @ W      (tokens, out, in)    inner dimension: the layer's output width
    wgrad  dW = dY^T @ X    (out, tokens, in)    A is the transposed view of dY; inner dimension: the tokens

Routed experts are listed per expert as the cost model times them (compute.layer_time_s): rows = tokens x ep x
top_k / num_experts on each of num_experts / ep local experts (`count`). Each entry names the cases and GEMMs that
use it; the list is ordered by how many cases use a shape, so a harness cut short by its time limit has timed the
most shared ones. benchmarks/measure_kernels.py --shapes times the file on a GPU. Only 16-bit cases are listed: fp8
GEMMs need scaled-matmul layouts of their own.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from published_cases import PublishedRun, build_cluster, build_model, load_runs
from published_runs import _pins, workload

from planner.api import search_result
from planner.model.flops import layer_gemms, logits_gemm

OUT = Path(__file__).parent / "data" / "training_gemm_shapes.json"
SIXTEEN_BIT = ("bf16", "fp16")


PASSES = ("fwd", "dgrad", "wgrad")


def passes(name: str, tokens: int, d_in: int, d_out: int) -> list[tuple[str, str, int, int, int]]:
    """(name, pass, m, k, n) of the three GEMMs a linear layer of `tokens` x `d_in` -> `d_out` runs per step."""
    return [(name, "fwd", tokens, d_in, d_out), (name, "dgrad", tokens, d_out, d_in), (name, "wgrad", d_out, tokens, d_in)]


def case_micro_batches(case: PublishedRun) -> list[int] | None:
    """Micro-batches to list for a case: the one the planner predicts it at, and 1 when the source leaves it open.
    A published layout beyond meshplan's memory model is predicted at its least-memory setting, as
    published_runs.py does (the run ran); None when even that does not exist."""
    model, cluster, work = build_model(case), build_cluster(case), workload(case)
    _, found = search_result(model, cluster, work, top=1, framework="any", **_pins(case))
    if len(found.step_time_s):
        best = int(found.table["mb"][0])
    elif found.best_infeasible is not None:
        best = int(found.best_infeasible[0]["mb"])
    else:
        return None
    stated = case.batch.micro_batch
    return [best] if stated is not None or best == 1 else [best, 1]


def case_gemms(case: PublishedRun, micro_batch: int) -> list[tuple[str, str, int, int, int, int]]:
    """(name, pass, m, k, n, count) of every weight GEMM one rank runs per layer kind and micro-batch."""
    spec = build_model(case)
    par = case.parallelism
    tokens = micro_batch * case.model.seq_len // par.cp
    kinds = sorted({spec.is_moe_layer(i) for i in range(spec.num_layers)})
    out: list[tuple[str, str, int, int, int, int]] = []
    for is_moe in kinds:
        for name, m, k, n in layer_gemms(spec, is_moe, tokens, par.tp):
            count = 1
            if name.startswith("moe_expert"):
                moe = spec.moe
                m = tokens * par.ep * moe.top_k // moe.num_experts
                count = moe.num_experts // par.ep
            if m > 0:
                out += [(*g, count) for g in passes(name, m, k, n)]
    out += [(*g, 1) for g in passes(*logits_gemm(spec, tokens, par.tp))]
    return out


def shapes(cases: list[PublishedRun]) -> tuple[list[dict[str, Any]], list[str]]:
    """The deduplicated shape list (most shared first) and the ids of exact cases left out (with why)."""
    users: dict[tuple[str, int, int, int, int], dict[str, set[str]]] = defaultdict(lambda: {"cases": set(), "gemms": set()})
    skipped = []
    for case in cases:
        if case.gaps:
            continue
        if (case.precision or "bf16") not in SIXTEEN_BIT:
            skipped.append(f"{case.id} ({case.precision}: not a 16-bit run)")
            continue
        micro_batches = case_micro_batches(case)
        if micro_batches is None:
            skipped.append(f"{case.id} (no layout: see the case's row in published_runs.py)")
            continue
        for mb in micro_batches:
            for name, step, m, k, n, count in case_gemms(case, mb):
                entry = users[(step, m, k, n, count)]
                entry["cases"].add(case.id)
                entry["gemms"].add(name)
    rows = [{"pass": step, "m": m, "k": k, "n": n, "count": count, "flops": 2.0 * m * k * n,
             "gemms": sorted(u["gemms"]), "cases": sorted(u["cases"])}
            for (step, m, k, n, count), u in users.items()]
    rows.sort(key=lambda r: (-len(r["cases"]), -r["flops"]))
    return rows, skipped


def write(path: Path, rows: list[dict[str, Any]], skipped: list[str]) -> None:
    """The shape list as JSON, one shape per line (diffs stay readable when the validation set changes)."""
    lines = ",\n".join("  " + json.dumps(r) for r in rows)
    head = {"generated_by": "benchmarks/training_gemm_shapes.py", "cases_left_out": skipped}
    path.write_text(json.dumps(head)[:-1] + ', "shapes": [\n' + lines + "\n]}\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT, help="JSON to write (default: benchmarks/data/training_gemm_shapes.json)")
    args = ap.parse_args(argv)
    rows, skipped = shapes(load_runs().cases)
    write(args.out, rows, skipped)
    cases = {c for r in rows for c in r["cases"]}
    print(f"{len(rows)} GEMM shapes from {len(cases)} exact 16-bit cases -> {args.out}")
    print(f"  total FLOP to time each once: {sum(r['flops'] * r['count'] for r in rows):.3g}")
    for s in skipped:
        print(f"  left out: {s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
