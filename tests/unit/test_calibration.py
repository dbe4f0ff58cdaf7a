"""Calibration without torch: the fits recover known parameters exactly from synthetic measurements, the
profile set they write loads through hardware_profiles with every number sourced, the planner plans on it,
and the cost terms calibration feeds (framework overhead, measured collectives, host sharing, per-unit DP
latency) give hand-computed values."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

import hardware_profiles as hp
from planner import search
from planner.calibration import ProfilePaths, build_profiles, write_profiles
from planner.calibration.fit import fit_affine, fit_collective, fit_gemm
from planner.calibration.overhead import fit_overhead, model_layer_s
from planner.cli.app import app
from planner.cli.main import _register_commands
from planner.cost import comm, compute, host_share
from planner.errors import UserError
from planner.layout import Workload
from planner.model import ModelSpec, preset
from planner.topology.estimate import bytes_factor, latency_steps

_register_commands()

RATE = {"fp32": 8.0e10, "bf16": 2.4e11}  # FLOP/s plateaus of the synthetic device
HALF = {"fp32": 3.0e5, "bf16": 2.0e6}  # FLOP
COPY_BPS = 2.0e10
COLL = {  # (kind, n) -> (latency_s, busbw)
    ("all_reduce", 2): (3e-4, 1.5e9), ("all_reduce", 4): (2e-3, 1.0e9),
    ("all_gather", 2): (2e-4, 1.2e9), ("all_gather", 4): (1.5e-3, 0.8e9),
    ("reduce_scatter", 2): (9e-4, 0.6e9), ("reduce_scatter", 4): (4e-3, 0.4e9),
    ("all_to_all", 2): (1e-4, 2.0e9), ("all_to_all", 4): (8e-4, 1.1e9),
    ("p2p", 2): (1.5e-4, 2.5e9),
}
OVERHEAD = {"layer_forward_s": 4e-4, "layer_backward_s": 9e-4, "forward_s_per_element": 2e-8,
            "backward_s_per_element": 3e-8, "tp_layer_forward_s": 3e-3, "tp_layer_backward_s": 6e-3,
            "dp_layer_forward_s": 5e-4, "dp_layer_backward_s": 2e-3}
OPT_S_PER_PARAM = 4e-9


def _wide() -> ModelSpec:
    data = preset("tiny").model_dump(exclude={"head_dim"})
    data.update(name="tiny-x4", hidden_size=256, ffn_hidden_size=384)
    return ModelSpec.model_validate(data)


def synthetic_raw(layers: list[dict] | None = None) -> dict:
    """What executor.calibrate would report for a device and fabric with the parameters above."""
    shapes = [(m, k, n) for m in (64, 256, 1024) for k, n in ((64, 128), (256, 768), (1024, 1024))]
    gemm = {dt: [{"m": m, "k": k, "n": n, "flops": 2.0 * m * k * n, "time_s": (2.0 * m * k * n + HALF[dt]) / RATE[dt]}
                 for m, k, n in shapes] for dt in RATE}
    coll = [{"kind": kind, "group_size": n, "groups": 4 // n, "bytes": s,
             "time_s": lat + (1.0 if kind == "p2p" else bytes_factor(kind, n)) * s / bw}
            for (kind, n), (lat, bw) in COLL.items() for s in (4096, 65536, 2**20, 2**23)]
    tiny, wide = preset("tiny"), _wide()
    if layers is None:  # placeholder times; the overhead test below builds exact ones
        layers = [{"model": sp.model_dump(mode="json"), "tp": 1, "dp": 1,
                   "points": [{"tokens": t, "forward_s": 1e-2, "backward_s": 2e-2} for t in (64, 256)]}
                  for sp in (tiny, wide)]
    return {"host": "testhost", "date": "2026-01-02", "device": "cpu", "device_name": "x86_64", "backend": "gloo",
            "world_size": 4, "logical_cpus": 2, "threads_per_process": 1, "torch_version": "test", "quick": True,
            "memory_bytes": 16 * 2**30, "gemm": gemm, "memory_copy": {"bytes_moved": 2 * 2**26, "time_s": 2 * 2**26 / COPY_BPS},
            "host_copy_Bps": None, "devices_at_full_speed": 2.0, "layers": layers,
            "optimizer": {"params": 10**6, "time_s": 10**6 * OPT_S_PER_PARAM}, "collectives": coll}


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cal") / "calibrated.yaml"
    write_profiles(build_profiles(synthetic_raw(), ProfilePaths(path)), force=False)
    return path


# --- fits ---------------------------------------------------------------------------------------------------

def test_gemm_fit_recovers_the_curve_exactly() -> None:
    flops = [2.0 * m * k * n for m in (64, 512) for k in (64, 1024) for n in (128, 2048)]
    fit = fit_gemm(flops, [(f + 4.5e5) / 7.0e10 for f in flops])
    assert fit.rate_flops == pytest.approx(7.0e10, rel=1e-9)
    assert fit.half_flops == pytest.approx(4.5e5, rel=1e-7)
    assert fit.rms_rel_error < 1e-12


@pytest.mark.parametrize("kind,n", [("all_reduce", 4), ("all_gather", 3), ("reduce_scatter", 2), ("all_to_all", 4), ("p2p", 2)])
def test_collective_fit_recovers_latency_and_bus_bandwidth(kind: str, n: int) -> None:
    sizes = [1024.0, 65536.0, 2.0**20, 2.0**24]
    factor = bytes_factor(kind, n)
    fit = fit_collective(kind, n, sizes, [2.5e-4 + factor * s / 3.0e9 for s in sizes])
    assert fit.latency_s == pytest.approx(2.5e-4, rel=1e-9)
    assert fit.bus_bandwidth_Bps == pytest.approx(3.0e9, rel=1e-9)
    assert fit.time_s(1e6) == pytest.approx(2.5e-4 + factor * 1e6 / 3.0e9, rel=1e-9)


def test_affine_fit_is_non_negative() -> None:
    # A proportional set with noise that would give a negative intercept: the intercept is clamped to 0.
    x, t = [1.0, 2.0, 3.0], [0.9, 2.1, 3.3]
    fit = fit_affine(x, t)
    assert fit.intercept == 0.0 and fit.slope > 0
    # Times that do not grow: all intercept.
    flat = fit_affine([1.0, 2.0, 4.0], [5.0, 4.9, 4.8])
    assert flat.slope == 0.0 and flat.intercept == pytest.approx(np.mean([5.0, 4.9, 4.8]), rel=0.01)
    with pytest.raises(ValueError):
        fit_gemm([1e6, 2e6], [1.0, 0.5])


# --- the written profile ------------------------------------------------------------------------------------

def test_profile_set_loads_and_every_number_is_sourced_by_the_measurement(calibrated: Path) -> None:
    cluster = hp.cluster(str(calibrated), gpus=4)
    (gpu,) = cluster.gpus.values()
    assert gpu.vendor == "cpu" and cluster.num_gpus == 4
    assert gpu.peak_flops["fp32"] == pytest.approx(RATE["fp32"], rel=1e-3)
    assert gpu.peak_flops["bf16"] == pytest.approx(RATE["bf16"], rel=1e-3)
    assert gpu.matmul_efficiency.max_fraction == 1.0
    assert gpu.matmul_efficiency.half_flops == pytest.approx(HALF["fp32"], rel=1e-3)
    assert gpu.memory_bandwidth_Bps == pytest.approx(COPY_BPS, rel=1e-3)
    assert gpu.devices_at_full_speed == 2.0
    assert gpu.framework_overhead.optimizer_s_per_param == pytest.approx(OPT_S_PER_PARAM, rel=1e-3)
    (link,) = cluster.links.values()
    got = {(m.kind, m.group_size): (m.latency_s, m.bus_bandwidth_Bps) for m in link.measured_collectives}
    for key, (lat, bw) in COLL.items():
        assert got[key][0] == pytest.approx(lat, rel=1e-3) and got[key][1] == pytest.approx(bw, rel=1e-3)
    assert link.bandwidth_Bps == pytest.approx(1.0e9, rel=1e-3)  # all_reduce over the largest group
    assert link.latency_s == pytest.approx(2e-3 / latency_steps("all_reduce", 4), rel=1e-3)
    tag = "measured by meshplan calibrate on testhost 2026-01-02"
    for path in ProfilePaths(calibrated).all():
        data = yaml.safe_load(path.read_text())
        assert data["sources"] and all(v.startswith(tag) for v in data["sources"].values()), path
    # The loader's own validation ran (Sourced: every number has a source, every source a number).
    hp.gpu(str(ProfilePaths(calibrated).gpu))
    hp.link(str(ProfilePaths(calibrated).link))


def test_existing_profile_is_not_overwritten_without_force(calibrated: Path) -> None:
    cal = build_profiles(synthetic_raw(), ProfilePaths(calibrated))
    with pytest.raises(UserError, match="--force"):
        write_profiles(cal, force=False)


def test_planner_plans_on_the_calibrated_profile(calibrated: Path) -> None:
    plans = search(preset("tiny"), hp.cluster(str(calibrated), gpus=4), Workload(global_batch=8, seq_len=64, dtype="fp32"))
    assert plans[0].prediction.step_time_s > 0
    result = CliRunner().invoke(app, ["plan", "--model", "tiny", "--cluster", str(calibrated), "--gpus", "4",
                                      "--global-batch", "8", "--seq-len", "64", "--json", "-"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["prediction"]["step_time_s"] > 0


# --- framework overhead -------------------------------------------------------------------------------------

def test_overhead_fit_recovers_the_overhead_from_exact_layer_times(calibrated: Path, tmp_path: Path) -> None:
    # The cost model without any overhead (the calibrated GPU profile with framework_overhead removed)...
    paths = ProfilePaths(tmp_path / "bare.yaml")
    for src, dst in zip(ProfilePaths(calibrated).all(), paths.all(), strict=True):
        data = yaml.safe_load(src.read_text())
        if data.get("framework_overhead"):
            del data["framework_overhead"], data["sources"]["framework_overhead"]
        if data.get("node_groups"):
            data["node_groups"][0]["node"].update(gpu=paths.gpu.name, scaleup_link=paths.link.name)
        dst.write_text(yaml.safe_dump(data))
    bare = hp.cluster(str(paths.cluster))
    o = OVERHEAD
    layers = []
    for spec, tp, dp in ((preset("tiny"), 1, 1), (_wide(), 1, 1), (preset("tiny"), 2, 1), (preset("tiny"), 1, 2)):
        points = []
        for t in (64, 256):
            mf, mb = model_layer_s(bare, spec, t, tp, 4, dp)
            el = t * spec.hidden_size / tp
            f = mf + o["layer_forward_s"] + o["forward_s_per_element"] * el
            b = mb + o["layer_backward_s"] + o["backward_s_per_element"] * el
            if tp > 1:
                f, b = f + o["tp_layer_forward_s"], b + o["tp_layer_backward_s"]
            if dp > 1:
                f, b = f + o["dp_layer_forward_s"], b + o["dp_layer_backward_s"]
            points.append({"tokens": t, "forward_s": f, "backward_s": b})
        layers.append({"model": spec.model_dump(mode="json"), "tp": tp, "dp": dp, "points": points})
    fit = fit_overhead(bare, layers, 4, {"params": 1000, "time_s": 1000 * OPT_S_PER_PARAM})
    got = fit.profile_data()
    for key, want in o.items():
        assert got[key] == pytest.approx(want, rel=1e-3, abs=1e-12), key
    assert got["optimizer_s_per_param"] == pytest.approx(OPT_S_PER_PARAM, rel=1e-3)
    # ...and the calibrated profile carries the fit into the cost model: layer time = model + overhead.
    full = build_profiles(synthetic_raw(layers), ProfilePaths(tmp_path / "full.yaml"))
    write_profiles(full, force=False)
    cluster = hp.cluster(str(tmp_path / "full.yaml"))
    spec = _wide()
    mf, mb = model_layer_s(cluster, spec, 128, 1, 4)
    bf, bb = model_layer_s(bare, spec, 128, 1, 4)
    el = 128 * spec.hidden_size
    assert mf - bf == pytest.approx(o["layer_forward_s"] + o["forward_s_per_element"] * el, rel=1e-3)
    assert mb - bb == pytest.approx(o["layer_backward_s"] + o["backward_s_per_element"] * el, rel=1e-3)


def test_overhead_overlaps_on_accelerators_and_adds_on_cpu() -> None:
    from planner.api import make_context
    from planner.cost.overhead import with_overhead

    h100 = hp.cluster("dgx-h100", nodes=1)
    ctx = make_context(preset("llama3-8b"), h100, Workload(global_batch=8, seq_len=4096))
    a, b = np.array([1.0, 3.0]), np.array([2.0, 2.0])
    assert with_overhead(ctx, a, b).tolist() == [2.0, 3.0]
    cpu = make_context(preset("tiny"), hp.cluster("local-cpu", gpus=2), Workload(global_batch=8, seq_len=64, dtype="fp32"))
    assert with_overhead(cpu, a, b).tolist() == [3.0, 5.0]
    # Built-in profiles carry no overhead: the layer time is the FLOP/byte model alone.
    one = np.array([1])
    t = compute.layer_time_s(cpu, cpu.layer_types[0], np.array([64]), one, one, one, np.array([False]))
    assert cpu.gpu.framework_overhead is None and t.fwd_s[0] > 0


# --- measured collectives, host sharing, DP latency per unit ----------------------------------------------

def test_measured_collectives_replace_the_ring_model(calibrated: Path) -> None:
    from planner.topology import Topology

    bw = comm.AxisBandwidth(Topology(hp.cluster(str(calibrated), gpus=4)))
    for (kind, n), (lat, busbw) in COLL.items():
        if kind == "p2p":
            continue
        a, b, where = bw.coeffs(kind, (4 // n, n), 1)
        assert where == "measured"
        assert a == pytest.approx(lat, rel=1e-3) and b == pytest.approx(bytes_factor(kind, n) / busbw, rel=1e-3)
    a, b, _ = bw.coeffs("p2p", (1, 4), 1)  # a pipeline of 4: the measured pair exchange
    assert a == pytest.approx(1.5e-4, rel=1e-3) and b == pytest.approx(1 / 2.5e9, rel=1e-3)
    # A group size not measured (3 of 6 devices): the nearest measured size (4, the larger on a tie with 2)
    # with its latency scaled by the ring steps, its bus bandwidth kept.
    bw6 = comm.AxisBandwidth(Topology(hp.cluster(str(calibrated), gpus=6)))
    a, b, _ = bw6.coeffs("all_reduce", (2, 3), 1)
    lat4, busbw4 = COLL[("all_reduce", 4)]
    assert a == pytest.approx(lat4 * latency_steps("all_reduce", 3) / latency_steps("all_reduce", 4), rel=1e-3)
    assert b == pytest.approx(bytes_factor("all_reduce", 3) / busbw4, rel=1e-3)


def test_ep_term_uses_the_measured_all_to_all(calibrated: Path) -> None:
    """The EP cost of a plan on a calibrated cluster, by hand from the measured all_to_all n=2: per MoE layer
    and micro-batch, forward = counts (E int64) + dispatch + combine of T*top_k*h fp32 values, backward =
    dispatch + combine; every tiny-moe layer is MoE, 4 of them, 2 micro-batches."""
    from planner import evaluate
    from planner.layout import Layout

    spec = preset("tiny-moe")
    plan = evaluate(spec, hp.cluster(str(calibrated), gpus=2), Workload(global_batch=4, seq_len=64, dtype="fp32"),
                    Layout(dp=2, ep=2, zero=3, dp_shard=2, micro_batch=1, num_microbatches=2), allow_oom=True)
    lat, busbw = COLL[("all_to_all", 2)]
    factor = bytes_factor("all_to_all", 2)

    def a2a(nbytes: float) -> float:
        return lat + factor * nbytes / busbw

    rows = 64 * spec.moe.top_k * spec.hidden_size * 4
    per_layer = (a2a(spec.moe.num_experts * 8) + 2 * a2a(rows)) + 2 * a2a(rows)
    assert plan.prediction.breakdown.ep_comm_s == pytest.approx(2 * 4 * per_layer, rel=1e-9)


def test_expert_parallel_layer_is_reported_against_the_model_not_fitted() -> None:
    """executor.calibrate's EP layer (tiny-moe over a pair) leaves the fit unchanged and is reported with the
    cost model's prediction: compute with 2 of 4 experts, the EP all-to-alls and the plain layer overhead."""
    cluster = hp.cluster("local-cpu", gpus=4)
    plain = [{"model": preset("tiny").model_dump(mode="json"), "tp": 1, "dp": 1,
              "points": [{"tokens": t, "forward_s": 1e-3 * t / 64, "backward_s": 2e-3 * t / 64} for t in (64, 256)]}]
    ep_layer = {"model": preset("tiny-moe").model_dump(mode="json"), "tp": 1, "dp": 1, "ep": 2,
                "points": [{"tokens": 64, "forward_s": 5e-3, "backward_s": 9e-3}]}
    base = fit_overhead(cluster, plain, 4)
    fit = fit_overhead(cluster, plain + [ep_layer], 4)
    assert (fit.layer_forward_s, fit.forward_s_per_element) == (base.layer_forward_s, base.forward_s_per_element)
    (row,) = [r for r in fit.report if r.get("ep") == 2]
    mf, mb = model_layer_s(cluster, preset("tiny-moe"), 64, 1, 4, ep=2)
    of, ob = fit.layer_s(64, 64, 1)
    assert (row["measured_forward_s"], row["fitted_forward_s"], row["fitted_backward_s"]) == (5e-3, mf + of, mb + ob)
    no_ep, _ = model_layer_s(cluster, preset("tiny-moe"), 64, 1, 4, ep=1)
    assert mf != no_ep  # the EP layer's model differs from the plain one (fewer local experts, all-to-alls)


