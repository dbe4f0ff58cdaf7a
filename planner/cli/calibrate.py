"""`meshplan calibrate`: measure this machine and write a cluster profile the planner takes like a built-in one.

    meshplan calibrate                                   # calibrated.yaml (+ .gpu.yaml, .link.yaml) here
    meshplan calibrate --quick --out prof/cpu.yaml       # < 30 s: fewer shapes, sizes, repetitions
    meshplan calibrate --nproc 8 --json calib.json       # 8 processes; every measurement and fit as JSON
    meshplan plan --cluster calibrated.yaml --model tiny --global-batch 8 --seq-len 64

The measuring runs in torch subprocesses (`torchrun -m executor.calibrate`; the planner never imports
torch) while a progress bar shows on stderr; the fitted numbers go to stdout as a table, or as one JSON
document with --json. Files are written atomically and never overwritten without --force.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from planner.cli.app import abort, app, err, out, write_json_output
from planner.errors import UserError


def run_calibration(out_path: Path, *, quick: bool, nproc: int | None, force: bool, show_progress: bool = True):
    """Calibrate with a rich progress bar on stderr (shared with `meshplan run --calibrate`)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from planner.calibration import calibrate

    if not show_progress:
        return calibrate(out_path, nproc=nproc, quick=quick, force=force)
    columns = (TextColumn("calibrating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.description}"))
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task("starting processes", total=None)

        def on_progress(done: int, total: int, label: str) -> None:
            progress.update(task, completed=done, total=total, description=label)

        return calibrate(out_path, nproc=nproc, quick=quick, force=force, on_progress=on_progress)


def _table(summary: dict) -> Table:
    gib, t = 2**30, Table(title=f"{summary['host']} calibrated ({summary['processes']} x {summary['device_name']}, "
                                 f"{summary['backend']}): {summary['files']['cluster']}")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_column("fit error (rms)", justify="right")
    for dtype, g in summary["gemm"].items():
        t.add_row(f"GEMM {dtype} plateau", f"{g['rate_flops'] / 1e9:,.1f} GFLOP/s", f"{g['rms_rel_error']:.1%}")
        t.add_row(f"GEMM {dtype} half-rate size", f"{g['half_flops'] / 1e6:,.3f} MFLOP", "")
    t.add_row("memory bandwidth (copy)", f"{summary['memory_bandwidth_Bps'] / 1e9:,.2f} GB/s", "")
    o = summary["framework_overhead"]
    t.add_row("overhead per layer fwd / bwd", f"{o['layer_forward_s'] * 1e3:.3f} / {o['layer_backward_s'] * 1e3:.3f} ms", "")
    t.add_row("  per token x hidden fwd / bwd", f"{o['forward_s_per_element'] * 1e9:.3f} / {o['backward_s_per_element'] * 1e9:.3f} ns", "")
    t.add_row("  extra under TP fwd / bwd", f"{o['tp_layer_forward_s'] * 1e3:.3f} / {o['tp_layer_backward_s'] * 1e3:.3f} ms", "")
    t.add_row("  extra under FSDP fwd / bwd", f"{o['dp_layer_forward_s'] * 1e3:.3f} / {o['dp_layer_backward_s'] * 1e3:.3f} ms", "")
    t.add_row("pipeline machinery per transfer", f"{o['pp_transfer_s'] * 1e3:.3f} ms", "")
    t.add_row("optimizer step per parameter", f"{o['optimizer_s_per_param'] * 1e9:.2f} ns", "")
    if summary["profiles"]["gpu"].get("devices_at_full_speed"):
        t.add_row("processes at full speed at once", f"{summary['profiles']['gpu']['devices_at_full_speed']:.2f}", "")
    for r in (r for r in summary["overhead_report"] if r.get("ep", 1) > 1):
        t.add_row(f"{r['model']} layer, EP over {r['ep']}, {r['tokens']} tokens fwd / bwd",
                  f"{r['measured_forward_s'] * 1e3:.2f} / {r['measured_backward_s'] * 1e3:.2f} ms (predicted "
                  f"{r['fitted_forward_s'] * 1e3:.2f} / {r['fitted_backward_s'] * 1e3:.2f} ms)", "")
    for c in summary["collectives"]:
        t.add_row(f"{c['kind']} n={c['group_size']}",
                  f"{c['latency_s'] * 1e6:,.0f} us + S / {c['bus_bandwidth_Bps'] / 1e9:,.2f} GB/s", f"{c['rms_rel_error']:.1%}")
    mem = summary["profiles"]["gpu"]["memory_bytes"]
    t.add_row("memory", f"{mem / gib:,.1f} GiB" + (" (host, shared)" if summary["device"] == "cpu" else ""), "")
    return t


@app.command("calibrate")
def calibrate_command(
    out_file: Path = typer.Option(Path("calibrated.yaml"), "--out", metavar="PROFILE.yaml",
                                  help="Cluster profile to write (+ PROFILE.gpu.yaml and PROFILE.link.yaml next to it)."),
    quick: bool = typer.Option(False, "--quick", help="Fewer shapes, sizes and repetitions (< 30 s)."),
    nproc: int = typer.Option(None, "--nproc", min=2, help="Processes to measure (default: GPUs here, else 4)."),
    json_out: str = typer.Option(None, "--json", metavar="FILE", help="Every measurement and fit as JSON ('-' = stdout)."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing profile / --json files."),
) -> None:
    """Measure this machine (GEMM curve, memory bandwidth, framework overhead, collectives) into a profile."""
    try:
        from planner.calibration import ProfilePaths
        from planner.io import check_targets

        # The three profile files and --json, all checked before measuring (folders, duplicates, --force).
        check_targets(*ProfilePaths(out_file).all(), json_out, force=force)
        cal = run_calibration(out_file, quick=quick, nproc=nproc, force=force)
        summary = cal.summary()
        if json_out is not None:
            write_json_output(json.dumps(summary, indent=1), json_out, force=force)
    except UserError as exc:
        abort(str(exc))
    except RuntimeError as exc:
        abort(str(exc), code=1)
    err.print(f"wrote {', '.join(summary['files'].values())}", markup=False)
    if json_out == "-":
        return
    out.print(_table(summary))
