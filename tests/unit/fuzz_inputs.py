"""Hypothesis strategies for the fuzz tests: mutated versions of valid input files, junk bytes, CLI values.

A mutation takes a valid document (a cluster, GPU, link or model YAML, an HF config.json, a plan JSON) and
applies one to three edits at random places: delete a field, replace a value with junk (wrong type, zero,
negative, huge, NaN, control characters, markup), scale a number, add an unknown field, or wrap a value in
another type. Most results are invalid in one specific way, which is what a loader must refuse cleanly;
some stay valid and go deeper (the CLI then plans or renders them).
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

SPECIAL_STRINGS = ["", " ", "cpu", "h100-sxm", "nvlink4", "loopback-gloo", "../x.yaml", "nosuch.yaml", "[/x]",
                   "[bold]b", "a\nb", "tab\there", "\x00", "\x1b[31m", "$\\frac$", "1e9", "-1", "null", "ünï", "🙂"]
SPECIAL_NUMBERS = [0, -1, 1, 2, 3, 7, 8, 64, 2**31, 2**53 + 1, 2**63, 10**30, -(10**12), 0.0, -0.5, 0.5, 1e-300,
                   1e308, float("inf"), float("-inf"), float("nan")]

junk_values = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(SPECIAL_NUMBERS),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(SPECIAL_STRINGS),
    st.text(max_size=12),
    st.lists(st.integers(min_value=-3, max_value=9), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(min_value=-2, max_value=5), max_size=2),
)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Paths to every value inside dicts and lists (depth first)."""
    if isinstance(node, dict):
        items = list(node.items())
    elif isinstance(node, list):
        items = list(enumerate(node))
    else:
        return []
    out: list[tuple] = []
    for key, value in items:
        out.append((*prefix, key))
        out += _paths(value, (*prefix, key))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    """`base` with one to three random edits (see the module docstring)."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = _paths(doc)
        if not paths:
            break
        path = paths[draw(st.integers(min_value=0, max_value=len(paths) - 1))]
        parent, key = _get(doc, path[:-1]), path[-1]
        op = draw(st.sampled_from(["delete", "replace", "replace", "scale", "add_key", "retype"]))
        value = parent[key]
        if op == "delete":
            del parent[key]
        elif op == "replace":
            parent[key] = draw(junk_values)
        elif op == "scale" and isinstance(value, int | float) and not isinstance(value, bool):
            factor = draw(st.sampled_from([0, -1, 2, 3, 1000, 10**6, 10**30]))
            parent[key] = value * factor if isinstance(value, int) else float(value) * factor
        elif op == "add_key" and isinstance(parent, dict):
            name = draw(st.one_of(st.sampled_from(["model_module", "extra", "gpus", "name", "nodez"]),
                                  st.text(min_size=1, max_size=8)))
            parent[name] = draw(junk_values)
        elif op == "retype":
            parent[key] = draw(st.sampled_from([str(value), [value], {"value": value}]))
    return doc


def junk_bytes(valid_text: str) -> st.SearchStrategy[bytes]:
    """Raw file contents: random bytes, a truncated valid file, or a valid file with bytes overwritten."""
    raw = valid_text.encode("utf-8")
    truncated = st.integers(min_value=0, max_value=len(raw)).map(lambda n: raw[:n])
    flipped = st.lists(st.tuples(st.integers(min_value=0, max_value=max(len(raw) - 1, 0)),
                                 st.integers(min_value=0, max_value=255)), min_size=1, max_size=4).map(
        lambda edits: _overwrite(raw, edits))
    return st.one_of(st.binary(max_size=300), truncated, flipped)


def _overwrite(raw: bytes, edits: list[tuple[int, int]]) -> bytes:
    data = bytearray(raw)
    for pos, byte in edits:
        if pos < len(data):
            data[pos] = byte
    return bytes(data)


INTS = st.sampled_from(["1", "2", "3", "4", "8", "0", "-1", "7", "16", "x", "1.5", "99999999999999999999"])
"""Values for integer options: valid, zero, negative, odd, not a number, huge."""


# File types and nesting ---------------------------------------------------------------------------------
SPECIAL_FILES = ("dir", "fifo", "devnull", "chardev", "symlink", "dangling")
"""Kinds of path a user may name instead of a regular file: a folder, a FIFO (fed or drained by a helper
thread), /dev/null, a character device node made with mknod (where permitted, else /dev/null), a symlink to
a regular file and a symlink to nothing."""


@st.composite
def deep_document(draw: st.DrawFn, suffix: str) -> str:
    """A JSON or YAML document nested 65 to 1,500 levels deep (the bound is 64; Python's recursion gives out
    near 1,000), of lists, mappings or both, in flow or block form."""
    depth = draw(st.integers(min_value=65, max_value=1500))
    kind = draw(st.sampled_from(["list", "map", "mixed"]))
    if suffix == ".yaml" and draw(st.booleans()) and depth <= 600:  # block style: indentation, not brackets
        return "".join(f"{'  ' * i}a:\n" for i in range(depth)) + f"{'  ' * depth}b: 1\n"
    opens = [("[" if kind == "list" or (kind == "mixed" and i % 2) else '{"a": ') for i in range(depth)]
    closes = ["]" if o == "[" else "}" for o in reversed(opens)]
    return "".join(opens) + "1" + "".join(closes)


BAD_NUMBERS = [float("nan"), float("inf"), float("-inf"), -1.0, -1e-9, -(10**12)]
"""Values no plan prediction may hold: every time, rate, byte count and fraction in it is finite and >= 0."""
