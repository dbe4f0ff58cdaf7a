"""Start-up stays light: each command imports what it needs when it needs it.

`meshplan --help` lists the commands without importing their heavy dependencies; `import planner` loads no
pydantic model, numpy or solver; a plan for a dense model on a homogeneous cluster never builds a CP-SAT
model, so it does not import OR-Tools; pandas and matplotlib come only with the commands that tabulate
(compare, sweep) or draw (--figures). Each check runs in a fresh interpreter (subprocess), as the console
script does; benchmarks/cli_speed.py measures the resulting times.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("ortools", "pandas", "matplotlib", "torch", "scipy")


def _loaded_after(code: str) -> set[str]:
    """Every module name imported by running `code` in a fresh interpreter."""
    script = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={"COLUMNS": "120", "PATH": "/usr/bin:/bin", "MESHPLAN_CACHE_DIR": "off"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def _modules_after(code: str) -> set[str]:
    """Top-level package names imported by running `code` in a fresh interpreter."""
    return {m.split(".")[0] for m in _loaded_after(code)}


def _cli(*argv: str) -> str:
    """Code that runs `meshplan ARGV` in-process with its output discarded, as the console script would."""
    return ("import contextlib, io\nfrom planner.cli.main import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            f"    code = main({list(argv)!r})\n"
            "assert code in (0, 2), code\n")


def test_help_imports_no_heavy_package() -> None:
    loaded = _modules_after(_cli("--help"))
    # The brief's four, and what else --help must not pay for: models, arrays, YAML, graphs.
    for name in (*HEAVY, "numpy", "pydantic", "yaml", "networkx"):
        assert name not in loaded, f"`meshplan --help` imports {name}"
    assert "typer" in loaded and "rich" in loaded  # the check would be empty if the CLI did not run


def test_import_planner_is_light() -> None:
    loaded = _modules_after("import planner")
    for name in (*HEAVY, "numpy", "pydantic", "networkx"):
        assert name not in loaded, f"`import planner` imports {name}"


def test_lazy_public_names_resolve() -> None:
    import planner
    from planner.layout import Layout, Workload
    from planner.plan import Plan

    assert (planner.Layout, planner.Plan, planner.Workload) == (Layout, Plan, Workload)
    assert callable(planner.sweep) and callable(planner.search) and callable(planner.evaluate)
    with pytest.raises(AttributeError):
        planner.no_such_name  # noqa: B018


@pytest.mark.parametrize("argv,absent", [
    (("plan", "--model", "llama3-8b", "--nodes", "2", "--global-batch", "64"), HEAVY),
    (("evaluate", "--model", "llama3-8b", "--nodes", "1", "--tp", "8", "--global-batch", "8"), HEAVY),
    (("sweep", "--model", "llama3-8b", "--nodes", "1,2", "--global-batch", "64"), ("ortools", "matplotlib", "torch")),
    (("profiles",), (*HEAVY, "numpy")),
])
def test_commands_import_only_what_they_need(argv: tuple[str, ...], absent: tuple[str, ...]) -> None:
    loaded = _modules_after(_cli(*argv))
    for name in absent:
        assert name not in loaded, f"`meshplan {' '.join(argv)}` imports {name}"


def test_a_plan_leaves_numpy_ma_unimported() -> None:
    """numpy's `np.unique` imports numpy.ma (15-25 ms) on its first plain call; the search uses
    `planner.layout.numeric.sorted_unique` instead, and nothing else of a plan needs numpy.ma."""
    loaded = _loaded_after(_cli("plan", "--model", "llama3-8b", "--nodes", "2", "--global-batch", "64", "--top", "3"))
    assert "planner.solver.exact" in loaded and "numpy" in loaded  # the check would be empty without a search
    assert "numpy.ma" not in loaded


def test_a_command_registers_only_itself() -> None:
    """`meshplan profiles` imports its own module and none of the other commands'; `--help` imports them all."""
    alone = _loaded_after(_cli("profiles"))
    assert "planner.cli.profiles" in alone
    assert not alone & {"planner.cli.plan", "planner.cli.sweep", "planner.cli.run", "planner.cli.compare"}, alone
    everything = _loaded_after(_cli("--help"))
    assert {"planner.cli.plan", "planner.cli.sweep", "planner.cli.run", "planner.cli.profiles"} <= everything


def test_help_lists_commands_in_module_order_after_a_single_command() -> None:
    """A process that ran one command first (registering only it) lists every command in the same order as a
    fresh one, and a misspelt command still gets the suggestions of all commands."""
    import contextlib
    import io

    from planner.cli.main import _command_modules, main

    def run(*argv: str) -> tuple[int, str]:
        text = io.StringIO()
        with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
            code = main(list(argv))
        return code, text.getvalue()

    assert run("profiles")[0] == 0
    code, text = run("--help")
    assert code == 0
    rows = [line.split()[1] for line in text.splitlines() if line.startswith("│ ") and not line.startswith("│ -")]
    # Every command, in module (alphabetical) order, although `profiles` was registered first.
    assert rows == sorted(rows) and {"plan", "profiles", "run", "sweep"} <= set(rows), rows
    assert set(rows) <= set(_command_modules())
    code, text = run("plam")
    assert code == 2 and "plan" in text and "replan" in text
