"""User-facing errors.

Every failure caused by what a user wrote or asked for is a `UserError`: the CLI prints its one-line
message to stderr and exits with status 2, never a traceback. Anything else escaping to `main()` is a bug
in meshplan (exit 1).
"""

from __future__ import annotations


class UserError(ValueError):
    """A problem with user input, stated in one line: where (file/field/flag), what, and the fix."""

    def __init__(self, message: str, *, where: str | None = None, fix: str | None = None) -> None:
        parts = [f"{where}: {message}" if where else message]
        if fix:
            parts.append(f"fix: {fix}")
        super().__init__("; ".join(parts))


class InfeasibleError(UserError):
    """No layout satisfies the request (memory, divisibility or pins); the message says what would fix it."""


def format_validation_error(exc: Exception, source: str) -> str:
    """One line per pydantic ValidationError, naming the file, the dotted field path and the bad value."""
    errors = getattr(exc, "errors", None)
    if errors is None:
        return f"{source}: {exc}"
    items = []
    for err in exc.errors():  # type: ignore[attr-defined]
        loc = ".".join(str(p) for p in err.get("loc", ())) or "<root>"
        bad = err.get("input")
        bad_text = repr(bad) if not isinstance(bad, dict) else "{...}"
        if len(bad_text) > 60:
            bad_text = bad_text[:57] + "..."
        items.append(f"field '{loc}' = {bad_text}: {err.get('msg')}")
    return f"{source}: " + "; ".join(items)
