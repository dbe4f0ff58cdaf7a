"""Close the loop on this machine: calibrate, predict several layouts' step times, run them, compare.

    .venv/bin/python benchmarks/predicted_vs_measured.py            # full: 3 rounds, about 6 minutes on 2 cores
    .venv/bin/python benchmarks/predicted_vs_measured.py --quick    # CI: one quick round, about a minute
    .venv/bin/python benchmarks/predicted_vs_measured.py --cluster prof.yaml   # reuse one calibrated profile
    .venv/bin/python benchmarks/predicted_vs_measured.py --quick --cluster local-cpu --layouts dp4,tp2xpp2-1f1b
                                                        # the harness on two layouts (what the test suite runs)

The quick round over 6 layouts took about 3 minutes of the 2-core CI machine's test suite; it lives here now,
and tests/distributed/test_predicted_vs_measured.py runs the harness on two layouts only.

Each round:
1. `meshplan calibrate` (planner.calibration.calibrate) with 4 processes -> OUT/calibrated-R.yaml;
2. for each layout below on 4 gloo ranks, `planner.evaluate` on that profile gives the predicted step time
   (and the plan the executor runs);
3. one torchrun job (benchmarks/layout_steps.py) builds every plan with the executor and times its steps,
   the layouts taking turns after warm-up steps; the round's measured step time is the median.
Rounds pair a calibration with the measurement right after it: on a shared host the load from other work
drifts over minutes, and a prediction should be judged against a run under the load it was calibrated in.
The table gives per layout the median over rounds of the predicted and measured times and of the relative
error (predicted / measured - 1); then the mean absolute error, the Spearman rank correlation (scipy) of
predicted against measured, and the planner's pick (least predicted) against the measured fastest.

The model is `small`: the `tiny` preset's shape (4 layers, 8 heads / 4 KV heads, SwiGLU, RoPE, sequence 64)
4x wider (hidden 256, MLP 768, vocabulary 2048), so that GEMMs take a visible share of a CPU step next to
the framework overhead and gloo communication; `--model tiny` runs the preset itself.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

import hardware_profiles as hp
from planner import evaluate
from planner.layout import Layout, Workload
from planner.model import ModelSpec, preset

HERE = Path(__file__).resolve().parent
RANKS = 4
GLOBAL_BATCH, SEQ_LEN = 8, 64


def small_model() -> ModelSpec:
    data = preset("tiny").model_dump(exclude={"head_dim"})
    data.update(name="small", hidden_size=256, ffn_hidden_size=768, vocab_size=2048,
                source="meshplan benchmark model: the tiny preset 4x wider (compute visible on CPU)")
    return ModelSpec.model_validate(data)


def layouts(quick: bool, names: list[str] | None = None) -> dict[str, Layout]:
    """Layouts of 4 ranks over a global batch of 8 sequences (dp * micro_batch * num_microbatches = 8); `names`
    picks some of them by name."""
    every = {
        "dp4": Layout(dp=4, micro_batch=2, num_microbatches=1, zero=1),
        "tp4": Layout(tp=4, micro_batch=8, num_microbatches=1),
        "pp4-1f1b": Layout(pp=4, micro_batch=1, num_microbatches=8, schedule="1f1b"),
        "dp2xtp2": Layout(dp=2, tp=2, micro_batch=4, num_microbatches=1, zero=1),
        "dp2xpp2-1f1b": Layout(dp=2, pp=2, micro_batch=1, num_microbatches=4, schedule="1f1b", zero=1),
        "tp2xpp2-1f1b": Layout(tp=2, pp=2, micro_batch=2, num_microbatches=4, schedule="1f1b"),
        "dp4-mb1x2": Layout(dp=4, micro_batch=1, num_microbatches=2, zero=1),
        "dp2xtp2-full-recompute": Layout(dp=2, tp=2, micro_batch=4, num_microbatches=1, zero=1, recompute="full"),
    }
    if names:
        unknown = [n for n in names if n not in every]
        if unknown:
            sys.exit(f"--layouts: unknown {', '.join(unknown)}; choose from {', '.join(every)}")
        return {n: every[n] for n in names}
    return dict(list(every.items())[:6]) if quick else every


def predict(model: ModelSpec, cluster_path: str, lays: dict[str, Layout], out: Path) -> dict[str, tuple[float, Path]]:
    """Predicted step time and the written plan file of every layout."""
    cluster = hp.cluster(cluster_path, gpus=RANKS)
    workload = Workload(global_batch=GLOBAL_BATCH, seq_len=SEQ_LEN, dtype="fp32")
    result = {}
    for name, lay in lays.items():
        plan = evaluate(model, cluster, workload, lay, allow_oom=True)
        path = out / f"{name}.plan.json"
        path.write_text(plan.to_json(), encoding="utf-8")
        result[name] = (plan.prediction.step_time_s, path)
    return result


def measure(plans: dict[str, Path], out: Path, quick: bool) -> dict[str, list[float]]:
    """Timed steps of every plan: one torchrun job, layouts taking turns (benchmarks/layout_steps.py)."""
    warmup, rounds, steps = (2, 2, 3) if quick else (3, 2, 6)
    times = out / "step_times.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(RANKS),
           "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", "--local-addr", "127.0.0.1",
           str(HERE / "layout_steps.py"), "--out", str(times), "--warmup", str(warmup), "--rounds", str(rounds),
           "--steps", str(steps), *map(str, plans.values())]
    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0 or not times.is_file():
        sys.exit(f"measuring failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    raw = json.loads(times.read_text(encoding="utf-8"))
    by_path = {str(p): name for name, p in plans.items()}
    return {by_path[k]: v for k, v in raw.items()}


def load_average() -> float:
    """The host's 1-minute load average (how busy the shared machine was), from /proc/loadavg."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def one_round(r: int, args, model: ModelSpec, lays: dict[str, Layout]) -> dict:
    """Calibrate (unless --cluster), predict, measure: one round's predictions and step times."""
    out = args.out / f"round-{r}"
    out.mkdir(parents=True, exist_ok=True)
    cluster, t0, load0 = args.cluster, time.time(), load_average()
    if cluster is None:
        from planner.calibration import calibrate

        cluster = str(out / "calibrated.yaml")
        calibrate(Path(cluster), nproc=RANKS, quick=args.quick, force=True)
    pred = predict(model, cluster, lays, out)
    t1, load1 = time.time(), load_average()
    measured = measure({k: v[1] for k, v in pred.items()}, out, args.quick)
    print(f"round {r}: calibrated in {t1 - t0:.0f} s (load {load0:.1f}), measured in {time.time() - t1:.0f} s "
          f"(load {load1:.1f} -> {load_average():.1f})", file=sys.stderr)
    return {"cluster": cluster, "predicted_s": {k: v[0] for k, v in pred.items()}, "step_times_s": measured,
            "load_average": [load0, load1, load_average()]}


