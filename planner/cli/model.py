"""`meshplan model NAME|PATH`: show a model's shape, parameter counts and FLOPs per token.

meshplan model llama3-8b
meshplan model path/to/config.json --seq-len 4096 --json model.json
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from planner.cli.app import abort, app, out
from planner.cli.options import emit_json
from planner.errors import UserError
from planner.layout.names import RECOMPUTE_NAMES

if TYPE_CHECKING:
    from planner.model.report import ModelReport


def _n(value: int) -> str:
    """Exact value with a short human form: 8,030,261,248 (8.03 B)."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= scale:
            return f"{value:,} ({value / scale:.3g} {unit})"
    return f"{value:,}"


@app.command("model")
def model_command(
    name: str = typer.Argument(
        ..., metavar="NAME|PATH", help="Preset name, HF config.json or meshplan model YAML."
    ),
    json_out: str = typer.Option(
        None, "--json", metavar="FILE", help="Write spec + counts as JSON ('-' = stdout)."
    ),
    seq_len: int = typer.Option(
        None, "--seq-len", min=1, help="Sequence length for FLOPs (default: max_seq_len)."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite the --json file if it exists."),
) -> None:
    """Show a model's shape, parameter counts and FLOPs per token (forward and training)."""
    from planner.io import check_targets
    from planner.model import load_model
    from planner.model.report import build_report

    try:
        check_targets(json_out, force=force)
        spec = load_model(name)
        report = build_report(spec, seq_len)
    except UserError as exc:
        abort(str(exc))
    except ValueError as exc:  # e.g. --seq-len beyond a learned position table
        abort(f"--seq-len: {exc}")
    if emit_json(report.model_dump_json(indent=2), json_out, force=force):
        return
    _render(report)


def _render(report: ModelReport) -> None:
    from rich.table import Table

    spec = report.spec
    shape = Table(title=f"model {spec.name}", show_header=False)
    shape.add_column("field")
    shape.add_column("value", overflow="fold")
    for key, value in spec.model_dump().items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        shape.add_row(key, str(value))
    out.print(shape)

    p = report.params
    params = Table(title="parameters", show_header=False)
    params.add_column("part")
    params.add_column("count", justify="right")
    for label, value in (
        ("total", p.total),
        ("active per token", p.active),
        ("active, no embedding tables", p.active_without_embedding),
        ("embedding", p.embedding),
        ("decoder layers", p.layers),
        ("routed experts", p.routed_experts),
        ("final norm + LM head", p.output),
        ("LM head (V x h)", p.lm_head),
    ):
        params.add_row(label, _n(value))
    out.print(params)

    flops = Table(title=f"FLOP per token at seq_len {report.seq_len}")
    flops.add_column("quantity")
    flops.add_column("causal attention", justify="right")
    flops.add_column("full attention (Megatron)", justify="right")
    c, f = report.flops_causal, report.flops_full_attention
    flops.add_row("forward", _n(c.forward_flops), _n(f.forward_flops))
    flops.add_row(
        "training, model (3 x forward)",
        _n(c.training["none"].model_flops),
        _n(f.training["none"].model_flops),
    )
    for policy in RECOMPUTE_NAMES:
        flops.add_row(
            f"training, hardware (recompute {policy})",
            _n(c.training[policy].hardware_flops),
            _n(f.training[policy].hardware_flops),
        )
    out.print(flops)
