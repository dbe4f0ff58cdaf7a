"""Safe file output: every file meshplan writes goes through here, and nothing a user has is lost.

What an output path names decides how it is written (`classify`):

- '-' (and /dev/stdout, /dev/fd/1, /proc/self/fd/1): this process's stdout.
- A regular file, or a new name in an existing folder: written atomically (temporary file in the same folder,
  fsync, rename), so an interrupted write leaves the old file or none, never half of one. An existing file
  is kept unless --force.
- A symlink: followed. The file it points to is replaced atomically in ITS folder; the link stays a link. A
  link to a device or FIFO is written through like one.
- A FIFO or character device (/dev/null, a terminal, /dev/stderr, /dev/fd/N): written through, the way any
  Unix tool writes to it, never replaced; --force is not needed (nothing is overwritten).
- A folder, socket or block device (a disk: a plan written onto it would destroy its file system): refused.
- A name in a folder that does not exist: refused, naming the folder (meshplan creates no folders for
  files; `--figures DIR` and `--run-dir DIR` create DIR itself, not its parents).

Commands with several outputs call `check_targets` with all of them before any work: every output is
checked (and two options naming the same file are refused) before the first is written. A failed write is
one line naming the output and the OS error (ENOSPC, EIO, ...), a `UserError` (exit 2).
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from planner.errors import UserError

STDOUT = "-"
_FORCE_FIX = "choose another path or pass --force to overwrite"
_STDOUT_ALIASES = ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")
_FD_DIRS = ("/dev/fd/", "/proc/")


@dataclass(frozen=True)
class Target:
    """Where an output goes. kind: 'stdout', 'stream' (write through), 'file' (atomic replace or create)."""

    given: str
    kind: str
    path: Path | None = None
    """The file written: for 'file', the symlink's target when `given` is a link."""
    exists: bool = False
    identity: tuple | str = ""
    """Equal for two names of the same output (device and inode, or the resolved path of a new file)."""


def _through_fd_link(path: Path) -> bool:
    """True when `path`, or a symlink on the way to its file, is a /dev/fd or /proc/.../fd entry: the name
    of an already open file (/dev/stdout, /dev/stderr, bash's process substitution), written through."""
    current = Path(os.path.abspath(path))
    for _ in range(40):  # the kernel's own limit on symlink hops
        if str(current).startswith(_FD_DIRS):
            return True
        if not current.is_symlink():
            return False
        current = Path(os.path.abspath(current.parent / os.readlink(current)))
    return False


def is_stdout(target: str | Path | None) -> bool:
    """True when the output `target` names is this process's stdout ('-', /dev/stdout, ...)."""
    if target is None:
        return False
    try:
        return classify(target).kind == "stdout"
    except UserError:
        return False


def classify(target: str | Path) -> Target:
    """What writing to `target` means (see the module docstring); UserError for what cannot be written."""
    given = str(target)
    if given == STDOUT or given in _STDOUT_ALIASES:
        return Target(given, "stdout", identity="stdout")
    path = Path(given)
    try:
        info = os.stat(path)  # follows symlinks
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise UserError(f"cannot use as an output ({exc.strerror})", where=given, fix="choose another path") from None
    if info is None:
        real = Path(os.path.realpath(path))  # a dangling symlink: the file it names is created
        folder = real.parent
        if folder.exists() and not folder.is_dir():
            raise UserError(f"{folder} is not a folder", where=given, fix="give a path inside a folder")
        if not folder.is_dir():
            raise UserError(f"folder {folder} does not exist", where=given,
                            fix=f"create it first (mkdir -p {folder}) or choose an existing folder")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise UserError(f"cannot write in folder {folder} (permission denied)", where=given,
                            fix="choose a folder you can write")
        return Target(given, "file", real, exists=False, identity=str(real))
    mode = info.st_mode
    if stat.S_ISDIR(mode):
        raise UserError("is a folder, not a file", where=given, fix="give a file path")
    if stat.S_ISSOCK(mode):
        raise UserError("is a socket, not a file", where=given, fix="give a file path")
    if stat.S_ISBLK(mode):
        raise UserError("is a block device (a disk); writing a file onto it would destroy its contents",
                        where=given, fix="give a file path")
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or _through_fd_link(path):
        if _is_our_stdout(info):
            return Target(given, "stdout", identity="stdout")
        return Target(given, "stream", path, exists=True, identity=(info.st_dev, info.st_ino))
    if not stat.S_ISREG(mode):
        raise UserError("is not a regular file", where=given, fix="give a file path")
    real = Path(os.path.realpath(path))
    if not os.access(real.parent, os.W_OK | os.X_OK):
        raise UserError(f"cannot write in folder {real.parent} (permission denied)", where=given,
                        fix="choose a folder you can write")
    return Target(given, "file", real, exists=True, identity=(info.st_dev, info.st_ino))


