"""The shared typer application and console helpers.

Each command lives in its own module under `planner.cli` and registers itself on `app`; `planner.cli.main`
imports them all. Data goes to stdout (`out`), messages and errors to stderr (`err`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console

HELP_WIDTH = 120
"""Columns `--help` is drawn in when the terminal is narrower or unknown (output into a pipe or file): at 80,
rich squeezes typer's option tables until names are cut ("--num-microbatch…", "--sequence-paral…"); 120
fits every option of every command (tests/unit/test_cli_help.py checks it). A wider terminal is used as is."""


def _help_width() -> int | None:
    """The columns to draw help in: the terminal's, at least HELP_WIDTH; None when the user set TERMINAL_WIDTH
    (typer reads that choice itself)."""
    import os
    import shutil

    if os.environ.get("TERMINAL_WIDTH"):
        return None
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() else shutil.get_terminal_size((0, 0)).columns
    return max(width, HELP_WIDTH)


class _HelpWidthOnImport(importlib.abc.MetaPathFinder):
    """Sets `typer.rich_utils.MAX_WIDTH` (the columns typer draws help and usage errors in; None: the
    terminal's, 80 in a pipe) when typer imports that module, which it does only to draw help or an error. A
    command that draws neither then never imports it, nor rich.markdown and markdown_it behind it (about 0.1 s
    of CPU at every start)."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if name != "typer.rich_utils":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module: object) -> None:
            run_module(module)
            width = _help_width()
            if width is not None:
                module.MAX_WIDTH = width  # type: ignore[attr-defined]

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _set_help_width() -> None:
    """Set typer's help width now if typer's rich module is loaded already, else once it is imported."""
    loaded = sys.modules.get("typer.rich_utils")
    if loaded is None:
        sys.meta_path.insert(0, _HelpWidthOnImport())
    elif (width := _help_width()) is not None:
        loaded.MAX_WIDTH = width


_set_help_width()

app = typer.Typer(
    name="meshplan",
    help="Plan, compare and run N-dimensional parallel layouts (DP x TP x PP x CP x EP) for large-model training.",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
)



@app.callback()
def _root() -> None:
    """Plan, compare and run N-dimensional parallel layouts for large-model training."""


# markup=False: tables and messages show names taken from user files (a model called "[/x]" or "[bold]"),
# which rich would otherwise parse as markup (and fail on, or restyle).
class _Console(Console):
    """rich's Console, except that a closed pipe is reported to `main()` (a quiet exit 141) instead of rich's
    own exit 1, which the CLI's exit codes reserve for meshplan bugs."""

    def on_broken_pipe(self) -> None:
        from planner.cli._streams import ClosedPipe

        self.quiet = True
        raise ClosedPipe(32, "Broken pipe")


out = _Console(highlight=False, emoji=False, soft_wrap=True, markup=False)
err = _Console(stderr=True, highlight=False, emoji=False, soft_wrap=True, markup=False)


def abort(message: str, code: int = 2) -> NoReturn:
    """Print one line to stderr and exit: 2 for user errors (the default), 1 for internal ones."""
    from planner.errors import one_line

    err.print(f"error: {one_line(message)}", markup=False)
    raise typer.Exit(code=code)


def write_json_output(text: str, target: str, *, force: bool = False) -> None:
    """Write a JSON document to `target` ('-' = stdout) atomically; refuse to overwrite without `force`."""
    from planner.io import write_text_atomic

    write_text_atomic(Path(target), text if text.endswith("\n") else text + "\n", force=force)
