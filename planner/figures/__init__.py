"""Figures of a plan: device mesh, pipeline schedule, memory per stage, and the step-time/memory comparison.

    from planner.figures import write_all
    paths = write_all(plan, "figures/", search=search_result(..., keep_all=True))

Each figure has a `draw_*` function returning `(matplotlib Figure, data)`, where the data records the drawn
quantities (tests check them against the plan). `write_all` writes PNG and SVG of each. matplotlib (Agg
canvas, no pyplot) is imported only when a figure is drawn, so `import planner` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.plan import Plan

FIGURES = ("mesh", "schedule", "memory", "pareto")


def figure_paths(out_dir: str | Path, stems: list[str] | tuple[str, ...] = FIGURES) -> list[Path]:
    """The files `write_all` writes into `out_dir` for `stems` (PNG and SVG of each)."""
    from planner.figures._common import FORMATS

    return [Path(out_dir) / f"{stem}.{fmt}" for stem in stems for fmt in FORMATS]


def check_targets(out_dir: str | Path, stems: list[str] | tuple[str, ...] = FIGURES, *, force: bool = False,
                  others: tuple[str | Path | None, ...] = ()) -> None:
    """Raise UserError before any work if the figures cannot be written: `out_dir` is a file or its parent
    folder is missing, a figure file exists (without `force`), or another output of the command (`others`,
    e.g. the --json file) names one of the figure files."""
    from planner import io

    io.check_output_folder(out_dir, option="--figures")
    files = figure_paths(out_dir, stems) if Path(out_dir).is_dir() else []
    io.check_targets(*others, *files, force=force)


def write_all(plan: Plan, out_dir: str | Path, search: Any = None, *, force: bool = False,
              topology: Any = None, ctx: Any = None) -> list[Path]:
    """Write every figure of `plan` as PNG and SVG into `out_dir`; returns the paths written.

    `search` (the result of `search_result(..., keep_all=True)`, or its `all_feasible` table) adds the
    comparison figure; without it that figure is skipped. Existing files are never overwritten unless
    `force`: all target paths are checked before the first is written.
    """
    from planner.figures import _common
    from planner.figures.memory import draw_memory
    from planner.figures.mesh import draw_mesh
    from planner.figures.pareto import draw_pareto
    from planner.figures.schedule import draw_schedule
    from planner.io import make_output_folder

    out = Path(out_dir)
    stems = ["mesh", "schedule", "memory"] + (["pareto"] if search is not None else [])
    check_targets(out, stems, force=force)
    make_output_folder(out, option="--figures")
    drawers = {
        "mesh": lambda: draw_mesh(plan, topology),
        "schedule": lambda: draw_schedule(plan, ctx),
        "memory": lambda: draw_memory(plan),
        "pareto": lambda: draw_pareto(plan, search),
    }
    import matplotlib

    paths: list[Path] = []
    # Names from user files (a model called "a$\\frac$") are text, not TeX: without this matplotlib parses
    # "$...$" as mathtext and a malformed one aborts the drawing. No figure uses mathtext on purpose.
    with matplotlib.rc_context({"text.parse_math": False}):
        for stem in stems:
            fig, _ = drawers[stem]()
            paths += _common.save(fig, out, stem, force=force)
    return paths


__all__ = ["FIGURES", "check_targets", "figure_paths", "write_all"]
