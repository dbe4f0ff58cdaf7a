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


def check_targets(out_dir: str | Path, stems: list[str] | tuple[str, ...] = FIGURES, *, force: bool = False) -> None:
    """Raise UserError if `out_dir` is a file, or (without `force`) if any figure file would be overwritten."""
    from planner.errors import UserError
    from planner.figures._common import FORMATS

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError("not a directory", where=str(out), fix="pass a folder for the figures")
    if force:
        return
    for stem in stems:
        for fmt in FORMATS:
            if (out / f"{stem}.{fmt}").exists():
                raise UserError("file exists", where=str(out / f"{stem}.{fmt}"),
                                fix="choose another folder or pass --force to overwrite")


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

    out = Path(out_dir)
    stems = ["mesh", "schedule", "memory"] + (["pareto"] if search is not None else [])
    check_targets(out, stems, force=force)
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


__all__ = ["FIGURES", "check_targets", "write_all"]
