"""The suite runs fast unit tests first and the multi-process (distributed) tests last (tests/conftest.py).

A collection in a fresh process, of one file per tier given in the wrong order (distributed, notebooks,
unit), must come out unit -> other single-process -> distributed; and every test module under
tests/distributed carries the `distributed` marker the ordering keys on.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILES = ["tests/distributed/test_calibrate.py", "tests/test_notebooks.py", "tests/unit/test_packaging.py"]
COLLECT = """
import json, sys, pytest
class Recorder:
    def pytest_collection_finish(self, session):
        self.items = [i.nodeid for i in session.items]
rec = Recorder()
code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-n", "0", *sys.argv[1:]],
                   plugins=[rec])
print("@@" + json.dumps(rec.items))
sys.exit(code)
"""


def test_unit_tests_come_first_and_distributed_last() -> None:
    proc = subprocess.run([sys.executable, "-c", COLLECT, *FILES], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    items = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("@@"))[2:])
    files = [i.split("::")[0] for i in items]
    order = [f for i, f in enumerate(files) if f not in files[:i]]
    assert order == FILES[::-1], order


def test_every_multi_process_module_is_marked() -> None:
    for path in sorted((ROOT / "tests" / "distributed").glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        marks = [ast.unparse(n.value) for n in tree.body if isinstance(n, ast.Assign)
                 and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)]
        assert marks == ["pytest.mark.distributed"], f"{path.name}: {marks}"
