"""The CLI's `local-cpu` is this machine as measured: a quick calibration the first time, cached per machine
(planner.calibration.local_cache).

The calibration itself (a torchrun job, tested in tests/distributed/test_calibrate.py) is replaced here by a
writer of a valid profile set whose GPU profile says "measured by meshplan calibrate" and has a recognisable
peak, so the tests run in a second and do not depend on this machine's speed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli_inputs import invoke, profile_data

import planner.calibration
from planner.calibration import local_cache

TINY = ["plan", "--model", "tiny", "--cluster", "local-cpu", "--gpus", "4", "--seq-len", "64", "--global-batch", "8",
        "--json", "-"]
PEAK = 1.234e9


@pytest.fixture
def measuring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """A machine without a cached profile, its cache in tmp_path/cache; returns the calibrations made."""
    monkeypatch.delenv("MESHPLAN_LOCAL_CPU", raising=False)
    monkeypatch.setenv("MESHPLAN_CACHE_DIR", str(tmp_path / "cache"))
    made: list[Path] = []

    def calibrate(out: Path, *, nproc: int, quick: bool, force: bool) -> None:
        assert quick and nproc == local_cache.PROCESSES
        gpu = profile_data("gpus", "cpu")
        gpu.update(name="local-cpu-cpu", peak_flops={"bf16": PEAK, "fp16": PEAK, "fp32": PEAK})
        gpu["sources"] = {k: "measured by meshplan calibrate on this-host" for k in gpu["sources"]}
        cluster = profile_data("clusters", "local-cpu")
        cluster["node_groups"][0]["node"].update(gpu="local-cpu.gpu.yaml", gpus=nproc)
        out.with_name("local-cpu.gpu.yaml").write_text(yaml.safe_dump(gpu))
        out.write_text(yaml.safe_dump(cluster))
        made.append(out)

    monkeypatch.setattr(planner.calibration, "calibrate", calibrate)
    return made


def _peak(out: str) -> float:
    return next(iter(json.loads(out)["inputs"]["cluster"]["gpus"].values()))["peak_flops"]["fp32"]


def test_first_use_measures_then_the_cache_is_used(tmp_path: Path, measuring: list[Path]) -> None:
    code, out, err = invoke(TINY)
    assert code == 0, err
    assert len(measuring) == 1 and "measuring this machine for the local-cpu profile" in err
    assert _peak(out) == PEAK  # planned on the measurement
    path = local_cache.measured_profile_path()
    assert path.is_file() and path.parent.parent == tmp_path / "cache"
    assert [p.name for p in path.parent.parent.iterdir()] == [path.parent.name]  # no temporary folder left
    code, out, err = invoke(TINY)
    assert code == 0 and len(measuring) == 1 and "measuring" not in err, err  # cached: measured once
    assert _peak(out) == PEAK


def test_a_broken_cached_profile_is_measured_again(measuring: list[Path]) -> None:
    assert invoke(TINY)[0] == 0
    path = local_cache.measured_profile_path()
    path.write_text("node_groups: [\n")  # truncated
    code, out, err = invoke(TINY)
    assert code == 0 and len(measuring) == 2, err
    assert _peak(out) == PEAK and yaml.safe_load(path.read_text())["name"] == "local-cpu"


def test_builtin_keeps_the_shipped_profile(measuring: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MESHPLAN_LOCAL_CPU", "builtin")
    code, out, err = invoke(TINY)
    assert code == 0 and measuring == [] and _peak(out) == profile_data("gpus", "cpu")["peak_flops"]["fp32"]


def test_a_failed_measurement_falls_back_with_a_warning(measuring: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*a: object, **k: object) -> None:
        raise RuntimeError("torchrun -m executor.calibrate exited with status 1")

    monkeypatch.setattr(planner.calibration, "calibrate", fail)
    code, out, err = invoke(TINY)
    assert code == 0, err
    assert "warning: could not measure this machine (torchrun -m executor.calibrate exited" in err
    assert _peak(out) == profile_data("gpus", "cpu")["peak_flops"]["fp32"]
    assert not local_cache.measured_profile_path().parent.exists()


def test_the_cache_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, measuring: list[Path]) -> None:
    monkeypatch.delenv("MESHPLAN_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert local_cache.cache_dir() == tmp_path / "xdg" / "meshplan"
    monkeypatch.setenv("MESHPLAN_CACHE_DIR", str(tmp_path / "mine"))
    assert local_cache.measured_profile_path().parent.parent == tmp_path / "mine"
    assert len(local_cache.machine_key()) == 12 and local_cache.machine_key() == local_cache.machine_key()
    monkeypatch.setenv("MESHPLAN_CACHE_DIR", "off")  # no cache: the built-in profile, nothing measured
    code, out, _ = invoke(TINY)
    assert code == 0 and measuring == [] and _peak(out) == profile_data("gpus", "cpu")["peak_flops"]["fp32"]
