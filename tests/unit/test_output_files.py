"""Every command that writes files: an existing file is kept unless --force (exit 2, one line naming the file
and the fix "--force"), --force replaces it, a command with several outputs writes all or none, writes are
atomic (no temporary file left behind) and a folder is never taken for a file.

Through the real entry point (`planner.cli.main.main`), one row per command and output option.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_inputs import check_refusal, invoke, tiny_plan_json, write

KEEP = "keep me\n"
TINY = ["--model", "tiny", "--cluster", "local-cpu", "--gpus", "4", "--seq-len", "64", "--global-batch", "8"]


@dataclass(frozen=True)
class Writer:
    """`meshplan ARGS` writing OUTPUTS (names in the temporary folder; a trailing '/' is a figure folder)."""

    id: str
    args: Callable[[Path], list[str]]
    outputs: tuple[str, ...]
    replace: bool = True
    """Also run with --force and check the files are replaced (skipped where that is slow: figures + search)."""


def _plan(tmp: Path) -> str:
    return str(write(tmp / "p.json", tiny_plan_json(4)))


WRITERS = [
    Writer("plan --json", lambda t: ["plan", *TINY, "--json", str(t / "a.json")], ("a.json",)),
    Writer("plan --json --figures", lambda t: ["plan", *TINY, "--json", str(t / "a.json"), "--figures", str(t / "figs")],
           ("a.json", "figs/mesh.png"), replace=False),
    Writer("evaluate --json", lambda t: ["evaluate", *TINY, "--json", str(t / "a.json")], ("a.json",)),
    Writer("compare --csv --json", lambda t: ["compare", *TINY, "--top", "2", "--csv", str(t / "a.csv"),
                                             "--json", str(t / "b.json")], ("a.csv", "b.json")),
    Writer("explain --json", lambda t: ["explain", _plan(t), "--json", str(t / "a.json")], ("a.json",)),
    Writer("export --out --json", lambda t: ["export", _plan(t), "--to", "torchrun", "--out", str(t / "a.sh"),
                                            "--json", str(t / "b.json")], ("a.sh", "b.json")),
    Writer("schema --out", lambda t: ["schema", "--out", str(t / "a.json")], ("a.json",)),
    Writer("model --json", lambda t: ["model", "tiny", "--json", str(t / "a.json")], ("a.json",)),
    Writer("topology --graphml --json", lambda t: ["topology", "dgx-h100", "--nodes", "1", "--graphml", str(t / "a.graphml"),
                                                  "--json", str(t / "b.json")], ("a.graphml", "b.json")),
    Writer("profiles --json", lambda t: ["profiles", "--json", str(t / "a.json")], ("a.json",)),
    Writer("detect --out --json", lambda t: ["detect", "--devices", "2", "--out", str(t / "a.yaml"), "--json", str(t / "b.json")],
           ("a.yaml", "b.json")),
    Writer("show --figures --json", lambda t: ["show", _plan(t), "--figures", str(t / "figs"), "--no-compare",
                                              "--json", str(t / "a.json")], ("figs/schedule.svg", "a.json")),
    Writer("replan --json", lambda t: ["replan", _plan(t), "--gpus", "2", "--json", str(t / "a.json")], ("a.json",)),
]


def _existing(tmp: Path, names: tuple[str, ...]) -> list[Path]:
    return [write(tmp / n, KEEP) for n in names]


@pytest.mark.parametrize("writer", WRITERS, ids=[w.id for w in WRITERS])
def test_existing_outputs_are_kept_without_force(tmp_path: Path, writer: Writer) -> None:
    paths = _existing(tmp_path, writer.outputs)
    code, _, err = invoke(writer.args(tmp_path))
    line = check_refusal(code, err)
    assert "file exists" in line and "--force" in line, line
    assert any(str(p) in line for p in paths), line
    assert all(p.read_text() == KEEP for p in paths)


@pytest.mark.parametrize("writer", [w for w in WRITERS if len(w.outputs) > 1], ids=lambda w: w.id)
def test_several_outputs_are_all_or_nothing(tmp_path: Path, writer: Writer) -> None:
    """Only the last output exists: the command refuses before writing the others."""
    last = _existing(tmp_path, writer.outputs[-1:])[0]
    code, _, err = invoke(writer.args(tmp_path))
    assert str(last) in check_refusal(code, err)
    for name in writer.outputs[:-1]:
        assert not (tmp_path / name).exists(), name


@pytest.mark.parametrize("writer", [w for w in WRITERS if w.replace], ids=lambda w: w.id)
def test_force_replaces_atomically(tmp_path: Path, writer: Writer) -> None:
    paths = _existing(tmp_path, writer.outputs)
    code, _, err = invoke([*writer.args(tmp_path), "--force"])
    assert code == 0, err
    for p in paths:
        data = p.read_bytes()
        assert data and data != KEEP.encode(), p
    leftovers = [p for p in tmp_path.rglob("*.tmp")]
    assert leftovers == [], leftovers


def test_a_folder_is_not_a_file(tmp_path: Path) -> None:
    (tmp_path / "a.json").mkdir()
    for args in (["plan", *TINY, "--json", str(tmp_path / "a.json"), "--force"],
                 ["schema", "--out", str(tmp_path / "a.json"), "--force"]):
        line = check_refusal(*invoke(args)[::2])
        assert "is a folder" in line and str(tmp_path / "a.json") in line


def test_run_refuses_an_existing_summary_before_launching(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from planner.cli import run as run_cli

    def launch(*a: object, **k: object) -> None:
        raise AssertionError("torchrun must not start")

    monkeypatch.setattr(run_cli, "_launch", launch)
    summary = write(tmp_path / "s.json", KEEP)
    code, _, err = invoke(["run", _plan(tmp_path), "--run-dir", str(tmp_path / "r"), "--json", str(summary)])
    assert "--force" in check_refusal(code, err)
    assert summary.read_text() == KEEP


def test_atomic_write_keeps_the_old_file_when_interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure between writing the temporary file and renaming it leaves the old file and no temporary."""
    import os

    from planner import io

    target = write(tmp_path / "plan.json", KEEP)

    def fail(*a: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(io.UserError, match="cannot write .No space left on device."):
        io.write_text_atomic(target, "new", force=True)
    assert target.read_text() == KEEP
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]
