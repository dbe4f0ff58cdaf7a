"""Collective coefficients kept on disk per cluster, so a new process starts with the groups earlier ones asked.

The first search on a large cluster asks the topology for a few hundred group patterns (each a routing of
the groups' traffic over the links); later processes on the same cluster ask most of the same ones, for any
model. `AxisBandwidth` keeps what it computed for a real topology here:

    $MESHPLAN_CACHE_DIR/collectives/<cluster fingerprint>.json
    (default folder: $XDG_CACHE_HOME/meshplan, else ~/.cache/meshplan; MESHPLAN_CACHE_DIR=off turns it off)

One file per cluster (`Cluster.fingerprint()`: a hash of the whole hardware description), holding per
collective kind the rows [size, stride, world, a, b] of `AxisBandwidth.columns`. JSON, never pickle,
validated on read (`CacheFile`); a file that does not parse or validate, names another cluster, or was
written by another version of the code that computes the coefficients (`code`: a hash of those modules'
source and of the numpy and Python versions) is ignored, and replaced at the next write. A process writes
once, at exit, atomically (a temporary file in the same folder, then a rename), merged with what other
processes wrote meanwhile; any failure to read or write only costs the speed-up. JSON floats round-trip
exactly (Python writes the shortest text that parses back to the same double), so a cached coefficient is
bit-identical to a computed one.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import platform
import re
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from planner.layout.numeric import sorted_unique

ENV = "MESHPLAN_CACHE_DIR"
_OFF = {"", "0", "off", "none", "false", "no"}
FORMAT = 1
MAX_ROWS = 50_000  # per file (about 3 MB); beyond it only the rows of the writing process are kept
_BITS = 21  # packed keys as in planner.cost.comm: (size << 42) | (stride << 21) | world

Seconds = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
Row = tuple[PositiveInt, PositiveInt, PositiveInt, Seconds, Seconds]


class CacheFile(BaseModel):
    """One cluster's cached collective coefficients (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal[1] = Field(description="File format version.")
    code: str = Field(description="Hash of the coefficient code's source and the numpy/Python versions.")
    fingerprint: str = Field(description="`Cluster.fingerprint()` of the cluster the rows belong to.")
    columns: dict[Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p"], list[Row]] = Field(
        description="Per collective kind: [group size, stride, world ranks, a seconds, b seconds per byte].")


def cache_dir() -> Path | None:
    """The cache folder, or None when the disk cache is off."""
    env = os.environ.get(ENV)
    if env is not None:
        return None if env.strip().lower() in _OFF else Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "meshplan"


@cache
def code_version() -> str:
    """Hash of the source of every module whose arithmetic the cached numbers depend on."""
    planner = Path(__file__).resolve().parent.parent
    files = sorted((planner / "topology").glob("*.py"))
    files += [planner / "cost" / name for name in ("comm.py", "measured_comm.py", "comm_cache.py")]
    digest = hashlib.sha256(f"{np.__version__} {platform.python_version()}".encode())
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:32]


Columns = dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]


class Entry:
    """The cache file of one cluster: read once when its coefficient store is made, written at exit."""

    def __init__(self, path: Path, fingerprint: str, code: str) -> None:
        self.path, self.fingerprint, self.code = path, fingerprint, code
        self.pending: Columns | None = None

    def load(self) -> Columns:
        """The cached columns (sorted packed keys, a, b per kind); empty when absent or invalid."""
        doc = self._read()
        return {} if doc is None else _unpack(doc)

    def changed(self, columns: Columns) -> None:
        """Remember the store's columns; they are written when the process exits."""
        if self.pending is None:
            _PENDING.append(self)
            _register_flush()
        self.pending = columns

    def _read(self) -> CacheFile | None:
        from hardware_profiles.reader import read_json

        try:  # the one bounded reader of JSON inputs; InputFileError and ValidationError are ValueErrors
            doc = CacheFile.model_validate(read_json(self.path, what="cache file"))
        except (OSError, ValueError):
            return None
        if doc.fingerprint != self.fingerprint or doc.code != self.code:
            return None
        return doc

    def write(self) -> None:
        """Merge the pending columns with the file as it is now and replace it atomically."""
        from planner.io import write_text_atomic

        if not self.pending:
            return
        merged: dict[str, dict[tuple[int, int, int], tuple[float, float]]] = {}
        old = self._read()
        ours = _pack(self.pending)
        if old is not None and sum(map(len, old.columns.values())) + sum(map(len, ours.values())) <= MAX_ROWS:
            for kind, rows in old.columns.items():
                merged.setdefault(kind, {}).update({r[:3]: r[3:] for r in rows})
        for kind, rows in ours.items():
            merged.setdefault(kind, {}).update({r[:3]: r[3:] for r in rows})
        columns = {kind: [[*k, *v] for k, v in sorted(rows.items())] for kind, rows in merged.items()}
        doc = {"format": FORMAT, "code": self.code, "fingerprint": self.fingerprint, "columns": columns}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.path, json.dumps(doc, separators=(",", ":")), force=True)
        self.pending = None


def open_entry(cluster: Any) -> Entry | None:
    """The cache entry of `cluster`, or None when the cache is off or the cluster has no fingerprint."""
    folder = cache_dir()
    fingerprint = getattr(cluster, "fingerprint", None)
    if folder is None or fingerprint is None:
        return None
    try:
        fp = str(fingerprint())
        code = code_version()
    except (OSError, ValueError):
        return None
    if not re.fullmatch(r"[0-9a-f]{16,128}", fp):
        return None
    return Entry(folder / "collectives" / f"{fp}.json", fp, code)


def _unpack(doc: CacheFile) -> Columns:
    out: Columns = {}
    for kind, rows in doc.columns.items():
        if not rows:
            continue
        arr = np.array([r[:3] for r in rows], dtype=np.int64)
        if (arr >= 1 << _BITS).any() or (arr[:, 0] * arr[:, 1] > arr[:, 2]).any():
            return {}  # not something AxisBandwidth writes: ignore the whole file
        keys = (arr[:, 0] << (2 * _BITS)) | (arr[:, 1] << _BITS) | arr[:, 2]
        order = np.argsort(keys, kind="stable")
        if len(sorted_unique(keys)) != len(keys):
            return {}
        out[kind] = (keys[order], np.array([r[3] for r in rows])[order], np.array([r[4] for r in rows])[order])
    return out


def _pack(columns: Columns) -> dict[str, list[tuple]]:
    mask = (1 << _BITS) - 1
    out: dict[str, list[tuple]] = {}
    for kind, (keys, a, b) in columns.items():
        finite = np.isfinite(a) & np.isfinite(b)
        out[kind] = [(k >> (2 * _BITS), (k >> _BITS) & mask, k & mask, x, y)
                     for k, x, y in zip(keys[finite].tolist(), a[finite].tolist(), b[finite].tolist())]
    return out


_PENDING: list[Entry] = []
_registered = False


def _register_flush() -> None:
    global _registered
    if not _registered:
        atexit.register(flush)
        _registered = True


def flush() -> None:
    """Write every pending cache file now (also run at exit); a cache that cannot be written is skipped."""
    while _PENDING:
        entry = _PENDING.pop()
        try:
            entry.write()
        except Exception:  # a cache failure must never fail the command that used it
            entry.pending = None
