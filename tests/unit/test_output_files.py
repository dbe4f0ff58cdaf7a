"""Every command that writes files: an existing file is kept unless --force (exit 2, one line naming the file
and the fix "--force"), --force replaces it, a command with several outputs writes all or none, writes are
atomic (no temporary file left behind) and a folder is never taken for a file. Special files (device nodes,
FIFOs, /dev/null) are written through and stay what they are; symlinks are followed, never replaced; a
missing output folder is refused, not created; two options naming one file are refused before any write.

Through the real entry point (`planner.cli.main.main`), one row per command and output option.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_inputs import check_refusal, invoke, tiny_plan_json, write

from planner.cli.schema import schema_text

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


# Special files, symlinks, missing folders, two outputs naming one file ---------------------------------
JSON_WRITERS = [w for w in WRITERS if w.outputs[-1].endswith(".json") and "--json" in w.id]
"""Writers whose last output is a --json file (the option every command shares)."""


def _json_args(writer: Writer, tmp: Path, target: str) -> list[str]:
    """The writer's arguments with its --json file replaced by `target`."""
    args = writer.args(tmp)
    args[args.index("--json") + 1] = target
    return args


def _read_fifo(path: Path) -> tuple[threading.Thread, list[bytes]]:
    got: list[bytes] = []

    def read() -> None:
        with open(path, "rb") as fh:
            got.append(fh.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader, got


def test_a_fifo_is_written_through_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    reader, got = _read_fifo(fifo)
    code, _, err = invoke(["schema", "--json", str(fifo), "--force"])
    reader.join(timeout=30)
    assert code == 0, err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced by a file"
    assert json.loads(got[0])["title"] == "Plan"


def test_a_character_device_is_written_through_not_replaced(tmp_path: Path) -> None:
    """`mknod n c 1 3` is /dev/null's device: --force must write into it, not turn it into a regular file."""
    node = tmp_path / "n"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        node = Path("/dev/null")  # without CAP_MKNOD: the real /dev/null, which the write must leave alone
    for args in (["plan", *TINY, "--json", str(node), "--force"], ["schema", "--out", str(node), "--force"],
                 ["compare", *TINY, "--top", "1", "--csv", str(node), "--json", str(node)]):
        code, _, err = invoke(args)
        assert code == 0, err
        assert stat.S_ISCHR(os.lstat(node).st_mode), f"{args[0]} replaced the device node"
    assert Path("/dev/null").read_bytes() == b""


def test_dev_null_needs_no_force() -> None:
    code, out, err = invoke(["plan", *TINY, "--json", "/dev/null"])
    assert code == 0 and "wrote /dev/null" in err, err
    assert "plan: tiny" in out  # not stdout: the tables are still shown


def test_a_block_device_and_a_socket_are_refused(tmp_path: Path) -> None:
    sock_path = tmp_path / "s.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(sock_path))
    try:
        line = check_refusal(*invoke(["schema", "--out", str(sock_path), "--force"])[::2])
        assert "is a socket" in line and str(sock_path) in line
    finally:
        sock.close()
    disk = tmp_path / "disk"
    try:
        os.mknod(disk, 0o600 | stat.S_IFBLK, os.makedev(7, 0))  # loop0: refused before it is opened
    except PermissionError:
        pytest.skip("creating a block device node needs CAP_MKNOD (CI runs as root and has it)")
    line = check_refusal(*invoke(["schema", "--out", str(disk), "--force"])[::2])
    assert "block device" in line and str(disk) in line


@pytest.mark.parametrize("writer", JSON_WRITERS, ids=lambda w: w.id)
def test_a_symlink_is_followed_never_replaced(tmp_path: Path, writer: Writer) -> None:
    real = write(tmp_path / "real" / "target.json", KEEP)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    line = check_refusal(*invoke(_json_args(writer, tmp_path, str(link)))[::2])  # the file it names exists
    assert "file exists" in line and real.read_text() == KEEP
    code, _, err = invoke([*_json_args(writer, tmp_path, str(link)), "--force"])
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(real), "the link was replaced"
    assert real.read_text() != KEEP
    assert [p.name for p in real.parent.iterdir()] == ["target.json"]  # the temporary file went in its folder


def test_a_dangling_symlink_creates_the_file_it_names(tmp_path: Path) -> None:
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "made.json")
    assert invoke(["schema", "--out", str(link)])[0] == 0
    assert link.is_symlink() and (tmp_path / "made.json").read_text() == schema_text()


