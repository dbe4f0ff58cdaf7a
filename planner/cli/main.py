"""Entry point of the `meshplan` console script.

Imports every command module (each registers itself on the shared app), then runs typer. Only here are
unexpected exceptions caught: user errors (including command-line usage errors, which click would print as
a boxed multi-line block) exit 2 with one line on stderr; anything else is a meshplan bug and exits 1 with a
short traceback (locals only when MESHPLAN_DEBUG is set). stdout and stderr are guarded
(`planner.cli._streams`): a full disk is one line naming the stream (exit 2), a closed pipe a quiet exit 141.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import pkgutil
import sys
import threading

import typer

from planner.cli._streams import CLOSED_PIPE_EXIT, ClosedPipe, flush_stdout, guarded_streams
from planner.cli.app import app, err
from planner.errors import UserError, one_line

_SKIP = {"app", "main", "__init__"}
_USAGE_ERRORS: tuple[type[Exception], ...] = tuple(
    k for k in (getattr(typer, "TyperException", None), getattr(sys.modules.get("click"), "ClickException", None)) if k
)
"""Command-line usage errors: recent typers raise their own (from a vendored click), older ones click's."""


def _command_modules() -> list[str]:
    """The modules under planner.cli that register commands, sorted (the order `meshplan --help` lists them)."""
    import planner.cli as pkg

    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if m.name not in _SKIP and not m.name.startswith("_"))


def _register_commands(argv: list[str] | None = None) -> None:
    """Register the commands on `app`: only the one `argv` invokes where its module is named after it, else all.

    Each command lives in the module of its name (`meshplan plan` in planner.cli.plan). Importing every command
    module and letting typer build every command's click options costs ~50 ms of CPU at each start, which a
    command that runs alone (`meshplan plan ...`) never uses; its own help and errors read the same, since
    they name only that command. Anything else (no command, `--help`, an unknown or misspelt name) registers
    all of them, in module order, so listings and suggestions are complete."""
    modules = _command_modules()
    name = next((a for a in argv or () if not a.startswith("-")), None)
    if name in modules:
        importlib.import_module(f"planner.cli.{name}")
        if any(c.name == name for c in app.registered_commands):
            return
    for module in modules:
        importlib.import_module(f"planner.cli.{module}")
    # A process that ran one command first (tests, embedding programs) lists them in module order all the same.
    order = {f"planner.cli.{m}": i for i, m in enumerate(modules)}
    app.registered_commands.sort(key=lambda c: order.get(getattr(c.callback, "__module__", ""), len(order)))


GC_PAUSE_S = 5.0
"""How long a command runs before the cyclic garbage collector resumes (`_pause_gc`)."""


def _pause_gc(seconds: float = GC_PAUSE_S) -> None:
    """Pause the cyclic garbage collector for the first `seconds` of the command, then resume it.

    A typical command is a short process: importing typer, pydantic and numpy and searching 65,536 GPUs leave
    ~10^5 long-lived containers and no garbage cycles worth freeing, yet the collector ran ~200 times over
    them, 50-75 ms of a sub-second `meshplan plan` (measured with gc.callbacks). Commands that run longer
    (`run` waiting on its workers, large sweeps) get the collector back after `seconds`, so a long process
    holds at most a few seconds' worth of uncollected cycles. Nothing the command computes depends on it."""
    if not gc.isenabled():
        return  # someone (an embedding program, a debugger) chose the collector's state; leave it
    gc.disable()
    resume = threading.Timer(seconds, gc.enable)
    resume.daemon = True  # never keeps a finished command alive
    resume.start()


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the console script: this process is the command's own (callers with argv keep their GC)
        _pause_gc()
    try:
        return _command(argv)
    finally:
        if argv is None:
            _skip_exit_collection()


