"""The one error type of `hardware_profiles`.

`hardware_profiles` knows nothing of the planner (one direction only), so it defines its own error. It is a
`ValueError` whose message is a single line naming the file, the field, the bad value and what is allowed;
the meshplan CLI treats it as a user error (exit 2).
"""

from __future__ import annotations


class ProfileError(ValueError):
    """A hardware profile (name or file) that cannot be used, stated in one line."""

    def __init__(self, message: str, *, where: str | None = None, allowed: str | None = None) -> None:
        parts = [f"{where}: {message}" if where else message]
        if allowed:
            parts.append(f"allowed: {allowed}")
        super().__init__("; ".join(" ".join(p.split()) for p in parts))


def format_validation_error(exc: Exception, source: str, model: type | None = None, *, limit: int = 3) -> str:
    """One line for a pydantic `ValidationError` of file `source`: each failure's dotted field path, the bad
    value and what to do (`model`, the class validated, lets an unknown field list the allowed ones).

    Shared by every loader (profiles here, model specs and plans in the planner), so all files read alike.
    """
    errors = exc.errors() if hasattr(exc, "errors") else None  # type: ignore[attr-defined]
    if not errors:
        return f"{source}: {' '.join(str(exc).split())}"
    items = []
    for e in errors[:limit]:
        loc = tuple(e.get("loc", ()))
        path = ".".join(str(p) for p in loc) or "<root>"
        kind = e.get("type")
        if kind == "missing":
            items.append(f"field '{path}' is missing; fix: add it")
            continue
        bad = e.get("input")
        text = "{...}" if isinstance(bad, dict) else repr(bad)
        text = text if len(text) <= 60 else text[:57] + "..."
        if kind == "extra_forbidden":
            allowed = _fields_at(model, loc[:-1]) if model is not None else None
            fix = "remove it or correct its spelling" + (f" (fields here: {', '.join(allowed)})" if allowed else "")
            items.append(f"field '{path}' = {text}: Extra inputs are not permitted (unknown field); fix: {fix}")
            continue
        msg = " ".join(str(e.get("msg", "")).removeprefix("Value error, ").split())
        if not loc and kind in ("dict_type", "model_type", "model_attributes_type"):
            items.append(f"the top level is {type(bad).__name__}, not a mapping of fields; fix: write the file as a "
                         "mapping (field: value, ...)")
            continue
        items.append(f"field '{path}' = {text}: {msg}" + ("" if ";" in msg else f"; fix: {_fix_for(kind, msg)}"))
    more = f" (and {len(errors) - limit} more)" if len(errors) > limit else ""
    return f"{source}: " + "; ".join(items) + more


def _fix_for(kind: str | None, msg: str) -> str:
    """What to write instead, from pydantic's "Input should be ..." message."""
    expected = msg.removeprefix("Input should be ").split(", unable to")[0]
    if expected == msg:
        return "correct this value"
    if kind in ("literal_error", "enum"):
        return f"use {expected}"
    if expected.startswith(("a ", "an ", "at ", "finite")):
        return f"use {expected}"
    return f"use a value {expected}"


def _fields_at(model: type, loc: tuple) -> list[str] | None:
    """Field names of the pydantic model found at `loc` inside `model` (None when the path leaves models)."""
    import typing

    from pydantic import BaseModel

    def is_model(t: object) -> bool:
        return isinstance(t, type) and issubclass(t, BaseModel)

    def unwrap(t: object) -> object:  # Optional[X] -> X
        args = [a for a in typing.get_args(t) if a is not type(None)]
        return args[0] if type(None) in typing.get_args(t) and len(args) == 1 else t

    ann: object = model
    for part in loc:
        ann = unwrap(ann)
        if is_model(ann):
            field = ann.model_fields.get(part) if isinstance(part, str) else None  # type: ignore[union-attr]
            if field is None:
                return None
            ann = field.annotation
        else:  # list/tuple index or dict key: step to the element type
            args = typing.get_args(ann)
            if not args:
                return None
            ann = args[-1]
    ann = unwrap(ann)
    return list(ann.model_fields) if is_model(ann) else None  # type: ignore[union-attr]
