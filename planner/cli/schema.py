"""`meshplan schema`: the JSON Schema of plan files (`Plan.model_json_schema()`).

meshplan schema                         # to stdout
meshplan schema --out plan.schema.json

The committed copy, planner/schemas/plan.schema.json, is this output; tests/unit/test_schema.py fails when it
goes stale (regenerate with `meshplan schema --out planner/schemas/plan.schema.json --force`).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from planner.cli.app import app, err, out
from planner.cli.options import emit_json, user_errors

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "schemas" / "plan.schema.json"


def schema_text() -> str:
    """The plan JSON Schema as committed: 2-space indent, keys in pydantic's order, trailing newline."""
    from planner.plan import Plan

    return json.dumps(Plan.model_json_schema(), indent=2) + "\n"


@app.command("schema")
def schema_command(
    out_file: Path = typer.Option(None, "--out", metavar="FILE", help="Write the schema here instead of stdout."),
    json_out: str = typer.Option(None, "--json", metavar="FILE", help="Same as --out ('-' = stdout)."),
    force: bool = typer.Option(False, "--force", help="Overwrite the file if it exists."),
) -> None:
    """Print the JSON Schema of plan files."""
    from planner.io import check_targets, write_text_atomic

    with user_errors():
        check_targets(out_file, json_out, force=force)
    text = schema_text()
    if emit_json(text, json_out, force=force):
        return
    if out_file is None:
        if json_out is None:
            out.file.write(text)
        return
    with user_errors():
        write_text_atomic(out_file, text, force=force)
    err.print(f"wrote {out_file}", markup=False)
