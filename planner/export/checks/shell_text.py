"""Reading back the shell scripts meshplan exports (standard library only: the framework checkers import it
in the framework's own interpreter, where meshplan may not be installed).

An exported script writes its arguments one option per line between `NAME=(` and `)`, shell-quoted, and a
config-registry module (TorchTitan) as a here-document.
"""

from __future__ import annotations

import shlex


def read_array(text: str, name: str) -> list[str]:
    """The arguments of the array `name` in an exported script."""
    lines = text.splitlines()
    start = lines.index(f"{name}=(")
    end = lines.index(")", start)
    return [tok for line in lines[start + 1:end] for tok in shlex.split(line)]


def read_heredoc(text: str, marker: str) -> str | None:
    """The body of the here-document ending in `marker`, or None when the script has none."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip().endswith(f"<<'{marker}'")), None)
    if start is None:
        return None
    end = next(i for i in range(start + 1, len(lines)) if lines[i].rstrip("\n") == marker)
    return "".join(lines[start + 1:end])


def strip_comments(text: str) -> str:
    """The text without its leading `#` header lines (an exported DeepSpeed config is hjson with a header)."""
    return "".join(line for line in text.splitlines(keepends=True) if not line.lstrip().startswith("#"))


def read_exports(text: str) -> dict[str, str]:
    """The `export NAME=VALUE` environment lines of a script (comments after the value dropped)."""
    env = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line and "$" not in line:
            name, value = line[len("export "):].split("=", 1)
            env[name.strip()] = shlex.split(value, comments=True)[0]
    return env
