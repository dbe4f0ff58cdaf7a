"""`meshplan sweep`: the best layout for every combination of models, clusters, sizes, batches and sequence
lengths, in one table: how many GPUs to rent, and of which kind.

meshplan sweep --nodes 8,16,32,64,128
meshplan sweep --cluster dgx-h100,gb200-nvl72 --nodes 16,32,64 --tokens 15e12 --price-per-gpu-hour 2.5
meshplan sweep --model llama3-8b,llama3-70b --gpus 64,128,256 --seq-len 4096,8192 --csv sweep.csv
meshplan sweep --nodes 8,16,32 --figures figs/ --json -

Every list flag takes comma-separated values; each combination is searched exactly like `meshplan plan`
(same defaults and pins; the pins apply to every point). Rows where nothing fits say why in the note column.
`--tokens` adds the time to train that many tokens and the GPU-hours; `--price-per-gpu-hour` (your price;
meshplan has none built in) adds the cost. `--csv FILE` / `--json FILE` write the full table ('-' = stdout),
`--figures DIR` the scaling figure (tokens/s and cost per token against GPUs, one line per cluster).
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import typer

from planner.cli.app import app, err, out
from planner.cli.options import (
    INPUTS,
    PINS,
    OptionGroup,
    collect_pins,
    emit_json,
    resolve_inputs,
    use_options,
    user_errors,
)
from planner.errors import UserError

FLAGS = OptionGroup("flags", tuple(p for p in INPUTS.params if p.name in ("no_flash_attention", "no_dp_overlap", "runtime",
                                                                    "grad_reduce_dtype", "master_weights",
                                                                    "optimizer_state_dtype")))
"""The single-valued input options of `meshplan plan`, shared as they are."""

_LIST_HELP = "Comma-separated list, e.g. {}."


def parse_list(text: str | None, flag: str, example: str, kind: type = int) -> list[Any]:
    """'8,16,32' -> [8, 16, 32]; one-line UserError naming the flag (and an `example`) for anything else."""
    if text is None:
        return [None]
    items = [t.strip() for t in text.split(",")]
    if kind is str:
        if not all(items):
            raise UserError(f"{flag}={text!r} has an empty entry", fix=f"give comma-separated names, e.g. {flag} {example}")
        return items
    values = []
    for item in items:
        try:
            value = int(item)
        except ValueError:
            value = 0
        if value < 1:
            raise UserError(f"{flag}={text!r}: {item!r} is not a positive integer",
                            fix=f"give comma-separated positive integers, e.g. {flag} {example}")
        values.append(value)
    return values


def _positive(value: float | None, flag: str, example: str) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise UserError(f"{flag}={value!r} must be a positive number", fix=f"e.g. {flag} {example}")
    return value


def build_points(lists: dict[str, list[Any]], flags: dict[str, Any]) -> list[Any]:
    """One `planner.sweep.Point` per combination, resolved by `meshplan plan`'s own input resolution.

    An unknown model or cluster stops the sweep (one line naming the flag); what only some combinations get
    wrong (a size that does not fill whole hosts, a sequence longer than the model's) becomes that row's note.
    """
    import hardware_profiles
    from planner.model import load_model
    from planner.sweep import Point, reason

    for name in lists["model"]:
        if name is not None:
            try:
                load_model(name)
            except UserError as exc:
                raise UserError(f"--model {name}: {exc}") from None
    for name in lists["cluster"]:
        if name is not None:
            try:
                hardware_profiles.cluster_spec(name)
            except hardware_profiles.ProfileError as exc:
                raise UserError(f"--cluster {name}: {exc}") from None
    names = list(lists)
    points = []
    for combo in itertools.product(*lists.values()):
        raw = dict(zip(names, combo), **flags)
        labels = {k: v for k, v in raw.items() if k in names and v is not None}
        try:
            inp = resolve_inputs(raw)
        except UserError as exc:
            points.append(Point(labels, error=reason(exc)))
            continue
        points.append(Point(labels, inp.model, inp.cluster, inp.workload, inp.options))
    return points


@app.command("sweep")
@use_options(FLAGS, PINS)
def sweep_command(
    model: str = typer.Option(None, "--model", metavar="NAMES", help=_LIST_HELP.format("llama3-8b,llama3-70b")
                              + " Presets, HF config.json or model YAML files. (default: llama3-70b)"),
    cluster: str = typer.Option(None, "--cluster", metavar="NAMES", help=_LIST_HELP.format("dgx-h100,gb200-nvl72")
                                + " (default: dgx-h100)"),
    nodes: str = typer.Option(None, "--nodes", metavar="N,...", help=_LIST_HELP.format("8,16,32,64,128")
                              + " (default: 8 for dgx-h100, else the profile's default)"),
    gpus: str = typer.Option(None, "--gpus", metavar="N,...", help="GPUs in all, instead of --nodes. "
                             + _LIST_HELP.format("64,128,256")),
    global_batch: str = typer.Option(None, "--global-batch", metavar="SEQS,...", help="Sequences per step. "
                                     + _LIST_HELP.format("512,1024")),
    global_batch_tokens: str = typer.Option(None, "--global-batch-tokens", metavar="TOKENS,...",
                                            help="Tokens per step. " + _LIST_HELP.format("4194304,16777216")
                                            + " (default unless --global-batch is given: 512 sequences of the model's default length)"),
    seq_len: str = typer.Option(None, "--seq-len", metavar="N,...", help="Tokens per sequence. "
                                + _LIST_HELP.format("4096,8192") + " (default: 8192, or the model's max_seq_len if smaller)"),
    tokens: float = typer.Option(None, "--tokens", metavar="TOKENS",
                                 help="Training budget in tokens (e.g. 15e12): adds time to train and GPU-hours."),
    price: float = typer.Option(None, "--price-per-gpu-hour", metavar="PRICE",
                                help="Your price per GPU-hour (no price is built in): adds the cost."),
    csv_out: str = typer.Option(None, "--csv", metavar="FILE", help="Write the full table as CSV ('-' = stdout)."),
    json_out: str = typer.Option(None, "--json", metavar="FILE", help="Write the full table as one JSON document ('-' = stdout)."),
    figures: str = typer.Option(None, "--figures", metavar="DIR", help="Draw the scaling figure into DIR (PNG and SVG)."),
    force: bool = typer.Option(False, "--force", help="Overwrite --csv/--json/--figures files if they exist."),
    flags: dict = None,  # type: ignore[assignment]  (filled by use_options)
    pins: dict = None,  # type: ignore[assignment]
) -> None:
    """Search every combination of models, clusters, sizes, batches and sequence lengths; one table."""
    from planner.io import check_targets
    from planner.sweep import run

    with user_errors():
        check_targets(csv_out, json_out, force=force)  # every output refused or accepted before any work
        if figures is not None:
            from planner.figures import check_targets as check_figures
            from planner.figures.scaling import STEM

            check_figures(figures, [STEM], force=force, others=(csv_out, json_out))
        if nodes is not None and gpus is not None:
            raise UserError("give --nodes or --gpus, not both", fix="drop one of them")
        lists = {
            "model": parse_list(model, "--model", "llama3-8b,llama3-70b", str),
            "cluster": parse_list(cluster, "--cluster", "dgx-h100,gb200-nvl72", str),
            "nodes": parse_list(nodes, "--nodes", "8,16,32"), "gpus": parse_list(gpus, "--gpus", "64,128,256"),
            "global_batch": parse_list(global_batch, "--global-batch", "512,1024"),
            "global_batch_tokens": parse_list(global_batch_tokens, "--global-batch-tokens", "4194304,16777216"),
            "seq_len": parse_list(seq_len, "--seq-len", "4096,8192"),
        }
        _positive(tokens, "--tokens", "15e12")
        _positive(price, "--price-per-gpu-hour", "2.5")
        values = collect_pins(pins)
        points = build_points(lists, flags)
        with _progress_bar(len(points)) as progress:
            frame = run(points, tokens=tokens, price_per_gpu_hour=price, progress=progress, **values)
    if figures is not None:
        from planner.figures.scaling import write_scaling

        with user_errors():
            for path in write_scaling(frame, figures, force=force):
                err.print(f"wrote {path}", markup=False)
    if csv_out is not None:
        from planner.cli.compare import _write_csv

        _write_csv(frame, csv_out, force)
        if csv_out == "-":
            return
    if emit_json(json.dumps(_document(frame, tokens, price), indent=1), json_out, force=force):
        return
    _print_table(frame)


class _progress_bar:  # noqa: N801 (a context manager)
    """A rich progress bar on stderr (only on a terminal); yields the `progress` callback of `planner.sweep`."""

    def __init__(self, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("{task.description}"), console=err, transient=True,
                            disable=not err.is_terminal)
        self.task = self.bar.add_task("", total=total)

    def __enter__(self):
        self.bar.start()
        return lambda done, total, label: self.bar.update(self.task, completed=done, description=label)

    def __exit__(self, *exc: Any) -> None:
        self.bar.stop()


def _document(frame: Any, tokens: float | None, price: float | None) -> dict[str, Any]:
    """The one JSON document: the budget and price given, and every row (NaN as null)."""
    rows = [{k: _plain(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]
    return {"tokens": tokens, "price_per_gpu_hour": price, "columns": list(frame.columns), "rows": rows}


_FORMATS = {"step s": "{:.3f}", "tokens/s": "{:,.0f}", "MFU %": "{:.1f}", "memory GiB": "{:.1f}",
            "train days": "{:,.1f}", "GPU-hours": "{:,.0f}", "cost / 1M tokens": "{:,.2f}", "cost": "{:,.0f}",
            "GPUs": "{:,.0f}", "batch": "{:,.0f}", "seq": "{:,.0f}"}


def _plain(value: Any) -> Any:
    """A cell as JSON takes it: numpy scalars as Python numbers (every digit kept), NaN as null."""
    value = value.item() if hasattr(value, "item") else value
    return None if isinstance(value, float) and math.isnan(value) else value


def _print_table(frame: Any) -> None:
    """The table: inputs that vary, the best layout and its figures, and a note where nothing fits."""
    from rich import box
    from rich.table import Table

    from planner.render import print_wide

    shown: dict[str, Any] = {}
    constant = []
    for col, title in (("model", "model"), ("cluster", "cluster"), ("gpu", "GPU"), ("global_batch", "batch"),
                       ("seq_len", "seq")):
        values = frame[col].dropna().unique()
        if len(values) > 1:
            shown[title] = frame[col]
        elif len(values) == 1:
            constant.append(f"{title} {values[0]}")
    shown["GPUs"] = frame["gpus"]
    shown["layout"] = frame["layout"]
    shown["step s"] = frame["step_time_s"]
    shown["tokens/s"] = frame["tokens_per_s"]
    shown["MFU %"] = frame["mfu"] * 100
    shown["memory GiB"] = frame["peak_memory_gib"]
    if frame["train_time_s"].notna().any():
        shown["train days"] = frame["train_time_s"] / 86400
        shown["GPU-hours"] = frame["gpu_hours"]
    if frame["cost_per_million_tokens"].notna().any():
        shown["cost / 1M tokens"] = frame["cost_per_million_tokens"]
    if frame["cost"].notna().any():
        shown["cost"] = frame["cost"]
    shown["note"] = frame["status"].where(frame["status"] != "ok", "")
    title = "sweep: the best layout of each point" + (f" ({', '.join(constant)})" if constant else "")
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for name in shown:
        table.add_column(name, justify="right" if name in _FORMATS else "left", no_wrap=name in _FORMATS)
    for i in range(len(frame)):
        cells = []
        for name, col in shown.items():
            value = col.iloc[i]
            missing = value is None or (isinstance(value, float) and math.isnan(value))
            cells.append("-" if missing else _FORMATS[name].format(value) if name in _FORMATS else str(value))
        table.add_row(*cells)
    print_wide(out, table)
