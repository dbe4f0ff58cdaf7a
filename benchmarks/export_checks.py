"""Load meshplan's exports with the real frameworks: a fixed set of layouts and the done-when plans.

    bash benchmarks/framework_env.sh /work/toolenv-312            # once: TorchTitan, megatron-core, DeepSpeed
    .venv/bin/python benchmarks/export_checks.py --python /work/toolenv-312/bin/python \\
        --megatron-lm /work/toolenv-312/src/Megatron-LM [--only fixed|done] [--nodes 1,2,4,8,16,32,64] [--csv FILE]

1. Fixed set (Llama 3 8B on 4 DGX H100 nodes, Mixtral 8x7B for EP): FSDP, HSDP, TP+SP, PP with each schedule,
   CP, EP and the DP-outer mesh order, each evaluated for every framework. A layout the framework cannot build
   is refused with the rule it breaks (that is the expected answer, and it is reported); the others are
   exported and loaded by the framework (`meshplan export --check`). Then the plans meshplan's own search
   makes for its executor are exported to each framework: each either loads or is refused with a rule.
2. Done-when: `meshplan plan --framework X` for Llama 3 8B/70B/405B and Mixtral 8x7B on 1-64 DGX H100 nodes
   (4 Mi tokens of 8192 per step), exported to X and loaded by X.
meshplan's own executor is checked by `meshplan run` when it starts; its plans are exported to torchrun
here and parsed by bash. Prints framework, case, layout and pass / fail / refused per case and a summary;
exits 1 if any export that passed the rules fails in the real framework.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

import hardware_profiles
import planner
from planner.errors import UserError
from planner.export import export
from planner.export.check import CHECKERS, CHECKS_DIR
from planner.frameworks import framework
from planner.layout import Layout
from planner.layout.table import SEARCHED_ORDERS
from planner.model import load_model
from planner.workload import Workload

FRAMEWORKS = ("torchtitan", "megatron", "deepspeed")
DP_OUTER = SEARCHED_ORDERS[1]  # DP outermost
SIZES = (1, 2, 4, 8, 16, 32, 64)
MODELS = ("llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b")


def fixed_layouts() -> list[tuple[str, str, Layout]]:
    """(case, model, layout) on 32 GPUs, 64 sequences of 4096."""
    fsdp = dict(zero=3, dp_shard=32)
    return [
        ("FSDP", "llama3-8b", Layout(dp=32, num_microbatches=2, **fsdp)),
        ("HSDP", "llama3-8b", Layout(dp=32, num_microbatches=2, zero=3, dp_shard=8)),
        ("DDP", "llama3-8b", Layout(dp=32, num_microbatches=2)),
        ("ZeRO-1 TP+SP", "llama3-8b", Layout(dp=8, tp=4, num_microbatches=8, zero=1, dp_shard=8, sequence_parallel=True)),
        ("ZeRO-2 TP+SP", "llama3-8b", Layout(dp=8, tp=4, num_microbatches=8, zero=2, dp_shard=8, sequence_parallel=True)),
        ("FSDP TP+SP full AC", "llama3-8b", Layout(dp=8, tp=4, num_microbatches=8, zero=3, dp_shard=8,
                                                    sequence_parallel=True, recompute="full")),
        ("PP gpipe", "llama3-8b", Layout(dp=8, pp=4, num_microbatches=2, schedule="gpipe", zero=1, dp_shard=8)),
        ("PP 1f1b ZeRO-1", "llama3-8b", Layout(dp=8, pp=4, num_microbatches=8, zero=1, dp_shard=8)),
        ("PP 1f1b FSDP", "llama3-8b", Layout(dp=8, pp=4, num_microbatches=8, zero=3, dp_shard=8)),
        ("PP interleaved", "llama3-8b", Layout(dp=4, tp=2, pp=4, num_microbatches=16, schedule="interleaved",
                                               virtual_stages=2, zero=1, dp_shard=4, sequence_parallel=True)),
        ("PP interleaved FSDP", "llama3-8b", Layout(dp=4, tp=2, pp=4, num_microbatches=16, schedule="interleaved",
                                                    virtual_stages=2, zero=3, dp_shard=4, sequence_parallel=True)),
        ("PP zb-h1", "llama3-8b", Layout(dp=8, pp=4, num_microbatches=8, schedule="zb-h1", zero=3, dp_shard=8)),
        ("PP selective", "llama3-8b", Layout(dp=4, tp=2, pp=4, num_microbatches=16, zero=1, dp_shard=4,
                                             sequence_parallel=True, recompute="selective")),
        ("DP-outer PP", "llama3-8b", Layout(dp=4, tp=2, pp=4, num_microbatches=16, zero=1, dp_shard=4,
                                            sequence_parallel=True, mesh_axes=DP_OUTER)),
        ("CP FSDP", "llama3-8b", Layout(dp=8, tp=2, cp=2, num_microbatches=8, zero=3, dp_shard=8, sequence_parallel=True)),
        ("CP ZeRO-1", "llama3-8b", Layout(dp=8, tp=2, cp=2, num_microbatches=8, zero=1, dp_shard=8, sequence_parallel=True)),
        ("CP DP-outer PP", "llama3-8b", Layout(dp=4, tp=2, pp=2, cp=2, num_microbatches=16, zero=1, dp_shard=4,
                                               sequence_parallel=True, mesh_axes=DP_OUTER)),
        ("EP FSDP", "mixtral-8x7b", Layout(dp=32, ep=8, num_microbatches=2, **fsdp)),
        ("EP TP+SP ZeRO-1", "mixtral-8x7b", Layout(dp=8, tp=4, ep=2, num_microbatches=8, zero=1, dp_shard=8,
                                                   sequence_parallel=True)),
        ("EP HSDP", "mixtral-8x7b", Layout(dp=32, ep=8, num_microbatches=2, zero=3, dp_shard=4)),
        ("EP PP", "mixtral-8x7b", Layout(dp=8, pp=4, ep=8, num_microbatches=8, zero=1, dp_shard=8)),
    ]


def build_cases(only: str | None, sizes: tuple[int, ...]) -> list[dict]:
    """Every case: exported files for the real tools, and the refusals (with their rule) that need no tool."""
    cases: list[dict] = []
    c32 = hardware_profiles.cluster("dgx-h100", nodes=4)
    w = Workload(global_batch=64, seq_len=4096)
    if only in (None, "fixed"):
        for name, model_name, layout in fixed_layouts():
            model = load_model(model_name)
            for fw in FRAMEWORKS:
                case = {"set": "fixed", "framework": fw, "case": f"{name} ({model_name})", "layout": layout.describe()}
                breaches = framework(fw).breaches(layout, model, w)
                if breaches:
                    cases.append({**case, "result": "refused", "message": "; ".join(r.name for r, _ in breaches)})
                    continue
                plan = planner.evaluate(model, c32, w, layout, allow_oom=True, framework=fw)
                cases.append({**case, "plan": plan, "target": fw})
        for model_name in ("llama3-8b", "mixtral-8x7b"):  # meshplan's own plans, exported to each framework
            for plan in planner.search(load_model(model_name), c32, w, top=3):
                for fw in FRAMEWORKS:
                    case = {"set": "meshplan->X", "framework": fw, "case": f"meshplan plan ({model_name})",
                            "layout": plan.layout.describe()}
                    try:
                        cases.append({**case, "plan": export(plan, fw).plan, "target": fw})
                    except UserError as exc:
                        rules = [part.split(":")[0] for part in str(exc).split("[")[1:]]
                        cases.append({**case, "result": "refused", "message": "; ".join(rules)})
    if only in (None, "done"):
        workload = Workload(global_batch_tokens=4_194_304, seq_len=8192)
        for fw in (*FRAMEWORKS, "meshplan"):
            for model_name in MODELS:
                model = load_model(model_name)
                for nodes in sizes:
                    case = {"set": "done-when", "framework": fw, "case": f"{model_name} on {nodes} nodes"}
                    try:
                        plan = planner.search(model, hardware_profiles.cluster("dgx-h100", nodes=nodes), workload,
                                              framework=fw)[0]
                    except UserError as exc:
                        cases.append({**case, "layout": "-", "result": "no plan", "message": str(exc)[:160]})
                        continue
                    target = fw if fw != "meshplan" else "torchrun"
                    cases.append({**case, "layout": plan.layout.describe(), "plan": plan, "target": target})
    return cases


def run_checks(cases: list[dict], python: str, megatron_lm: str | None, folder: Path) -> None:
    """Export every planned case, check them in one process per framework (the batch mode of the checkers)."""
    batches: dict[str, list[dict]] = {}
    for i, case in enumerate(cases):
        if "plan" not in case:
            continue
        result = export(case["plan"], case["target"], plan_path="plan.json")
        path = folder / f"{i:04d}-{case['target']}.{'json' if case['target'] == 'deepspeed' else 'sh'}"
        path.write_text(result.text)
        if case["target"] == "torchrun":
            bash = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
            case.update(result="pass" if bash.returncode == 0 else "FAIL",
                        message="meshplan run script parses (meshplan run checks the plan when it starts)"
                        if bash.returncode == 0 else bash.stderr.strip())
            continue
        lay = case["plan"].layout
        batches.setdefault(case["target"], []).append(
            {"path": str(path), "world_size": case["plan"].world_size, "tp": lay.tp, "pp": lay.pp, "index": i})
    for target, entries in batches.items():
        jsonl = folder / f"{target}.jsonl"
        jsonl.write_text("".join(json.dumps(e) + "\n" for e in entries))
        cmd = [python, str(CHECKS_DIR / CHECKERS[target][0]), "--batch", str(jsonl)]
        if target == "megatron" and megatron_lm:
            cmd += ["--megatron-lm", megatron_lm]
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=folder)
        answers = {a["path"]: a for a in (json.loads(line) for line in done.stdout.splitlines() if line.startswith("{"))}
        for e in entries:
            a = answers.get(e["path"], {"ok": False, "message": f"no answer (checker exit {done.returncode})"})
            cases[e["index"]].update(result="pass" if a["ok"] else "FAIL", message=a["message"])
        print(f"{target}: {len(entries)} exports checked in {time.perf_counter() - start:.0f} s", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="Interpreter of the environment with the frameworks.")
    parser.add_argument("--megatron-lm", help="Megatron-LM core_v0.19.0 checkout (its argument parser).")
    parser.add_argument("--only", choices=("fixed", "done"))
    parser.add_argument("--nodes", default=",".join(map(str, SIZES)))
    parser.add_argument("--csv")
    a = parser.parse_args()
    sizes = tuple(int(n) for n in a.nodes.split(","))
    cases = build_cases(a.only, sizes)
    with tempfile.TemporaryDirectory(prefix="meshplan-export-checks-") as folder:
        run_checks(cases, a.python, a.megatron_lm, Path(folder))
    df = pd.DataFrame([{k: c.get(k, "") for k in ("set", "framework", "case", "layout", "result", "message")}
                       for c in cases])
    with pd.option_context("display.max_rows", None, "display.max_colwidth", 110, "display.width", 250):
        print(df.to_string(index=False))
    print()
    print(df.groupby(["set", "framework", "result"]).size().to_string())
    if a.csv:
        df.to_csv(a.csv, index=False)
    return 1 if (df["result"] == "FAIL").any() else 0


if __name__ == "__main__":
    sys.exit(main())
