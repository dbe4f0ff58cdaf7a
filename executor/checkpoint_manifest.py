"""Integrity of a checkpoint folder: the size and SHA-256 of every file, recorded in the completion marker.

A save that completes writes `meshplan.json` last (executor.checkpoint); its `"files"` entry lists every
other file of the folder (DCP's shard files `__R_I.distcp` and its `.metadata`) as
`{name: {"bytes": size, "sha256": hex digest}}`. A resume checks the folder against that list before DCP
reads anything, so a deleted, truncated or altered file (a disk that filled up, a copy cut short, a bad
block) is a one-line `UserError` (exit 2) naming the folder, the file and the fault, rather than a DCP
traceback, a hang, or a model silently loaded with garbage. SHA-256 rather than a CRC: it also catches
deliberate edits, and Python's hashlib computes it at about 1-2 GB/s per core.

The hashing is spread over the ranks: file i (sorted by name) is hashed by rank i mod world size, and one
all-reduce gives every rank every result (a sum: each row is filled by exactly one rank; no pickled
objects travel). At resume every rank stats every file (cheap) and hashes its share; an all-reduce (max)
of the per-file verdicts makes every rank reach the same verdict and stop alike.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
import torch.distributed as dist

from hardware_profiles.reader import InputFileError, read_json
from planner.errors import UserError

MARKER = "meshplan.json"
"""Completion marker of a checkpoint folder (JSON, written last)."""

OK, MISSING, SIZE, DIGEST = 0, 1, 2, 3
_WHAT = {MISSING: "is missing", SIZE: "has {got} bytes, the marker recorded {want}", DIGEST: "has the recorded "
         "size but a different SHA-256 (the file is damaged)"}


def sha256_file(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def data_files(folder: Path) -> list[str]:
    """Every file of a checkpoint folder except the marker, sorted (the same list on every rank)."""
    return sorted(p.name for p in folder.iterdir() if p.is_file() and p.name != MARKER)


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _comm_device() -> torch.device:
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def compute(folder: Path) -> dict[str, dict]:
    """{name: {"bytes", "sha256"}} of every data file of `folder` (collective when a process group exists)."""
    rank, world = _world()
    names = data_files(folder)
    table = torch.zeros(len(names), 33, dtype=torch.int64)  # column 0: size in bytes; 1..32: digest bytes
    for i in range(rank, len(names), world):
        path = folder / names[i]
        table[i, 0] = path.stat().st_size
        table[i, 1:] = torch.tensor(list(bytes.fromhex(sha256_file(path))), dtype=torch.int64)
    if world > 1:
        table = table.to(_comm_device())
        dist.all_reduce(table)  # sum: every row was filled by exactly one rank
        table = table.cpu()
    return {
        name: {"bytes": int(row[0]), "sha256": bytes(int(b) for b in row[1:].tolist()).hex()}
        for name, row in zip(names, table, strict=True)
    }


def verdicts(folder: Path, files: dict[str, dict], rank: int = 0, world: int = 1) -> list[tuple[str, int, int]]:
    """(name, verdict, size found) of each recorded file, sorted by name; this rank hashes its share only."""
    out = []
    for i, name in enumerate(sorted(files)):
        path, want = folder / name, files[name]
        if not path.is_file():
            out.append((name, MISSING, -1))
            continue
        size = path.stat().st_size
        if size != want["bytes"]:
            out.append((name, SIZE, size))
        elif i % world == rank and sha256_file(path) != want["sha256"]:
            out.append((name, DIGEST, size))
        else:
            out.append((name, OK, size))
    return out


def read_marker(folder: Path) -> dict:
    """The completion marker of a checkpoint folder; a UserError when it is unreadable."""
    path = folder / MARKER
    try:
        marker = read_json(path, what="checkpoint marker")
    except InputFileError as exc:
        raise UserError(f"checkpoint completion marker {MARKER} is unreadable ({exc.problem})",
                        where=str(folder), fix="resume from another checkpoint folder") from None
    if not isinstance(marker, dict):
        raise UserError(f"checkpoint completion marker {MARKER} is not a JSON object", where=str(folder),
                        fix="resume from another checkpoint folder")
    return marker


def _check_files_entry(folder: Path, files: object) -> dict[str, dict]:
    ok = isinstance(files, dict) and all(
        isinstance(v, dict) and isinstance(v.get("bytes"), int) and isinstance(v.get("sha256"), str)
        for v in files.values()
    )
    if not ok:
        raise UserError(f"the \"files\" entry of {MARKER} is malformed", where=str(folder),
                        fix="resume from another checkpoint folder")
    return files  # type: ignore[return-value]


def verify(folder: Path, marker: dict) -> bool:
    """Check `folder` against its marker (collective); UserError naming the first damaged file.

    Returns False, checking nothing, for a checkpoint written before markers recorded files."""
    if "files" not in marker:
        return False
    files = _check_files_entry(folder, marker["files"])
    rank, world = _world()
    found = verdicts(folder, files, rank, world)
    codes = torch.tensor([v for _, v, _ in found], dtype=torch.int64)
    if world > 1:
        codes = codes.to(_comm_device())
        dist.all_reduce(codes, op=dist.ReduceOp.MAX)  # every rank learns every rank's verdict
        codes = codes.cpu()
    bad = [(name, int(code), size) for (name, _, size), code in zip(found, codes.tolist(), strict=True) if code]
    if not bad:
        return True
    name, code, size = bad[0]
    what = _WHAT[code].format(got=size, want=files[name]["bytes"])
    more = f" (and {len(bad) - 1} more damaged file{'s' if len(bad) > 2 else ''})" if len(bad) > 1 else ""
    raise UserError(
        f"checkpoint is damaged: {name} {what}{more}",
        where=str(folder),
        fix=f"restore the file, or move {folder.name} out of the folder to resume from the previous checkpoint",
    )
