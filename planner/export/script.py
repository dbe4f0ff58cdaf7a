"""Pieces of the shell scripts the framework exports are: an argument array and the torchrun line.

The argument array is written one option (with its values) per line between `NAME=(` and `)`, shell-quoted,
so `meshplan export --check` reads back exactly what the script passes (`checks.shell_text.read_array`).
"""

from __future__ import annotations

import shlex

from planner.export import LaunchShape
from planner.export.checks.shell_text import read_array, read_heredoc


def shell_array(name: str, args: list[str]) -> str:
    """`NAME=(` + one `--option value...` per line + `)`."""
    groups: list[list[str]] = []
    for a in args:
        if a.startswith("-") or ":" in a or not groups:  # an option, or a tyro subcommand (TorchTitan)
            groups.append([a])
        else:
            groups[-1].append(a)
    body = "".join("  " + " ".join(shlex.quote(x) for x in g) + "\n" for g in groups)
    return f"{name}=(\n{body})\n"


def torchrun(shape: LaunchShape, program: str, rdzv_port: int = 29500) -> str:
    """The torchrun line every host runs (`program` is `-m module` or a script path); multi-host jobs take the
    first host from MASTER_ADDR and this host's index from NODE_RANK (SLURM: SLURM_NODEID)."""
    if shape.nnodes == 1:
        return f"torchrun --standalone --nnodes 1 --nproc-per-node {shape.nproc_per_node} {program}"
    return (f"torchrun --nnodes {shape.nnodes} --nproc-per-node {shape.nproc_per_node} "
            f'--node-rank "${{NODE_RANK:-${{SLURM_NODEID:?set NODE_RANK to the index of this host}}}}" '
            f'--master-addr "${{MASTER_ADDR:?set MASTER_ADDR to the first host}}" --master-port {rdzv_port} {program}')


__all__ = ["read_array", "read_heredoc", "shell_array", "torchrun"]
