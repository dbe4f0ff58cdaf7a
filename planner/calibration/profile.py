"""Turn `executor.calibrate`'s measurements into a GPU profile, a link profile and a cluster profile.

Three YAML files side by side, the cluster naming the other two by relative path (the loader resolves a
`.yaml` name next to the cluster file), so `hardware_profiles.cluster("calibrated.yaml")` and
`meshplan plan --cluster calibrated.yaml` take the result like any built-in profile:

    calibrated.yaml        cluster: one host, N devices (CPU processes over gloo, or N GPUs over NCCL)
    calibrated.gpu.yaml    device: GEMM curve, memory bandwidth, framework overhead
    calibrated.link.yaml   fabric: ring-model bandwidth/latency and the measured cost of every collective

Every source reads "measured by meshplan calibrate on <host> <date>: <what and how>". On a GPU with a
built-in datasheet profile the peak FLOP/s stay the datasheet's and `max_fraction` is the measured plateau
over it; a CPU process (or an unknown GPU) has no datasheet figure, so the measured plateau is the peak and
`max_fraction` is 1 by that definition.

Calibrate measures collectives inside one host, so they go on that host's link (scale-up or loopback). A
measurement across hosts (nccl-tests or a framework's own benchmark over several nodes) is entered by hand as
`measured_collectives` of the cluster's NIC link profile, with its source (hosts, ranks, message size, library
version), where it floors the cost of groups that cross hosts (planner.cost.measured_comm).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from planner.calibration.fit import CollectiveFit, GemmFit, fit_collectives, fit_gemm
from planner.topology.estimate import latency_steps


@dataclass(frozen=True)
class ProfilePaths:
    """Where the three files go: `<out>` and, next to it, `<stem>.gpu.yaml` and `<stem>.link.yaml`."""

    cluster: Path

    @property
    def gpu(self) -> Path:
        return self.cluster.with_name(f"{self._stem}.gpu.yaml")

    @property
    def link(self) -> Path:
        return self.cluster.with_name(f"{self._stem}.link.yaml")

    @property
    def _stem(self) -> str:
        name = self.cluster.name
        for suffix in (".yaml", ".yml"):
            if name.endswith(suffix):
                return name[: -len(suffix)]
        return name

    def all(self) -> list[Path]:
        return [self.cluster, self.gpu, self.link]


@dataclass(frozen=True)
class Fits:
    """Everything fitted from one measurement, before it is written."""

    gemm: dict[str, GemmFit]
    memory_bandwidth_Bps: float
    collectives: list[CollectiveFit]


def tag(raw: dict) -> str:
    return f"measured by meshplan calibrate on {raw['host']} {raw['date']}"


def fit_all(raw: dict) -> Fits:
    gemm = {}
    for dtype, points in raw["gemm"].items():
        gemm[dtype] = fit_gemm([p["flops"] for p in points], [p["time_s"] for p in points])
    copy = raw["memory_copy"]
    return Fits(gemm, copy["bytes_moved"] / copy["time_s"], fit_collectives(raw["collectives"]))


def _sig(x: float) -> float:
    """Four significant figures: the measurements are not better than that."""
    return float(f"{x:.4g}")


def _datasheet(raw: dict):
    """The built-in profile of this GPU (for its datasheet peak), or None (CPU, or a GPU meshplan lacks)."""
    if raw["device"] != "cuda":
        return None
    import hardware_profiles as hp
    from planner.errors import UserError
    from planner.topology.detect import gpu_profile_name

    try:
        return hp.gpu(gpu_profile_name(raw["device_name"]))
    except UserError:
        return None


def gpu_profile_data(raw: dict, fits: Fits, name: str) -> dict:
    """The GPU profile (without framework overhead, which needs this profile to be fitted: overhead.py)."""
    t, cpu = tag(raw), raw["device"] == "cpu"
    used = "fp32" if cpu else "bf16"  # the dtype the planner computes in on this device (CostContext)
    shapes = f"{len(raw['gemm'][used])} F.linear shapes" + (", rank 0 alone (solo rate)" if cpu else ", every GPU, median")
    fit = fits.gemm[used]
    sheet = _datasheet(raw)
    sources = {}
    if sheet is not None:
        peak = dict(sheet.peak_flops)
        max_fraction = min(1.0, fit.rate_flops / peak[used])
        sources["peak_flops"] = f"{t}: none measured; datasheet values of built-in profile {sheet.name!r} ({sheet.sources.get('peak_flops', 'see that profile')})"
        sources["matmul_efficiency.max_fraction"] = f"{t}: fitted {used} plateau {fit.rate_flops:.4g} FLOP/s over the datasheet peak ({shapes})"
    else:
        peak = {k: _sig(f.rate_flops) for k, f in fits.gemm.items()}
        max_fraction = 1.0
        sources["peak_flops"] = (f"{t}: plateau R of the fit time = (F + h)/R to {shapes}, per dtype (no datasheet "
                                 "figure applies, so the plateau is the peak)")
        sources["matmul_efficiency.max_fraction"] = f"{t}: 1 by definition (peak_flops is the measured plateau)"
    sources["matmul_efficiency.half_flops"] = (f"{t}: h of the {used} fit time = (F + h)/R, least squares in "
                                               f"relative error (rms {fit.rms_rel_error:.1%})")
    copy = raw["memory_copy"]
    sources["memory_bandwidth_Bps"] = (f"{t}: copy of {copy['bytes_moved'] // 2} bytes, bytes read + written per "
                                       "second" + (", rank 0 alone" if cpu else ", every GPU, median"))
    sources["memory_bytes"] = f"{t}: " + ("MemTotal of /proc/meminfo (host RAM; the loader splits it over the processes)"
                                          if cpu else "torch.cuda.get_device_properties().total_memory")
    busbw = max((f.bus_bandwidth_Bps for f in fits.collectives if f.kind == "all_reduce"), default=0.0)
    sources["nvlink_bandwidth_Bps"] = (f"{t}: none; CPU processes exchange data through gloo (see the link profile)"
                                       if cpu else f"{t}: largest all_reduce bus bandwidth over NCCL on this host")
    sources["pcie_bandwidth_Bps"] = (f"{t}: no PCIe device; the host-memory copy bandwidth stands in" if cpu
                                     else f"{t}: host-to-device copy of pinned memory")
    extra = {}
    if cpu:
        extra["devices_at_full_speed"] = _sig(raw["devices_at_full_speed"])
        sources["devices_at_full_speed"] = (
            f"{t}: {raw['world_size']} processes x rank 0's solo time / the median time with all of them running "
            f"the 4x-wide reference layer's forward+backward at once ({raw['logical_cpus']} logical CPUs; other load on the "
            "host counts), median over solo/together pairs")
    return {
        "name": name,
        "vendor": "cpu" if cpu else "nvidia",
        "description": f"{raw['device_name']} as measured by meshplan calibrate ({raw['world_size']} "
                       f"{'processes, ' + str(raw['threads_per_process']) + ' thread(s) each' if cpu else 'GPUs'})",
        "memory_bytes": int(raw["memory_bytes"]),
        "memory_bandwidth_Bps": _sig(fits.memory_bandwidth_Bps),
        "peak_flops": peak,
        "matmul_efficiency": {"max_fraction": _sig(max_fraction), "half_flops": _sig(max(fit.half_flops, 1.0))},
        "nvlink_bandwidth_Bps": 0.0 if cpu else _sig(busbw),
        "pcie_bandwidth_Bps": _sig(fits.memory_bandwidth_Bps if cpu else raw.get("host_copy_Bps") or fits.memory_bandwidth_Bps),
        **extra,
        "sources": sources,
    }


def link_profile_data(raw: dict, fits: Fits, name: str) -> dict:
    """The link profile: the ring model's two numbers from all_reduce over the largest group, and every fit."""
    t = tag(raw)
    ar = [f for f in fits.collectives if f.kind == "all_reduce"]
    if not ar:
        raise ValueError("no all_reduce measurement: calibrate needs at least 2 processes")
    big = max(ar, key=lambda f: f.group_size)
    steps = latency_steps("all_reduce", big.group_size)
    backend = raw["backend"]
    return {
        "name": name,
        "kind": "loopback" if raw["device"] == "cpu" else "nvlink",
        "description": f"{backend} collectives between the {raw['world_size']} {'processes' if raw['device'] == 'cpu' else 'GPUs'} "
                       f"of {raw['host']}, as measured",
        "bandwidth_Bps": _sig(big.bus_bandwidth_Bps),
        "latency_s": _sig(big.latency_s / steps),
        "protocol_efficiency": 1.0,
        "measured_collectives": [
            {"kind": f.kind, "group_size": f.group_size, "latency_s": _sig(f.latency_s),
             "bus_bandwidth_Bps": _sig(f.bus_bandwidth_Bps)}
            for f in fits.collectives
        ],
        "sources": {
            "bandwidth_Bps": f"{t}: {backend} all_reduce bus bandwidth over groups of {big.group_size}, fit time = "
                             "latency + 2(n-1)/n S/busbw",
            "latency_s": f"{t}: {backend} all_reduce latency over groups of {big.group_size} / its {steps} ring steps",
            "protocol_efficiency": f"{t}: 1, bandwidth_Bps is already the measured payload rate",
            "measured_collectives": f"{t}: per kind and group size, least-squares fit of time = latency + "
                                    "factor*S/busbw over message sizes, all groups of a size running at once",
        },
    }


def cluster_data(raw: dict, paths: ProfilePaths, name: str) -> dict:
    """One host with `world_size` devices that names the two files next to it."""
    t, cpu = tag(raw), raw["device"] == "cpu"
    node = {"name": f"{raw['host']} ({'CPU processes' if cpu else 'GPUs'}, calibrated)", "gpu": paths.gpu.name,
            "gpus": int(raw["world_size"]), "scaleup_link": paths.link.name}
    if cpu:
        node["virtual_devices"] = True
    return {
        "name": name,
        "description": f"{raw['host']} as measured by meshplan calibrate on {raw['date']}: {raw['world_size']} "
                       f"{'CPU processes over gloo' if cpu else 'GPUs over NCCL'}"
                       + ("; the device rates hold for that many processes sharing the host" if cpu else ""),
        "node_groups": [{"count": 1, "node": node}],
        "default_nodes": 1,
        "sources": {
            "node_groups.0.count": f"{t}: one host",
            "node_groups.0.node.gpus": f"{t}: {raw['world_size']} {'processes' if cpu else 'GPUs'} measured at once",
        },
    }
