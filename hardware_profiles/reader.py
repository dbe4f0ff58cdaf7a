"""The one reader of every JSON and YAML document meshplan takes in: bounded in size, nesting and values.

Profiles, model files, Hugging Face configs, plans, checkpoint markers, metrics lines and calibration
results all go through `read_json` / `read_yaml` (files) or `parse_json` / `parse_yaml` (text), so a hostile
or broken file fails the same way everywhere: an `InputFileError`, a `ValueError` whose message is one line
naming the file and what is wrong, which each caller turns into its own user error. Without these bounds:

- `json.loads` of 100,000 `[` raises RecursionError (a traceback), and PyYAML's recursive composer too;
- a YAML alias bomb ("billion laughs") builds a small graph that every consumer walks as a huge tree;
- `/dev/zero` or a multi-GB file given as a plan is read into memory whole;
- Python's json accepts `NaN`, `Infinity` and `-Infinity`, which are not JSON (RFC 8259 section 6) and which
  every number bound (x >= 0, x <= 1) lets through because comparisons with NaN are false.

It lives in `hardware_profiles`, the bottom layer, so the profile loader can use it without importing the
planner (data flows one way); the planner and the executor import it from here.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

MAX_BYTES = 16 * 2**20
"""Largest profile, model, config or marker file read (16 MiB): the biggest shipped file is a few KiB."""
MAX_PLAN_BYTES = 256 * 2**20
"""Largest plan file read (256 MiB): a plan lists every rank's placement, about 60 bytes each at indent 1, so a
plan for the largest cluster meshplan plans (hardware_profiles.cluster_schema.MAX_GPUS = 2**20 GPUs) is about
64 MiB; four times that leaves room for the rest of the document."""
MAX_DEPTH = 64
"""Deepest nesting of lists and mappings accepted (a plan nests 7 levels, a Hugging Face config about 4)."""
MAX_VALUES = 2**22 + 2**20
"""Most values (scalars, lists, mappings) one document may hold, counted with YAML aliases expanded: a plan
for 2**20 ranks holds about 4 per rank; more means an alias bomb or junk."""


class InputFileError(ValueError):
    """A JSON/YAML input that cannot be read or parsed, or exceeds a bound; `where` is the file (or the
    document's label), `problem` the one-line reason."""

    def __init__(self, problem: str, *, where: str) -> None:
        self.where, self.problem = where, " ".join(problem.split())
        super().__init__(f"{where}: {self.problem}")


def read_text(path: str | Path, *, max_bytes: int = MAX_BYTES, what: str = "file") -> str:
    """The UTF-8 text of `path`, read at most `max_bytes` (+1 to tell a larger file); folders, sockets and
    unreadable files are refused by name. A FIFO or character device is read like any Unix tool reads it
    (up to the bound)."""
    path = Path(path)
    where = str(path)
    try:
        info = path.stat()
    except OSError as exc:
        raise InputFileError(f"cannot read {what} ({exc.strerror or exc.__class__.__name__})", where=where) from None
    if stat.S_ISDIR(info.st_mode):
        raise InputFileError(f"is a folder, not a {what}", where=where)
    if stat.S_ISSOCK(info.st_mode):
        raise InputFileError(f"is a socket, not a {what}", where=where)
    if stat.S_ISREG(info.st_mode) and info.st_size > max_bytes:
        raise InputFileError(f"{info.st_size:,} bytes is larger than a {what} can be ({max_bytes:,} bytes)",
                             where=where)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOCTTY", 0))
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputFileError(f"cannot read {what} ({exc.strerror or exc.__class__.__name__})", where=where) from None
    if len(raw) > max_bytes:
        raise InputFileError(f"more than {max_bytes:,} bytes, larger than a {what} can be", where=where)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"not UTF-8 text (byte {exc.start})", where=where) from None


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (JSON has no NaN or Infinity; write a finite number)")


def parse_json(text: str, *, where: str) -> Any:
    """`text` as JSON, refusing NaN/Infinity and documents nested or sized beyond the bounds."""
    try:
        data = json.loads(text, parse_constant=_not_json)
    except json.JSONDecodeError as exc:
        raise InputFileError(f"invalid JSON at line {exc.lineno} column {exc.colno} ({exc.msg})", where=where) from None
    except RecursionError:
        raise InputFileError(f"nested deeper than {MAX_DEPTH} levels", where=where) from None
    except ValueError as exc:  # parse_constant: NaN, Infinity, -Infinity
        raise InputFileError(str(exc), where=where) from None
    check_shape(data, where=where)
    return data


_CSafeLoader = getattr(yaml, "CSafeLoader", None)
"""libyaml's parser with PyYAML's safe constructor (the same plain data as `yaml.safe_load`, about 10x
faster: every command reads several profiles at start), where PyYAML was built with libyaml."""


def parse_yaml(text: str, *, where: str) -> Any:
    """`text` as YAML (`yaml.safe_load`: plain data only), bounded like `parse_json`.

    Read with libyaml when available; a document it refuses is read again with PyYAML's own parser, whose
    answer (the data, or the error and its position) is the one reported, so errors read the same either way."""
    if _CSafeLoader is not None:
        try:
            data = yaml.load(text, Loader=_CSafeLoader)
        except (yaml.YAMLError, RecursionError):
            pass
        else:
            check_shape(data, where=where)
            return data
    try:
        data = yaml.safe_load(text)
    except RecursionError:
        raise InputFileError(f"nested deeper than {MAX_DEPTH} levels", where=where) from None
    except yaml.YAMLError as exc:
        raise InputFileError(f"cannot read YAML ({exc})", where=where) from None
    check_shape(data, where=where)
    return data


def read_json(path: str | Path, *, max_bytes: int = MAX_BYTES, what: str = "JSON file") -> Any:
    return parse_json(read_text(path, max_bytes=max_bytes, what=what), where=str(path))


def read_yaml(path: str | Path, *, max_bytes: int = MAX_BYTES, what: str = "YAML file") -> Any:
    return parse_yaml(read_text(path, max_bytes=max_bytes, what=what), where=str(path))


def check_shape(data: Any, *, where: str) -> None:
    """Refuse a parsed document nested deeper than MAX_DEPTH or holding more than MAX_VALUES values.

    Iterative (an explicit stack), so it cannot itself overflow; it stops at the first bound crossed, so a
    YAML alias bomb costs at most MAX_VALUES steps to refuse."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise InputFileError(f"holds more than {MAX_VALUES:,} values (a YAML alias bomb, or not a meshplan "
                                 "input)", where=where)
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > MAX_DEPTH:
            raise InputFileError(f"nested deeper than {MAX_DEPTH} levels", where=where)
        stack.extend((child, depth + 1) for child in children)
