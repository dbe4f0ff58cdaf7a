"""`local-cpu`, measured on this machine: a quick calibration the first time the CLI needs it, then cached.

The built-in `local-cpu` profile (hardware_profiles/data) was measured on one particular machine; on any
other CPU its predictions are off by 40x to 100x. So the CLI (`--cluster local-cpu`, and the tiny plan
`meshplan run` makes without a plan file) plans on a quick calibration of THIS machine instead
(planner.calibration, meshplan run's 4 processes, under a minute), made the first time it is needed and
cached, one per machine, in meshplan's cache folder (planner.cost.comm_cache.cache_dir):

    $MESHPLAN_CACHE_DIR, else $XDG_CACHE_HOME/meshplan, else ~/.cache/meshplan
        local-cpu-<machine key>/local-cpu.yaml (+ .gpu.yaml, .link.yaml)

The key hashes the host name, CPU model, core count and the torch and meshplan versions, so another machine
or a new torch gets its own measurement. The set is written atomically (measured into a temporary folder,
renamed into place, so a crash or a concurrent run never leaves half a profile), read through the ordinary
validated YAML loader (pydantic; no pickle), and measured again when it does not load.

MESHPLAN_LOCAL_CPU=builtin keeps the built-in profile (the test suite sets it: results must not depend on
the machine's speed), and so does MESHPLAN_CACHE_DIR=off (no cache to keep a measurement in); `meshplan calibrate` remains the way to measure on purpose. The Python API's
`hardware_profiles.cluster("local-cpu")` is always the built-in profile: hardware_profiles reads data and
never launches anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import shutil
import tempfile
from pathlib import Path
from typing import Any

NAME = "local-cpu"
ENV_MODE = "MESHPLAN_LOCAL_CPU"
PROCESSES = 4
"""Processes the calibration measures with: `meshplan run`'s default world (planner.cli.run.DEFAULT_RANKS)."""


def cache_dir() -> Path | None:
    """meshplan's cache folder (the one the collective-coefficient cache uses), None when caching is off."""
    from planner.cost.comm_cache import cache_dir as meshplan_cache_dir

    return meshplan_cache_dir()


def machine_key() -> str:
    """12 hex digits identifying this machine and software (host, CPU model, cores, torch and meshplan)."""
    from importlib import metadata

    model = ""
    with contextlib.suppress(OSError):
        model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "")
    versions = []
    for dist in ("torch", "meshplan"):
        try:
            versions.append(metadata.version(dist))
        except metadata.PackageNotFoundError:
            versions.append("-")
    text = "|".join([platform.node(), model or platform.processor(), str(os.cpu_count()), *versions])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def measured_profile_path() -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / f"{NAME}-{machine_key()}" / f"{NAME}.yaml"


def use_builtin() -> bool:
    return os.environ.get(ENV_MODE, "").strip().lower() == "builtin"


def local_cpu(*, nodes: int | None = None, gpus: int | None = None, say: Any = None) -> Any:
    """The `local-cpu` cluster for the CLI: this machine's cached measurement (made now if missing), or the
    built-in profile under MESHPLAN_LOCAL_CPU=builtin. `say` prints one progress line (stderr)."""
    import hardware_profiles as hp

    path = measured_profile_path()
    if use_builtin() or path is None:  # asked for, or no cache to keep a measurement in
        return hp.cluster(NAME, nodes=nodes, gpus=gpus)
    if not _loads(path):
        try:
            _measure(path, say)
        except Exception as exc:  # noqa: BLE001 - the built-in profile still plans; say why it is used
            if say is not None:
                say(f"warning: could not measure this machine ({' '.join(str(exc).split())[:200]}); using the "
                    f"built-in {NAME} profile, whose predictions are not calibrated for this machine")
            return hp.cluster(NAME, nodes=nodes, gpus=gpus)
    return hp.cluster(str(path), nodes=nodes, gpus=gpus)


def _loads(path: Path) -> bool:
    import hardware_profiles as hp

    if not path.is_file():
        return False
    try:
        hp.cluster(str(path))
    except (hp.ProfileError, ValueError):
        return False
    return True


def _measure(path: Path, say: Any) -> None:
    """Calibrate into a temporary folder next to the final one, then rename it into place."""
    from planner.calibration import calibrate

    folder = path.parent
    folder.parent.mkdir(parents=True, exist_ok=True)  # the cache folder is meshplan's own
    if say is not None:
        say(f"measuring this machine for the {NAME} profile (once; quick calibration with {PROCESSES} processes), "
            f"cached in {folder}; MESHPLAN_LOCAL_CPU=builtin skips it")
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        calibrate(tmp / path.name, nproc=PROCESSES, quick=True, force=True)
        if folder.exists():  # a broken earlier set, or a concurrent run that finished first
            old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old.", dir=folder.parent))
            os.replace(folder, old / "set")
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
