"""User-facing errors.

Every failure caused by what a user wrote or asked for is a `UserError`: the CLI prints its one-line
message to stderr and exits with status 2, never a traceback. Anything else escaping to `main()` is a bug
in meshplan (exit 1).
"""

from __future__ import annotations

import re

_BREAKS = re.compile(r"\s*[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]+\s*")


def one_line(text: str) -> str:
    """`text` with every line break (and the blanks around it) turned into one space.

    Messages quote what the user wrote (file names, YAML parser output, bad values), which can hold line
    breaks; the CLI's contract is one line per error, so the break is removed where the message is built.
    """
    return _BREAKS.sub(" ", text).strip()


class UserError(ValueError):
    """A problem with user input, stated in one line: where (file/field/flag), what, and the fix."""

    def __init__(self, message: str, *, where: str | None = None, fix: str | None = None) -> None:
        parts = [f"{where}: {message}" if where else message]
        if fix:
            parts.append(f"fix: {fix}")
        super().__init__(one_line("; ".join(parts)))


class InfeasibleError(UserError):
    """No layout satisfies the request (memory, divisibility or pins); the message says what would fix it."""


def format_validation_error(exc: Exception, source: str, model: type | None = None) -> str:
    """One line per pydantic ValidationError, naming the file, the dotted field path, the bad value and the fix
    (`hardware_profiles.errors.format_validation_error`: one format for every file meshplan reads)."""
    from hardware_profiles.errors import format_validation_error as fmt

    return fmt(exc, source, model)