def _skip_exit_collection() -> None:
    """Let the interpreter's exit skip its final collector passes over what the command built.

    At exit Python runs the cyclic collector over every live container (the ~10^5 objects of typer, pydantic,
    numpy and the search's tables) to finalize garbage cycles: ~4 % of a whole `meshplan plan`'s
    instructions (callgrind), for memory the OS takes back anyway. `gc.freeze()` moves them into the
    permanent generation, which those passes never visit. atexit handlers (the coefficient disk cache's flush)
    and the flushing of stdout and stderr run as before; only `__del__` of objects left in garbage cycles is
    no longer called at exit, which Python never promises. Only the console script's own process does this."""
    gc.freeze()


def _command(argv: list[str] | None) -> int:
    _register_commands(sys.argv[1:] if argv is None else argv)
    with guarded_streams() as guards:  # a full disk or closed pipe on stdout/stderr: one line or a quiet exit
        code = _run(argv)
        try:
            flush_stdout()
        except ClosedPipe:
            return CLOSED_PIPE_EXIT
        except UserError as exc:
            _say(f"error: {one_line(str(exc))}")
            return 2
        if any(g.pipe_closed for g in guards):
            return CLOSED_PIPE_EXIT
    return code


def _run(argv: list[str] | None) -> int:
    try:
        code = app(args=argv, standalone_mode=False, prog_name="meshplan")
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    except ClosedPipe:  # `meshplan ... | head`: the reader has all it wanted
        return CLOSED_PIPE_EXIT
    except _USAGE_ERRORS as exc:  # unknown option, bad value, missing argument: always the user's
        _say(f"error: {one_line(_usage_message(exc, sys.argv[1:] if argv is None else argv))}")
        return 2
    except typer.Abort:
        _say("error: aborted")
        return 1
    except UserError as exc:
        _say(f"error: {one_line(str(exc))}")
        return 2
    except Exception as exc:  # profile and file-format errors are the user's too (one line, exit 2)
        message = _user_error_message(exc)
        if message is None:
            return _internal_error()
        _say(f"error: {one_line(message)}")
        return 2
    except KeyboardInterrupt:
        _say("interrupted")
        return 130
    if code == 130:  # typer turns Ctrl-C (KeyboardInterrupt) into a silent exit 130
        _say("interrupted")
    return code if isinstance(code, int) else 0


def _say(line: str) -> None:
    """One line to stderr; if stderr itself cannot be written there is nobody left to tell."""
    with contextlib.suppress(OSError, UserError):
        err.print(line, markup=False)


def _usage_message(exc: Exception, argv: list[str]) -> str:
    """click's message with the command, the value given and where to look:
    `meshplan plan: Invalid value for '--gpus' (given '0'): ...; fix: see 'meshplan plan --help'`."""
    message = exc.format_message().rstrip(".")  # type: ignore[attr-defined]
    param = getattr(exc, "param", None)
    flags = [o for o in getattr(param, "opts", ()) if o.startswith("-")]
    given = [a.split("=", 1)[1] for a in argv if "=" in a and a.split("=", 1)[0] in flags]
    given += [b for a, b in zip(argv, argv[1:]) if a in flags]
    if given:
        message = message.replace(":", f" (given {given[-1]!r}):", 1)
    ctx = getattr(exc, "ctx", None)
    if ctx is None:
        return message
    return f"{ctx.command_path}: {message}; fix: see '{ctx.command_path} --help'"


def _user_error_message(exc: Exception) -> str | None:
    """One line for a user-side error that is not a UserError (a hardware profile or a file the user wrote
    failing validation), None for anything else."""
    from pydantic import ValidationError

    from hardware_profiles import ProfileError
    from hardware_profiles.reader import InputFileError
    from planner.errors import format_validation_error

    if isinstance(exc, ProfileError | InputFileError):
        return str(exc)
    if isinstance(exc, ValidationError):
        return format_validation_error(exc, exc.title)
    return None


def _internal_error() -> int:
    """A meshplan bug: short traceback (locals only under MESHPLAN_DEBUG, which re-raises), exit 1."""
    if os.environ.get("MESHPLAN_DEBUG"):
        raise
    import traceback

    _say("internal error (a meshplan bug; rerun with MESHPLAN_DEBUG=1 and report it):")
    _say("".join(traceback.format_exc(limit=-3)))
    return 1


if __name__ == "__main__":
    sys.exit(main())