def compare(rounds: list[dict]) -> tuple[pd.DataFrame, dict]:
    """The table and the summary statistics (see the module docstring)."""
    rows = []
    for name in rounds[0]["predicted_s"]:
        preds = [rd["predicted_s"][name] for rd in rounds]
        meds = [statistics.median(rd["step_times_s"][name]) for rd in rounds]
        rows.append({"layout": name, "predicted_ms": statistics.median(preds) * 1e3,
                     "measured_ms": statistics.median(meds) * 1e3,
                     "error": statistics.median(p / m - 1.0 for p, m in zip(preds, meds, strict=True)),
                     "steps": sum(len(rd["step_times_s"][name]) for rd in rounds)})
    df = pd.DataFrame(rows).set_index("layout")
    rho = float(spearmanr(df["predicted_ms"], df["measured_ms"]).statistic)
    pick, best = df["predicted_ms"].idxmin(), df["measured_ms"].idxmin()
    slower = float(df.loc[pick, "measured_ms"] / df.loc[best, "measured_ms"] - 1.0)
    summary = {"mean_abs_error": float(np.mean(np.abs(df["error"]))), "spearman": rho, "pick": pick,
               "measured_best": best, "pick_slower_than_best": slower, "pick_within_10pct": slower <= 0.10}
    return df, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one round: quick calibration, 6 layouts, fewer steps (CI)")
    ap.add_argument("--rounds", type=int, help="calibrate-predict-measure rounds (default 3, --quick 1)")
    ap.add_argument("--cluster", help="use this calibrated profile in every round instead of calibrating")
    ap.add_argument("--model", choices=["small", "tiny"], default="small")
    ap.add_argument("--layouts", help="comma-separated layout names to run (default: 6 with --quick, else all)")
    ap.add_argument("--out", type=Path, default=Path("runs") / f"predicted-vs-measured-{time.strftime('%Y%m%d-%H%M%S')}")
    ap.add_argument("--json", type=Path, help="write the table, summary and every step time as one JSON document")
    args = ap.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    model = small_model() if args.model == "small" else preset("tiny")
    lays = layouts(args.quick, args.layouts.split(",") if args.layouts else None)
    rounds = [one_round(r, args, model, lays) for r in range(args.rounds or (1 if args.quick else 3))]
    df, summary = compare(rounds)
    summary.update(model=model.name, ranks=RANKS, global_batch=GLOBAL_BATCH, seq_len=SEQ_LEN, quick=args.quick,
                   rounds=len(rounds), wall_s=time.time() - t0)
    with pd.option_context("display.float_format", "{:,.2f}".format, "display.width", 120):
        print(df.assign(error=df["error"].map("{:+.1%}".format)).to_string())
    print(f"mean absolute error {summary['mean_abs_error']:.1%}   Spearman {summary['spearman']:+.3f}   "
          f"planner's pick {summary['pick']} is {summary['pick_slower_than_best']:+.1%} vs measured best "
          f"{summary['measured_best']} ({'within' if summary['pick_within_10pct'] else 'NOT within'} 10 %)")
    if args.json is not None:
        doc = {"table": df.reset_index().to_dict(orient="records"), "summary": summary, "rounds": rounds,
               "step_times_s": {name: [t for rd in rounds for t in rd["step_times_s"][name]] for name in lays}}
        args.json.write_text(json.dumps(doc, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