def test_host_bound_is_the_hosts_cpu_work_over_its_cores() -> None:
    ctx = SimpleNamespace(gpu=SimpleNamespace(devices_at_full_speed=2.0), topology=SimpleNamespace(gpus_per_node=4))
    bound = host_share.host_bound_s(ctx, np.array([4, 4, 2]), np.array([1, 4, 1]), np.array([0.1, 0.4, 0.1]),
                                    np.array([0.01, 0.02, 0.0]))
    # dp4: 4 pipelines of 0.1 s over 2 cores + 0.01; pp4: one pipeline of 0.4 s over 2 cores + 0.02;
    # 2 ranks on 2 cores: no slowdown beyond the work itself.
    assert bound.tolist() == pytest.approx([0.21, 0.22, 0.1])
    gpu_ctx = SimpleNamespace(gpu=SimpleNamespace(devices_at_full_speed=None), topology=None)
    assert host_share.host_bound_s(gpu_ctx, np.array([8]), np.array([1]), np.array([1.0]), np.array([0.0])) is None


def test_calibrated_step_is_at_least_the_host_bound(calibrated: Path) -> None:
    from planner import evaluate
    from planner.layout import Layout

    cluster = hp.cluster(str(calibrated), gpus=4)
    wl = Workload(global_batch=8, seq_len=64, dtype="fp32")
    dp4 = evaluate(preset("tiny"), cluster, wl, Layout(dp=4, micro_batch=2, num_microbatches=1, zero=1))
    b = dp4.prediction.breakdown
    # The breakdown still adds up to the step (the sharing slowdown is booked under compute)...
    assert b.total_s == pytest.approx(dp4.prediction.step_time_s, rel=1e-9)
    # ...and 4 busy processes on 2 full-speed slots take at least twice one process's compute.
    one = evaluate(preset("tiny"), hp.cluster(str(calibrated), gpus=1), wl,
                   Layout(dp=1, micro_batch=2, num_microbatches=4))
    assert dp4.prediction.step_time_s > 2 * (one.prediction.breakdown.compute_s / 4) * 0.999


