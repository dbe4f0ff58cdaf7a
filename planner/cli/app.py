"""The shared typer application and console helpers.

Each command lives in its own module under `planner.cli` and registers itself on `app`; `planner.cli.main`
imports them all. Data goes to stdout (`out`), messages and errors to stderr (`err`).
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console

HELP_WIDTH = 120
"""Columns `--help` is drawn in when the terminal is narrower or unknown (output into a pipe or file): at 80,
rich squeezes typer's option tables until names are cut ("--num-microbatch…", "--sequence-paral…"); 120
fits every option of every command (tests/unit/test_cli_help.py checks it). A wider terminal is used as is."""


def _set_help_width() -> None:
    """typer draws help in `typer.rich_utils.MAX_WIDTH` columns (None: the terminal's, 80 in a pipe)."""
    import os
    import shutil

    import typer.rich_utils

    if os.environ.get("TERMINAL_WIDTH"):  # the user's explicit choice, which typer reads itself
        return
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() else shutil.get_terminal_size((0, 0)).columns
    typer.rich_utils.MAX_WIDTH = max(width, HELP_WIDTH)


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
