"""The import contract: planner never imports torch or the executor, hardware_profiles knows nothing of the rest,
the executor imports only planner.layout / plan / model / errors and nothing it imports reaches the search or
the cost model (import-linter contracts in pyproject.toml), and no first-party module is part of an import cycle.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx
import tomllib

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("planner", "executor", "hardware_profiles")
EXECUTOR_MAY_IMPORT = {"planner.layout", "planner.plan", "planner.model", "planner.errors"}


def test_import_linter_contracts_are_kept() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "BROKEN" not in done.stdout and "4 kept, 0 broken" in done.stdout


def test_every_planner_module_is_classified_for_the_executor() -> None:
    """A new top-level planner module must be allowed to the executor or forbidden to it in pyproject.toml."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    forbidden = {m for c in config if c["source_modules"] == ["executor"] for m in c["forbidden_modules"]}
    top = {f"planner.{p.stem}" for p in (ROOT / "planner").iterdir()
           if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}
    assert top - forbidden - EXECUTOR_MAY_IMPORT == set()
    assert forbidden & EXECUTOR_MAY_IMPORT == set()


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.glob("*/**/*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in PACKAGES:
            name = ".".join(rel.with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def _import_graph() -> nx.DiGraph:
    """First-party imports, at any depth of the module (function-level too), except `if TYPE_CHECKING:` blocks.
    `from pkg import name` counts as importing `pkg.name` when that is a module, else `pkg` (its __init__)."""
    mods = _modules()
    graph = nx.DiGraph()
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                for stmt in node.body for n in ast.walk(stmt)}
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph.add_edge(name, target)
    return graph


def test_no_import_cycles() -> None:
    cycles = [sorted(c) for c in nx.strongly_connected_components(_import_graph()) if len(c) > 1]
    assert cycles == []


def test_the_layout_package_is_the_ground_floor() -> None:
    """planner.layout imports nothing of meshplan but itself and planner.errors (pydantic and numpy only)."""
    graph = _import_graph()
    outside = {t for n in graph if n.startswith("planner.layout") for t in graph.successors(n)
               if not t.startswith("planner.layout")}
    assert outside <= {"planner.errors"}
