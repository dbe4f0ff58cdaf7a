"""stdout and stderr as the CLI writes them: a failed write is the user's condition, not a meshplan bug.

`main()` runs every command inside `guarded_streams()`, which wraps sys.stdout and sys.stderr (whatever they
are at the time: a terminal, a file, a pipe, or a test's StringIO), so every writer (rich consoles, typer's
help, plain writes) fails the same way:

- a full disk or an I/O error (`meshplan plan > /dev/full`): `OutputError`, a UserError naming the stream and
  the OS error (one line on stderr, exit 2);
- a closed pipe (`meshplan plan | head -1`): `ClosedPipe`, which `main()` turns into a quiet exit with status
  141 (128 + SIGPIPE), what a shell reports for any Unix tool stopped by a closed pipe.

Either way the stream's file descriptor is first pointed at /dev/null, so the text still buffered in Python
is flushed there at exit instead of failing again ("Exception ignored ... BrokenPipeError", exit 120), the
way the Python documentation's note on SIGPIPE recommends. SIGPIPE itself stays ignored (Python's default):
restoring its default action would also kill `meshplan run` when a worker's pipe closes.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from planner.errors import UserError

CLOSED_PIPE_EXIT = 141
"""Exit status after a closed pipe: 128 + SIGPIPE (13), as a shell shows for `yes | head -1`."""


class ClosedPipe(BrokenPipeError):
    """The reader of stdout or stderr went away; exit quietly."""


class OutputError(UserError):
    """Writing stdout or stderr failed (full disk, I/O error)."""


def silence(stream: Any) -> None:
    """Point `stream`'s file descriptor at /dev/null (nothing when it has none, e.g. a test's StringIO)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


class GuardedStream:
    """A text stream whose write and flush failures become `ClosedPipe` or `OutputError`."""

    pipe_closed = False
    """Set once a write met a closed pipe: rich's own consoles (typer's help, wide tables) catch the
    ClosedPipe and exit 1 themselves, so `main()` asks this to report the closed pipe all the same."""

    def __init__(self, stream: Any, name: str) -> None:
        self._stream, self._name = stream, name

    def write(self, text: str) -> int:
        if self._stream is None:  # started with the stream closed (`meshplan plan >&-`)
            raise OutputError("cannot write (it is closed)", where=self._name, fix=f"run with {self._name} open")
        try:
            return self._stream.write(text)
        except OSError as exc:
            self._fail(exc)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self._stream is None:
            return
        try:
            self._stream.flush()
        except OSError as exc:
            self._fail(exc)

    def __getattr__(self, attr: str) -> Any:  # fileno, isatty, encoding, buffer, ...
        return getattr(self._stream, attr)

    def _fail(self, exc: OSError) -> None:
        silence(self._stream)
        if isinstance(exc, BrokenPipeError):
            self.pipe_closed = True
            raise ClosedPipe(exc.errno, exc.strerror) from None
        raise OutputError(f"cannot write ({exc.strerror or exc})", where=self._name,
                          fix=f"free space on the device {self._name} goes to, or redirect it elsewhere") from None


@contextlib.contextmanager
def guarded_streams() -> Iterator[list[GuardedStream]]:
    """sys.stdout and sys.stderr guarded for the duration (restored after, also for in-process callers);
    yields the guards (see `GuardedStream.pipe_closed`)."""
    saved = sys.stdout, sys.stderr
    guards = [GuardedStream(saved[0], "stdout"), GuardedStream(saved[1], "stderr")]
    sys.stdout, sys.stderr = guards  # type: ignore[assignment]
    try:
        yield guards
    finally:
        sys.stdout, sys.stderr = saved


def flush_stdout() -> None:
    """Flush stdout at the end of a command, so a failure is reported here and not at interpreter exit."""
    sys.stdout.flush()
