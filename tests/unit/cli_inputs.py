"""Helpers for the bad-input, fuzz and output-file tests: valid baseline files, and the CLI run in-process.

`invoke(argv)` runs the real entry point (`planner.cli.main.main`) with stdout and stderr captured, exactly
as the `meshplan` console script would, and returns (exit code, stdout, stderr). `refusal(err)` checks the
contract for a refused input: exactly one non-empty stderr line, `error: ...`, no traceback.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import threading
from functools import cache
from pathlib import Path
from typing import Any

import yaml

import hardware_profiles as hp
from planner.cli.main import main

MODEL_PRESETS = Path(__file__).resolve().parents[2] / "planner" / "model" / "presets"
HF_CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"


def invoke(argv: list[str]) -> tuple[int, str, str]:
    """Run `meshplan ARGV` in this process; (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def refusal_lines(err: str) -> list[str]:
    """The non-empty stderr lines of a refused command."""
    return [line for line in err.splitlines() if line.strip()]


def check_refusal(code: int, err: str) -> str:
    """Assert the one-line refusal contract (exit 2, one `error:` line, no traceback); return the line."""
    lines = refusal_lines(err)
    assert code == 2, (code, err)
    assert "Traceback" not in err, err
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


def profile_data(kind: str, name: str) -> dict[str, Any]:
    """A built-in profile file ('gpus', 'links', 'clusters') as a plain dict."""
    return yaml.safe_load((hp.DATA_DIR / kind / f"{name}.yaml").read_text(encoding="utf-8"))


def preset_data(name: str) -> dict[str, Any]:
    """A bundled model preset as a plain dict of ModelSpec fields."""
    return yaml.safe_load((MODEL_PRESETS / f"{name}.yaml").read_text(encoding="utf-8"))


def hf_data(name: str) -> dict[str, Any]:
    """A Hugging Face config.json fixture as a dict."""
    return json.loads((HF_CONFIGS / f"{name}.json").read_text(encoding="utf-8"))


@cache
def tiny_plan_json(gpus: int = 4) -> str:
    """The best plan for the tiny model on `gpus` local CPU processes (8 x 64 tokens, fp32), as JSON."""
    from planner import search
    from planner.layout import Workload
    from planner.model import preset

    plan = search(preset("tiny"), hp.cluster("local-cpu", gpus=gpus), Workload(global_batch=8, seq_len=64, dtype="fp32"))[0]
    return plan.to_json()


def tiny_plan_data(gpus: int = 4) -> dict[str, Any]:
    return json.loads(tiny_plan_json(gpus))


def write(path: Path, content: str | bytes | dict | list) -> Path:
    """Write text, bytes, or a dict/list (YAML for .yaml/.yml, JSON otherwise) to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    elif path.suffix in (".yaml", ".yml"):
        path.write_text(yaml.safe_dump(content, sort_keys=False), encoding="utf-8")
    else:
        path.write_text(json.dumps(content), encoding="utf-8")
    return path


@cache
def pipeline_plan_json() -> str:
    """A pp=2 x tp=2 plan of the tiny model on 4 local CPU processes (1F1B, 4 micro-batches), as JSON."""
    from planner import evaluate
    from planner.layout import Layout, Workload
    from planner.model import preset

    layout = Layout(pp=2, tp=2, micro_batch=2, num_microbatches=4, sequence_parallel=True)
    plan = evaluate(preset("tiny"), hp.cluster("local-cpu", gpus=4), Workload(global_batch=8, seq_len=64, dtype="fp32"),
                    layout)
    return plan.to_json()


class FifoPeer:
    """A FIFO at `path` with a helper thread at its other end: it feeds `content` to every reader (an input
    FIFO) or, with `content` None, drains every writer (an output FIFO), until `close()`. A FIFO opened with
    nobody at the other end blocks, like any Unix tool's; the helper is that somebody."""

    def __init__(self, path: Path, content: bytes | None) -> None:
        os.mkfifo(path)
        self.path, self.content = path, content
        self.got: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                if self.content is None:
                    with open(self.path, "rb") as fh:
                        data = fh.read()
                    if not self._stop.is_set():
                        self.got.append(data)
                else:
                    with open(self.path, "wb") as fh:
                        fh.write(self.content)
            except OSError:
                pass

    def close(self) -> None:
        """Stop the helper: complete its pending open from this side (non-blocking) so it sees the stop."""
        self._stop.set()
        flags = os.O_NONBLOCK | (os.O_RDONLY if self.content is not None else os.O_WRONLY)
        with contextlib.suppress(OSError):
            os.close(os.open(self.path, flags))
        self._thread.join(timeout=5)


def special_file(path: Path, kind: str, content: str | bytes = b"") -> tuple[Path, FifoPeer | None]:
    """Make `path` a file of `kind` (fuzz_inputs.SPECIAL_FILES); returns the path to pass and a FIFO helper
    to close after the command (None for the other kinds)."""
    data = content.encode() if isinstance(content, str) else content
    if kind == "dir":
        path.mkdir()
    elif kind == "fifo":
        return path, FifoPeer(path, data if data else None)
    elif kind == "devnull":
        return Path(os.devnull), None
    elif kind == "chardev":
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's device numbers
        except PermissionError:
            return Path(os.devnull), None
    elif kind == "symlink":
        target = path.with_name(path.name + ".target")
        target.write_bytes(data)
        path.symlink_to(target)
    elif kind == "dangling":
        path.symlink_to(path.with_name(path.name + ".missing"))
    else:
        raise ValueError(kind)
    return path, None
