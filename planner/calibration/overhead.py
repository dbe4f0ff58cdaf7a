"""Fit the framework overhead (planner.cost.overhead) to the reference layer's measured times.

`executor.calibrate` times one decoder layer of the executor's reference model forward and backward per
micro-batch: at the `tiny` preset's widths and 4x wider (plain), and at tiny widths tensor-parallel and
FSDP-sharded over a pair of ranks, each at two token counts. This module asks the cost model what each should cost on the freshly
measured device and fabric (its compute term and, under TP, its all-reduces, with the profile that has no
overhead yet) and fits what is left, per direction, with non-negative least squares:

    plain:  measured - model = fixed + per_element * tokens * hidden
    TP:     measured - model - per_element * tokens * hidden / tp = fixed + tp_fixed   (mean over points)
    FSDP:   measured - model - per_element * tokens * hidden = fixed + dp_fixed         (mean over points)

(the FSDP layer's model includes its weight all-gather and gradient reduce-scatter), and the optimizer's
seconds per parameter is its measured step time over the parameters it updated. The `tiny-moe` layer
measured expert-parallel over a pair is not fitted: it is the check of the EP cost (its compute with
num_experts/ep local experts, the EP all-to-alls on the measured all_to_all fit and the plain layer
overhead) against an executed layer, reported next to its measurement.
So the cost model with the overhead reproduces the reference layers' measurements up to the fit's residual,
which the report lists point by point.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost import comm, compute
from planner.layout import Workload
from planner.model import ModelSpec


@dataclass(frozen=True)
class OverheadFit:
    layer_forward_s: float
    layer_backward_s: float
    tp_layer_forward_s: float
    tp_layer_backward_s: float
    report: list[dict]
    forward_s_per_element: float = 0.0
    backward_s_per_element: float = 0.0
    dp_layer_forward_s: float = 0.0
    dp_layer_backward_s: float = 0.0
    optimizer_s_per_param: float = 0.0
    pp_transfer_s: float = 0.0

    def layer_s(self, tokens: int, hidden: int, tp: int, dp: int = 1) -> tuple[float, float]:
        """(forward, backward) overhead of one layer, the formula of planner.cost.overhead."""
        el = tokens * hidden / tp
        f = self.layer_forward_s + self.forward_s_per_element * el
        b = self.layer_backward_s + self.backward_s_per_element * el
        if tp > 1:
            f, b = f + self.tp_layer_forward_s, b + self.tp_layer_backward_s
        if dp > 1:
            f, b = f + self.dp_layer_forward_s, b + self.dp_layer_backward_s
        return f, b

    def profile_data(self) -> dict:
        return {"layer_forward_s": _sig(self.layer_forward_s), "layer_backward_s": _sig(self.layer_backward_s),
                "forward_s_per_element": _sig(self.forward_s_per_element),
                "backward_s_per_element": _sig(self.backward_s_per_element),
                "tp_layer_forward_s": _sig(self.tp_layer_forward_s), "tp_layer_backward_s": _sig(self.tp_layer_backward_s),
                "dp_layer_forward_s": _sig(self.dp_layer_forward_s), "dp_layer_backward_s": _sig(self.dp_layer_backward_s),
                "pp_transfer_s": _sig(self.pp_transfer_s), "optimizer_s_per_param": _sig(self.optimizer_s_per_param)}


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


def model_layer_s(cluster, spec: ModelSpec, tokens: int, tp: int, world: int, dp: int = 1,
                  ep: int = 1) -> tuple[float, float]:
    """The cost model's (forward, backward) seconds of one layer of `spec` for `tokens` at TP degree `tp` (or
    as a ZeRO-1 data-parallel unit over `dp` ranks: one all-gather of its weights forward, one reduce-scatter
    of its gradients backward; or with its experts over `ep` ranks: the EP all-to-alls), the groups being
    consecutive ranks of `world` as executor.calibrate lays them out."""
    from planner.api import make_context

    dtype = "fp32" if any(g.vendor == "cpu" for g in cluster.gpus.values()) else "bf16"
    ctx = make_context(spec, cluster, Workload(global_batch=1, seq_len=spec.max_seq_len, dtype=dtype))
    one = np.array([1])
    t = compute.layer_time_s(ctx, ctx.layer_types[0], np.array([tokens]), np.array([tp]), one, np.array([ep]),
                             np.array([False]))
    fwd, bwd = float(t.fwd_s[0]), float(t.bwd_s[0])
    if ep > 1:
        a, b, _ = comm.AxisBandwidth(ctx.topology).coeffs("all_to_all", (world // ep, ep), 1)
        a2a, cols = (np.array([a]), np.array([b])), (np.array([tokens]), np.array([ep]))
        fwd += float(comm.ep_layer_fwd_s(ctx, a2a, *cols)[0])
        bwd += float(comm.ep_layer_bwd_s(ctx, a2a, *cols)[0])
    if tp > 1:
        a, b, _ = comm.AxisBandwidth(ctx.topology).coeffs("all_reduce", (world // tp, tp), 1)
        tp_s = float(comm.tp_layer_fwd_s(ctx, (np.array([a]), np.array([b])), np.array([tokens]))[0])
        fwd, bwd = fwd + tp_s, bwd + tp_s  # the model's TP traffic is the same in both directions
    if dp > 1:
        bw, params = comm.AxisBandwidth(ctx.topology), float(spec.layer_params(0))
        a, b, _ = bw.coeffs("all_gather", (world // dp, dp), 1)
        fwd += a + b * params * ctx.weight_bytes
        a, b, _ = bw.coeffs("reduce_scatter", (world // dp, dp), 1)
        bwd += a + b * params * ctx.grad_bytes
    return fwd, bwd


def _nonneg_line(x: list[float], r: list[float]) -> tuple[float, float]:
    """(c, e) >= 0 minimising sum((c + e x - r)^2): least squares, clamping a negative one to 0."""
    x_arr, r_arr = np.asarray(x, dtype=float), np.asarray(r, dtype=float)
    if len(x_arr) >= 2 and np.ptp(x_arr) > 0:
        e, c = np.polyfit(x_arr, r_arr, 1)
    else:
        e, c = 0.0, float(np.mean(r_arr))
    if e < 0:
        return max(float(np.mean(r_arr)), 0.0), 0.0
    if c < 0:
        return 0.0, max(float(x_arr @ r_arr / (x_arr @ x_arr)), 0.0)
    return float(c), float(e)


def fit_overhead(cluster, layers: list[dict], world: int, optimizer: dict | None = None) -> OverheadFit:
    """Per-layer overheads from `executor.calibrate`'s layer measurements on `cluster` (no overhead in it)."""
    rows = []  # (tp, tokens, hidden, residual fwd, residual bwd, dp)
    report = []
    checks = []  # expert-parallel layers: reported against the model, not fitted
    for layer in layers:
        spec = ModelSpec.model_validate(layer["model"])
        tp, dp, ep = int(layer["tp"]), int(layer.get("dp", 1)), int(layer.get("ep", 1))
        if ep > 1:
            checks += [(spec, ep, p) for p in layer["points"]]
            continue
        for p in layer["points"]:
            mf, mb = model_layer_s(cluster, spec, int(p["tokens"]), tp, world, dp)
            rows.append((tp, int(p["tokens"]), spec.hidden_size, p["forward_s"] - mf, p["backward_s"] - mb, dp))
            report.append({"tp": tp, "dp": dp, "tokens": int(p["tokens"]), "hidden": spec.hidden_size,
                           "measured_forward_s": p["forward_s"], "model_forward_s": mf,
                           "measured_backward_s": p["backward_s"], "model_backward_s": mb})
    plain = [r for r in rows if r[0] == 1 and r[5] == 1]
    if not plain:
        raise ValueError("no plain (tp=1) layer measurement to fit the framework overhead to")
    elems = [r[1] * r[2] for r in plain]
    cf, ef = _nonneg_line(elems, [r[3] for r in plain])
    cb, eb = _nonneg_line(elems, [r[4] for r in plain])
    def extra(sel: list[tuple]) -> tuple[float, float]:
        """Mean residual of `sel` beyond the plain layer's overhead, per direction (0 when unmeasured)."""
        if not sel:
            return 0.0, 0.0
        f = float(np.mean([r[3] - ef * r[1] * r[2] / r[0] for r in sel])) - cf
        b = float(np.mean([r[4] - eb * r[1] * r[2] / r[0] for r in sel])) - cb
        return max(f, 0.0), max(b, 0.0)

    tf, tb = extra([r for r in rows if r[0] > 1])
    df, db = extra([r for r in rows if r[5] > 1])
    per_param = float(optimizer["time_s"]) / float(optimizer["params"]) if optimizer else 0.0
    fit = OverheadFit(cf, cb, tf, tb, report, ef, eb, df, db, per_param)
    for item in report:
        of, ob = fit.layer_s(item["tokens"], item["hidden"], item["tp"], item["dp"])
        item["fitted_forward_s"], item["fitted_backward_s"] = item["model_forward_s"] + of, item["model_backward_s"] + ob
    for spec, ep, p in checks:
        mf, mb = model_layer_s(cluster, spec, int(p["tokens"]), 1, world, ep=ep)
        of, ob = fit.layer_s(int(p["tokens"]), spec.hidden_size, 1)
        report.append({"tp": 1, "dp": 1, "ep": ep, "model": spec.name, "tokens": int(p["tokens"]),
                       "hidden": spec.hidden_size, "measured_forward_s": p["forward_s"], "model_forward_s": mf,
                       "measured_backward_s": p["backward_s"], "model_backward_s": mb,
                       "fitted_forward_s": mf + of, "fitted_backward_s": mb + ob})
    return fit


