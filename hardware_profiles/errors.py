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