@pytest.mark.parametrize("writer", JSON_WRITERS, ids=lambda w: w.id)
def test_a_missing_output_folder_is_refused_not_created(tmp_path: Path, writer: Writer) -> None:
    target = tmp_path / "no" / "such" / "out.json"
    line = check_refusal(*invoke(_json_args(writer, tmp_path, str(target)))[::2])
    assert f"folder {tmp_path / 'no' / 'such'} does not exist" in line, line
    assert not (tmp_path / "no").exists()


def test_figures_create_their_folder_but_not_its_parents(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    line = check_refusal(*invoke(["show", plan, "--figures", str(tmp_path / "a" / "figs"), "--no-compare"])[::2])
    assert f"folder {tmp_path / 'a'} does not exist" in line and not (tmp_path / "a").exists()
    code, _, err = invoke(["show", plan, "--figures", str(tmp_path / "figs"), "--no-compare"])
    assert code == 0 and (tmp_path / "figs" / "mesh.png").is_file(), err


SAME_FILE = [
    ("compare --csv X --json X", lambda t: ["compare", *TINY, "--top", "2", "--csv", str(t / "out.x"),
                                           "--json", str(t / "out.x")]),
    ("export --out X --json X", lambda t: ["export", _plan(t), "--to", "torchrun", "--out", str(t / "out.x"),
                                          "--json", str(t / "out.x")]),
    ("topology --graphml X --json X", lambda t: ["topology", "dgx-h100", "--nodes", "1", "--graphml", str(t / "out.x"),
                                                "--json", str(t / "out.x")]),
    ("detect --out X --json X", lambda t: ["detect", "--devices", "2", "--out", str(t / "out.x"), "--json",
                                          str(t / "out.x")]),
    ("schema --out X --json X", lambda t: ["schema", "--out", str(t / "out.x"), "--json", str(t / "out.x")]),
    ("compare --csv - --json -", lambda t: ["compare", *TINY, "--top", "2", "--csv", "-", "--json", "-"]),
    ("the same file by two names", lambda t: ["compare", *TINY, "--top", "2", "--csv", str(t / "out.x"),
                                              "--json", str(t / "." / "out.x")]),
]


@pytest.mark.parametrize("case", SAME_FILE, ids=[c[0] for c in SAME_FILE])
def test_two_outputs_naming_one_file_are_refused_before_writing(tmp_path: Path, case) -> None:  # noqa: ANN001
    code, out, err = invoke(case[1](tmp_path))
    line = check_refusal(code, err)
    assert "two outputs" in line, line
    assert not (tmp_path / "out.x").exists() and out == ""


def test_a_figure_file_named_by_json_too_is_refused(tmp_path: Path) -> None:
    (tmp_path / "figs").mkdir()
    plan = _plan(tmp_path)
    target = tmp_path / "figs" / "mesh.png"
    line = check_refusal(*invoke(["show", plan, "--figures", str(tmp_path / "figs"), "--no-compare",
                                  "--json", str(target)])[::2])
    assert "two outputs" in line and not target.exists()


def test_calibrate_checks_its_outputs_before_measuring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The three profile files and --json are checked before a measurement that takes minutes, not after."""
    from planner.cli import calibrate as calibrate_cli

    def measure(*a: object, **k: object) -> None:
        raise AssertionError("nothing may be measured")

    monkeypatch.setattr(calibrate_cli, "run_calibration", measure)
    line = check_refusal(*invoke(["calibrate", "--out", str(tmp_path / "no" / "p.yaml")])[::2])
    assert f"folder {tmp_path / 'no'} does not exist" in line
    line = check_refusal(*invoke(["calibrate", "--out", str(tmp_path / "p.yaml"), "--json",
                                  str(tmp_path / "p.gpu.yaml")])[::2])
    assert "two outputs" in line
    write(tmp_path / "p.link.yaml", KEEP)
    line = check_refusal(*invoke(["calibrate", "--out", str(tmp_path / "p.yaml")])[::2])
    assert "p.link.yaml: file exists" in line and "--force" in line