def fit_pipeline(cluster, pipeline: dict | None) -> tuple[float, dict]:
    """Pipeline machinery per transfer: (measured 2-stage 1F1B step - the cost model's step without the
    optimizer) / the 2 (m + p - 1) transfers the model puts on the critical path, on `cluster` (2 devices,
    its layer overheads already fitted), clamped at 0. Returns it and a report."""
    if not pipeline:
        return 0.0, {}
    from planner.api import evaluate
    from planner.layout import Layout

    spec = ModelSpec.model_validate(pipeline["model"])
    m = int(pipeline["microbatches"])
    dtype = "fp32" if any(g.vendor == "cpu" for g in cluster.gpus.values()) else "bf16"
    plan = evaluate(spec, cluster, Workload(global_batch=m, seq_len=spec.max_seq_len, dtype=dtype),
                    Layout(pp=2, micro_batch=1, num_microbatches=m, schedule="1f1b"), allow_oom=True)
    model_s = plan.prediction.step_time_s - plan.prediction.breakdown.optimizer_s
    transfers = 2 * (m + 2 - 1)
    per = max((float(pipeline["time_s"]) - model_s) / transfers, 0.0)
    return per, {"pipeline_measured_s": float(pipeline["time_s"]), "pipeline_model_s": model_s, "transfers": transfers}
