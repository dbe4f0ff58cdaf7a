"""Calibration: measure this machine (executor.calibrate, in torch subprocesses) and write a cluster profile.

    from planner.calibration import calibrate
    result = calibrate(Path("calibrated.yaml"), nproc=4, quick=True)
    hardware_profiles.cluster("calibrated.yaml")            # loads like any built-in profile

`calibrate` = `launch.measure` (torchrun, raw timings) -> `profile.fit_all` (GEMM curve, memory bandwidth,
collective latency/bandwidth per kind and group size) -> `overhead.fit_overhead` (framework time per
layer, against the cost model with the profile just fitted) -> three YAML files written atomically. No torch
import anywhere in this package.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from planner.calibration.launch import default_nproc, measure
from planner.calibration.overhead import OverheadFit, fit_overhead, fit_pipeline
from planner.calibration.profile import (
    Fits,
    ProfilePaths,
    cluster_data,
    fit_all,
    gpu_profile_data,
    link_profile_data,
    tag,
)
from planner.errors import UserError

__all__ = ["Calibration", "ProfilePaths", "build_profiles", "calibrate", "default_nproc", "write_profiles"]

HEADER = "# Written by meshplan calibrate; rerun it to refresh (every number's source is under 'sources').\n"


@dataclass(frozen=True)
class Calibration:
    """What a calibration measured, fitted and wrote."""

    raw: dict
    fits: Fits
    overhead: OverheadFit
    files: dict[str, dict]  # "cluster" / "gpu" / "link" -> the YAML data
    paths: ProfilePaths

    def summary(self) -> dict:
        """The fitted numbers as one JSON-able document (for --json and reports)."""
        return {
            "host": self.raw["host"], "date": self.raw["date"], "device": self.raw["device"],
            "device_name": self.raw["device_name"], "backend": self.raw["backend"], "processes": self.raw["world_size"],
            "files": {k: str(p) for k, p in zip(("cluster", "gpu", "link"), self.paths.all(), strict=True)},
            "gemm": {k: {"rate_flops": f.rate_flops, "half_flops": f.half_flops, "rms_rel_error": f.rms_rel_error}
                     for k, f in self.fits.gemm.items()},
            "memory_bandwidth_Bps": self.fits.memory_bandwidth_Bps,
            "collectives": [{"kind": f.kind, "group_size": f.group_size, "latency_s": f.latency_s,
                             "bus_bandwidth_Bps": f.bus_bandwidth_Bps, "rms_rel_error": f.rms_rel_error}
                            for f in self.fits.collectives],
            "framework_overhead": self.overhead.profile_data(),
            "overhead_report": self.overhead.report,
            "profiles": self.files,
            "raw": self.raw,
        }


def _dump(data: dict) -> str:
    return HEADER + yaml.safe_dump(data, sort_keys=False, width=120)


def _write_all(texts: dict[Path, str], force: bool) -> None:
    from planner.io import check_targets, write_text_atomic

    check_targets(*texts, force=force)  # all three files or none
    for path, text in texts.items():
        write_text_atomic(path, text, force=force)


def build_profiles(raw: dict, paths: ProfilePaths) -> Calibration:
    """Fit everything and return the three files' data (nothing written to `paths`)."""
    import hardware_profiles as hp

    fits = fit_all(raw)
    stem = paths.cluster.name.rsplit(".", 1)[0]
    gpu = gpu_profile_data(raw, fits, f"{stem}-{raw['device']}")
    link = link_profile_data(raw, fits, f"{stem}-{raw['backend']}")
    cluster = cluster_data(raw, paths, stem)
    with tempfile.TemporaryDirectory(prefix="meshplan-calibrate-") as tmp:
        # The overhead is what the cost model, on the profile fitted so far, does not explain: load it first.
        draft = ProfilePaths(Path(tmp) / paths.cluster.name)
        _write_all({draft.cluster: _dump(cluster), draft.gpu: _dump(gpu), draft.link: _dump(link)}, force=True)
        over = fit_overhead(hp.cluster(str(draft.cluster)), raw["layers"], int(raw["world_size"]), raw.get("optimizer"))
        # The pipeline machinery is what a 2-stage step costs beyond the model with those layer overheads.
        gpu["framework_overhead"] = over.profile_data()
        gpu["sources"]["framework_overhead"] = "draft"
        _write_all({draft.gpu: _dump(gpu)}, force=True)
        per_transfer, pipe_report = fit_pipeline(hp.cluster(str(draft.cluster), gpus=2), raw.get("pipeline"))
    over = dataclasses.replace(over, pp_transfer_s=per_transfer, report=over.report + ([pipe_report] if pipe_report else []))
    gpu["framework_overhead"] = over.profile_data()
    t = tag(raw)
    gpu["sources"]["framework_overhead"] = (
        f"{t}: reference decoder layer forward/backward per micro-batch at hidden "
        f"{sorted({r['hidden'] for r in over.report if 'hidden' in r})} x "
        f"{sorted({r['tokens'] for r in over.report if 'tokens' in r})} tokens, plain "
        "and TP / FSDP over a rank pair; least-squares fit of the residual over this profile's compute and "
        "communication terms (planner.calibration.overhead); pipeline: a 2-stage 1F1B step over the pair beyond "
        "the model, per stage-boundary transfer; optimizer: the executor's AdamW step over one layer's "
        "parameters, seconds per parameter")
    return Calibration(raw, fits, over, {"cluster": cluster, "gpu": gpu, "link": link}, paths)


def write_profiles(cal: Calibration, force: bool) -> None:
    """Write the three files atomically (each refused if it exists, unless `force`), then load the result."""
    import hardware_profiles as hp

    texts = {cal.paths.cluster: _dump(cal.files["cluster"]), cal.paths.gpu: _dump(cal.files["gpu"]),
             cal.paths.link: _dump(cal.files["link"])}
    check_writable(cal.paths, force)
    _write_all(texts, force=True)
    hp.cluster(str(cal.paths.cluster))  # the result must load through the ordinary loader


def check_writable(paths: ProfilePaths, force: bool) -> None:
    """Refuse (before measuring) to overwrite any of the three files without `force`."""
    existing = [str(p) for p in paths.all() if p.exists()]
    if existing and not force:
        raise UserError(f"{', '.join(existing)} already exist(s)", where="meshplan calibrate --out",
                        fix="choose another --out or pass --force to overwrite")


def calibrate(out: Path, *, nproc: int | None = None, quick: bool = False, force: bool = False,
              on_progress: Callable[[int, int, str], None] | None = None) -> Calibration:
    """Measure this machine with `nproc` processes and write the profile set at `out` (see module docstring)."""
    paths = ProfilePaths(Path(out))
    if not paths.cluster.name.endswith((".yaml", ".yml")):
        raise UserError(f"{out}: the profile file must end in .yaml", where="--out", fix="e.g. --out calibrated.yaml")
    check_writable(paths, force)
    raw = measure(nproc or default_nproc(), quick, on_progress)
    cal = build_profiles(raw, paths)
    write_profiles(cal, force)
    return cal
