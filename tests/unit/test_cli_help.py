"""`--help` never cuts an option name, at 80 columns or with no terminal (COLUMNS unset, output in a pipe).

typer's rich help squeezed the option tables to the terminal's 80 columns ("--num-microbatch…");
planner.cli.app draws help at least HELP_WIDTH wide. Run in a fresh process per environment, since typer
reads the width when the app is imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = """
import contextlib, io, json, sys
from planner.cli.main import _register_commands, main
from planner.cli.app import app
_register_commands()
import typer.main
group = typer.main.get_command(app)
out = {}
for name in [None, *sorted(group.commands)]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(([name] if name else []) + ["--help"])
    cmd = group.commands.get(name) if name else group
    flags = [o for p in cmd.params if not getattr(p, "hidden", False)
             for o in (*p.opts, *p.secondary_opts) if o.startswith("--")]
    out[name or ""] = {"text": buf.getvalue(), "flags": flags}
print(json.dumps(out))
"""


@pytest.mark.parametrize("columns", ["80", None], ids=["COLUMNS=80", "no terminal"])
def test_help_shows_every_option_name_whole(columns: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}
    if columns:
        env["COLUMNS"] = columns
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    helps = json.loads(proc.stdout)
    assert "run" in helps and "plan" in helps
    for name, h in helps.items():
        assert "…" not in h["text"], f"meshplan {name} --help cuts text:\n{h['text']}"
        for flag in h["flags"]:
            assert flag in h["text"], f"{flag} missing from meshplan {name} --help"
