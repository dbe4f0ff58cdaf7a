"""Safe file output: atomic writes that never overwrite a user's file unless asked.

Every file meshplan writes (plans, profiles, exports, CSV, figures, GraphML, run summaries) goes through
`write_text_atomic` / `write_bytes_atomic`. Commands that write several files call `check_targets` first,
before any work, so they write all of them or none (never a partial set followed by "file exists").
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from planner.errors import UserError

_FORCE_FIX = "choose another path or pass --force to overwrite"


def check_targets(*targets: str | Path | None, force: bool = False) -> None:
    """Refuse (UserError) if any output path is a folder, or exists and `force` is not set.

    None and '-' (stdout, which the writers below accept too) are skipped. Call it before the command's work so a refusal costs nothing and no
    file of the set has been written yet.
    """
    for target in targets:
        if target is None or str(target) == "-":
            continue
        path = Path(target)
        if path.is_dir():
            raise UserError("is a folder, not a file", where=str(path), fix="give a file path")
        if path.exists() and not force:
            raise UserError("file exists", where=str(path), fix=_FORCE_FIX)


def write_text_atomic(path: Path, text: str, *, force: bool = False) -> None:
    """Write `text` (UTF-8) to `path` via a temporary file in the same folder, then rename.

    An interrupted write leaves either the old file or none, never a truncated one. An existing file is
    kept unless `force` is set, because plans and profiles are user work.
    """
    _write_atomic(Path(path), text.encode("utf-8"), force=force)


def write_bytes_atomic(path: Path, data: bytes, *, force: bool = False) -> None:
    """Binary twin of `write_text_atomic` (figures, GraphML)."""
    _write_atomic(Path(path), data, force=force)


def _write_atomic(path: Path, data: bytes, *, force: bool) -> None:
    if str(path) == "-":  # the CLI's convention for every output option: '-' is stdout
        buffer = getattr(sys.stdout, "buffer", None)
        if buffer is None:  # a text-only stdout (tests capture into StringIO): everything written is UTF-8
            sys.stdout.write(data.decode("utf-8", errors="replace"))
            return
        sys.stdout.flush()
        buffer.write(data)
        buffer.flush()
        return
    check_targets(path, force=force)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise UserError(f"cannot write ({exc.strerror or exc})", where=str(path),
                        fix="choose a path in a folder you can write") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        _default_mode(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise UserError(f"cannot write ({exc.strerror or exc})", where=str(path),
                        fix="choose a path in a folder you can write, with free space") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _default_mode(tmp: str) -> None:
    """mkstemp creates 0600 files; give the result the mode a plain open() would (0666 minus the umask)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