def test_dp_collectives_pay_their_latency_once_per_unit() -> None:
    workload = SimpleNamespace(overlap_dp_comm=True, runtime="pytorch", zero1_grad_allreduce=False)
    # fp32 training (gradients reduced as they are) on a GPU whose compute does not slow under overlap
    gpu = SimpleNamespace(comm_overlap_slowdown=0.0)
    ctx = SimpleNamespace(grad_bytes=4, weight_bytes=4, gpu_kind_is_cpu=False, workload=workload, gpu=gpu, memory_bandwidth_Bps=1e12,
                          mixed_precision=False)
    lat, per_byte = 1e-3, 1e-9
    coeffs = (np.array([lat]), np.array([per_byte]))
    zero = np.array([0])
    params, layers = np.array([1e6]), np.array([3])
    t = comm.dp_time_s(ctx, params, zero, np.array([1]), coeffs, coeffs, coeffs, np.array([1]),
                       np.array([0.0]), np.array([0.0]), layers, np.array([1]))
    # ZeRO-0, nothing to hide behind: one all-reduce per unit (3 layers + the root) of 4 MB in all.
    assert t[0] == pytest.approx(4 * lat + 4e6 * per_byte)
    # On an accelerator a backward window hides all but the last unit's share; on CPU processes nothing hides.
    window = np.array([1.0])
    hidden = comm.dp_time_s(ctx, params, zero, np.array([1]), coeffs, coeffs, coeffs, np.array([1]),
                            window, window, layers, np.array([1]))
    assert hidden[0] == pytest.approx((4 * lat + 4e6 * per_byte) / 3)
    cpu = SimpleNamespace(grad_bytes=4, weight_bytes=4, gpu_kind_is_cpu=True, workload=workload, gpu=gpu, memory_bandwidth_Bps=1e12,
                          mixed_precision=False)
    exposed = comm.dp_time_s(cpu, params, zero, np.array([1]), coeffs, coeffs, coeffs, np.array([1]),
                             window, window, layers, np.array([1]))
    assert exposed[0] == pytest.approx(4 * lat + 4e6 * per_byte)
    assert math.isfinite(exposed[0])