def _is_our_stdout(info: os.stat_result) -> bool:
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # captured (tests) or closed
        return False
    try:
        return os.path.samestat(info, os.fstat(fd))
    except OSError:
        return False


def check_targets(*targets: str | Path | None, force: bool = False) -> list[Target]:
    """Check every output of a command before anything is written (None: option not given).

    Refuses (UserError) a folder, socket or block device, a name in a missing folder, an existing regular
    file without `force`, and two outputs naming the same file (or both stdout): writing the second would
    overwrite the first. Character devices such as /dev/null may be named twice (nothing is kept there).
    """
    checked: list[Target] = []
    for target in targets:
        if target is None:
            continue
        t = classify(target)
        if t.kind == "file" and t.exists and not force:
            raise UserError("file exists", where=t.given, fix=_FORCE_FIX)
        twin = next((c for c in checked if c.identity == t.identity), None)
        if twin is not None and not _is_char_device(t):
            same = "both go to stdout" if t.kind == "stdout" else f"names the same file as {twin.given}"
            raise UserError(f"two outputs: {same}", where=t.given, fix="give each output its own file")
        checked.append(t)
    return checked


def _is_char_device(t: Target) -> bool:
    try:
        return t.kind == "stream" and t.path is not None and stat.S_ISCHR(os.stat(t.path).st_mode)
    except OSError:
        return False


def write_text_atomic(path: str | Path, text: str, *, force: bool = False) -> None:
    """Write `text` (UTF-8) to the output `path` names (see the module docstring).

    A regular file is replaced through a temporary file in its folder and a rename: an interrupted write
    leaves either the old file or none, never a truncated one. An existing file is kept unless `force`,
    because plans and profiles are user work."""
    write_bytes_atomic(path, text.encode("utf-8"), force=force)


def write_bytes_atomic(path: str | Path, data: bytes, *, force: bool = False) -> None:
    """Binary twin of `write_text_atomic` (figures, GraphML)."""
    (target,) = check_targets(path, force=force)
    if target.kind == "stdout":
        write_stdout(data)
    elif target.kind == "stream":
        _write_through(target, data)
    else:
        _replace(target, data)


def write_stdout(data: bytes | str) -> None:
    """Write to this process's stdout and flush. A failed write raises (the CLI's stream guard turns it
    into one line naming stdout, or a quiet exit for a closed pipe)."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    sys.stdout.write(text)
    sys.stdout.flush()


def _write_through(target: Target, data: bytes) -> None:
    """Open the existing device/FIFO/open-file name without creating or truncating it, write, flush."""
    try:
        fd = os.open(target.given, os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOCTTY", 0))
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
    except OSError as exc:
        raise UserError(f"cannot write ({exc.strerror or exc})", where=target.given,
                        fix="check the device or pipe, or write to a file") from None


def _replace(target: Target, data: bytes) -> None:
    path = target.path
    assert path is not None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise UserError(f"cannot write ({exc.strerror or exc})", where=target.given,
                        fix="choose a path in a folder you can write") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        _keep_mode(tmp, path if target.exists else None)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise UserError(f"cannot write ({exc.strerror or exc})", where=target.given,
                        fix="choose a path in a folder you can write, with free space") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def make_output_folder(folder: str | Path, *, option: str) -> Path:
    """Create the folder an option names (`--figures DIR`, `--run-dir DIR`), not its parents: a typo in the
    parent path is refused by name instead of silently creating a tree elsewhere."""
    path = Path(folder)
    if path.is_dir():
        return path
    if path.exists():
        raise UserError("not a folder", where=f"{option} {folder}", fix="give a folder path")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UserError(f"folder {parent} does not exist", where=f"{option} {folder}",
                        fix=f"create it first (mkdir -p {parent}) or choose an existing folder")
    try:
        path.mkdir()
    except FileExistsError:
        pass
    except OSError as exc:
        raise UserError(f"cannot create the folder ({exc.strerror})", where=f"{option} {folder}",
                        fix="choose a folder you can write") from None
    return path


def check_output_folder(folder: str | Path, *, option: str) -> None:
    """`make_output_folder`'s checks without creating anything (run before a command's work)."""
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise UserError("not a folder", where=f"{option} {folder}", fix="give a folder path")
    parent = path.parent if str(path.parent) else Path(".")
    if not path.exists() and not parent.is_dir():
        raise UserError(f"folder {parent} does not exist", where=f"{option} {folder}",
                        fix=f"create it first (mkdir -p {parent}) or choose an existing folder")


def _keep_mode(tmp: str, replaced: Path | None) -> None:
    """mkstemp creates 0600 files: give the result the replaced file's mode, or for a new file the mode a
    plain open() would (0666 minus the umask)."""
    if replaced is not None:
        try:
            os.chmod(tmp, stat.S_IMODE(os.stat(replaced).st_mode))
            return
        except OSError:
            pass
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
