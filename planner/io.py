"""Safe file output: atomic writes that never overwrite a user's file unless asked."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from planner.errors import UserError


def write_text_atomic(path: Path, text: str, *, force: bool = False) -> None:
    """Write `text` to `path` via a temporary file in the same folder, then rename.

    An interrupted write leaves either the old file or none, never a truncated one. An existing file is
    kept unless `force` is set, because plans and profiles are user work.
    """
    path = Path(path)
    if path.exists() and not force:
        raise UserError("file exists", where=str(path), fix="choose another path or pass --force to overwrite")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        _default_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _default_mode(tmp: str) -> None:
    """mkstemp creates 0600 files; give the result the mode a plain open() would (0666 minus the umask)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)


def write_bytes_atomic(path: Path, data: bytes, *, force: bool = False) -> None:
    """Binary twin of `write_text_atomic` (figures, GraphML)."""
    path = Path(path)
    if path.exists() and not force:
        raise UserError("file exists", where=str(path), fix="choose another path or pass --force to overwrite")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        _default_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
