"""Plans, profiles and model files are data: nothing in them can make meshplan import or run code, and a run
listens on 127.0.0.1 only unless the user names a host. See SECURITY.md.

- The source tree holds no pickle, eval/exec, unsafe YAML loading, `torch.load` without weights_only=True,
  shell=True, os.system, or `importlib.import_module` fed anything but the project's own module names (an
  AST scan of every .py file and every notebook code cell, not a text grep that comments could fool).
- A plan naming a module (an unknown field `model_module: "os"` anywhere) is refused by the schema, by the
  executor's entry point and by `meshplan run` before anything starts.
- A plan whose model is called like a module ("os.system", a canary module that records its import) trains
  the project's reference model: the name is a label, never resolved (checked by running the executor).
- An exported launch script quotes what came from the plan or the command line (checked by running it).
- The torchrun line `meshplan run` builds uses 127.0.0.1 for the rendezvous and the workers by default.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_inputs import check_refusal, invoke, write
from loopback_ports import free_port, run_retrying_port

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("planner", "executor", "hardware_profiles", "benchmarks", "tests", "notebooks")
FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "shelve", "marshal", "joblib"}
FORBIDDEN_CALLS = {"eval", "exec"}
"""Banned in the code that handles user data (the packages, benchmarks, notebooks). Tests may build code
from their own constant templates (test_executor_timeouts compiles fake torch frames)."""
SHIPPED = ("planner/", "executor/", "hardware_profiles/", "benchmarks/", "notebooks/")


def _sources() -> list[tuple[str, str]]:
    """(name, Python source) of every .py file and notebook code cell under SCANNED."""
    out = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if ".venv" not in path.parts and "__pycache__" not in path.parts:
                out.append((str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")))
        for nb in sorted((ROOT / top).rglob("*.ipynb")):
            cells = json.loads(nb.read_text(encoding="utf-8")).get("cells", [])
            for i, cell in enumerate(cells):
                if cell.get("cell_type") == "code":
                    code = "".join(cell.get("source", []))
                    code = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!")))
                    out.append((f"{nb.relative_to(ROOT)} cell {i}", code))
    return out


def _name(node: ast.AST) -> str:
    """'yaml.load' for the call target yaml.load(...)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    return ""


def _kw(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _own_module_name(arg: ast.AST) -> bool:
    """A module name that can only be one of the project's own: a literal, or an f-string whose fixed
    start is 'planner.' / 'executor.' / 'hardware_profiles.'."""
    prefixes = ("planner.", "executor.", "hardware_profiles.")
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return True
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value).startswith(prefixes)
    return False


def unsafe_uses(source: str, shipped: bool = True) -> list[str]:
    """Every construct of `source` that could load or run code from data (empty when safe); `shipped`: the
    source handles user data (eval/exec banned too)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"line {line}: import {n}" for n in names if n.split(".")[0] in FORBIDDEN_MODULES]
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        short = name.rsplit(".", 1)[-1]
        if (shipped and name in FORBIDDEN_CALLS) or name.startswith(tuple(m + "." for m in FORBIDDEN_MODULES)):
            found.append(f"line {line}: {name}(")
        if name == "__import__" and not (node.args and _own_module_name(node.args[0])):
            found.append(f"line {line}: __import__( fed a name that is not a literal")
        if name.endswith("torch.load"):
            weights_only = _kw(node, "weights_only")
            if not (isinstance(weights_only, ast.Constant) and weights_only.value is True):
                found.append(f"line {line}: {name}( without weights_only=True")
        if name in ("yaml.load", "yaml.load_all"):
            loader = _name(_kw(node, "Loader") or (node.args[1] if len(node.args) > 1 else ast.Constant(None)))
            if not loader.endswith(("SafeLoader", "CSafeLoader")):
                found.append(f"line {line}: {name}( without SafeLoader")
        if name in ("yaml.unsafe_load", "yaml.full_load", "yaml.unsafe_load_all", "yaml.full_load_all"):
            found.append(f"line {line}: {name}(")
        if short == "import_module" and not (node.args and _own_module_name(node.args[0])):
            found.append(f"line {line}: {name}( fed a name that is not one of the project's modules")
        if short == "load" and name.split(".")[0] in ("np", "numpy"):
            allow = _kw(node, "allow_pickle")
            if isinstance(allow, ast.Constant) and allow.value is True:
                found.append(f"line {line}: {name}(allow_pickle=True)")
        if name in ("pd.read_pickle", "pandas.read_pickle", "os.system", "os.popen", "torch.hub.load"):
            found.append(f"line {line}: {name}(")
        shell = _kw(node, "shell")
        if name.startswith("subprocess.") and isinstance(shell, ast.Constant) and shell.value is True:
            found.append(f"line {line}: {name}(shell=True)")
        remote = _kw(node, "trust_remote_code")
        if isinstance(remote, ast.Constant) and remote.value is True:
            found.append(f"line {line}: trust_remote_code=True")
    return found


def test_the_scanner_finds_what_it_looks_for() -> None:
    bad = """
import pickle
from dill import loads
import yaml, torch, numpy as np, importlib, subprocess, os
pickle.loads(b"")
eval("1"); exec("x = 1"); __import__(name)
yaml.load(open("f"))
yaml.load(open("f"), Loader=yaml.FullLoader)
yaml.unsafe_load("x")
torch.load("ckpt.pt")
torch.load("ckpt.pt", weights_only=False)
np.load("a.npy", allow_pickle=True)
importlib.import_module(plan.inputs.model.name)
importlib.import_module(f"{name}.x")
subprocess.run("ls", shell=True)
os.system("ls")
"""
    assert len(unsafe_uses(bad)) == 16, unsafe_uses(bad)
    good = """
import yaml, torch, importlib
yaml.safe_load("a: 1")
yaml.load("a: 1", Loader=yaml.SafeLoader)
torch.load("ckpt.pt", weights_only=True)
importlib.import_module(f"planner.cli.{info.name}")
importlib.import_module("planner.export.torchrun")
__import__("datetime")
"""
    assert unsafe_uses(good) == []
    assert unsafe_uses("exec(compile(TEMPLATE, 'f.py', 'exec'))", shipped=False) == []


def test_source_tree_loads_no_code_from_data() -> None:
    sources = _sources()
    assert len(sources) > 100  # the scan really covers the tree
    problems = [f"{name}: {p}" for name, src in sources for p in unsafe_uses(src, name.startswith(SHIPPED))]
    assert problems == [], "\n".join(problems)


# Plans naming modules -------------------------------------------------------------------------------------
def _tiny_plan_data(world: int = 1) -> dict:
    from dist_plans import make_plan

    from planner.layout import Layout

    return json.loads(make_plan("tiny", Layout(dp=world, micro_batch=2)).to_json())


@pytest.fixture(autouse=True)
def _dist_plans_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "distributed"))


@pytest.mark.parametrize("where", ["", "inputs", "inputs.model", "inputs.workload", "layout", "inputs.cluster",
                                   "inputs.cluster.host_groups.0.node", "prediction"])
def test_a_plan_naming_a_module_is_refused(tmp_path: Path, where: str) -> None:
    from executor.train import main as executor_main
    from planner.errors import UserError
    from planner.plan import Plan

    data = _tiny_plan_data()
    target = data
    for key in filter(None, where.split(".")):
        target = target[int(key)] if key.isdigit() else target[key]
    target["model_module"] = "os"
    path = write(tmp_path / "p.json", data)
    field = f"{where}.model_module".lstrip(".")
    with pytest.raises(UserError, match=f"'{field}' = 'os'.*Extra inputs are not permitted"):
        Plan.load(path)
    # The executor's own entry point (what torchrun starts on every rank) refuses it before any collective.
    assert executor_main([str(path), "--run-dir", str(tmp_path / "run")]) == 2
    assert field in (tmp_path / "run" / "error.txt").read_text()


def test_meshplan_run_refuses_it_before_launching(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from planner.cli import run as run_cli

    def launch(*a: object, **k: object) -> None:
        raise AssertionError("torchrun must not start")

    monkeypatch.setattr(run_cli, "_launch", launch)
    data = _tiny_plan_data()
    data["inputs"]["model"]["model_module"] = "os.system"
    line = check_refusal(*invoke(["run", write(tmp_path / "p.json", data), "--run-dir", tmp_path / "r"])[::2])
    assert "inputs.model.model_module" in line and "'os.system'" in line


@pytest.mark.parametrize("name", ["meshplan_canary", "os.system"])
def test_a_model_named_like_a_module_is_only_a_label(tmp_path: Path, name: str) -> None:
    """One real training step (1 gloo rank, no torchrun) of a plan whose model is called `name`: the run
    trains the reference model and never imports the name. The canary module, first on the path, writes
    a file if anything imports it."""
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "meshplan_canary.py").write_text(f"open({str(tmp_path / 'IMPORTED')!r}, 'w').close()\n")
    data = _tiny_plan_data()
    data["inputs"]["model"]["name"] = name
    data["inputs"]["model"]["source"] = "__import__('os').system('touch " + str(tmp_path / "RAN") + "')"
    data["inputs"]["model_fingerprint"] = ""
    path = write(tmp_path / "p.json", data)

    def command() -> tuple[list[str], dict[str, str]]:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(canary), str(ROOT)]), RANK="0", LOCAL_RANK="0",
                   WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                   OMP_NUM_THREADS="1")
        return [sys.executable, "-m", "executor", str(path), "--steps", "1", "--run-dir", str(tmp_path / "run")], env

    proc = run_retrying_port(command, timeout_s=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1]
    assert not (tmp_path / "IMPORTED").exists() and not (tmp_path / "RAN").exists()


def test_an_exported_launch_script_runs_no_injected_command(tmp_path: Path) -> None:
    """`export --to torchrun` with a plan path and host full of shell syntax: run the script with a stand-in
    `meshplan` (the script starts `meshplan run`) that records its arguments; nothing injected runs and the
    arguments arrive intact."""
    from cli_inputs import tiny_plan_json

    plan = write(tmp_path / "p.json", tiny_plan_json(4))
    evil = f"a b;touch {tmp_path / 'PWNED1'};$(touch {tmp_path / 'PWNED2'}).json"
    script = tmp_path / "launch.sh"
    code, _, err = invoke(["export", plan, "--to", "torchrun", "--plan-path", evil, "--out", script])
    assert code == 0, err
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "meshplan").write_text(f'#!/bin/sh\nfor a in "$@"; do echo "$a"; done > {tmp_path / "args"}\n')
    (bin_dir / "meshplan").chmod(0o755)
    proc = subprocess.run(["bash", str(script)], env=dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}"),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "PWNED1").exists() and not (tmp_path / "PWNED2").exists()
    assert (tmp_path / "args").read_text().splitlines()[:2] == ["run", evil]


def test_a_model_name_cannot_break_out_of_a_script_comment(tmp_path: Path) -> None:
    data = _tiny_plan_data()
    data["inputs"]["model"]["name"] = "tiny\ntouch PWNED"
    line = check_refusal(*invoke(["export", write(tmp_path / "p.json", data), "--to", "slurm"])[::2])
    assert "inputs.model.name" in line and "control character" in line


# Network exposure -----------------------------------------------------------------------------------------
def test_default_run_listens_on_loopback_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The torchrun line and environment `meshplan run` builds by default: rendezvous store hosted here on
    127.0.0.1 (torchrun joins it, is_host=0), workers' MASTER_ADDR 127.0.0.1, gloo/NCCL on loopback."""
    from cli_inputs import tiny_plan_json

    from planner.cli import run as run_cli

    seen: dict = {}

    def launch(cmd: list[str], env: dict[str, str], log: Path) -> tuple[int, list[str]]:
        seen.update(cmd=cmd, env=env)
        return 0, []

    monkeypatch.setattr(run_cli, "_launch", launch)
    for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        monkeypatch.delenv(var, raising=False)
    plan = write(tmp_path / "p.json", tiny_plan_json(4))
    code, _, err = invoke(["run", plan, "--run-dir", tmp_path / "r"])
    assert code == 0, err
    cmd, env = seen["cmd"], seen["env"]
    endpoint = cmd[cmd.index("--rdzv-endpoint") + 1]
    assert endpoint.startswith("127.0.0.1:") and int(endpoint.rsplit(":", 1)[1]) > 0
    assert cmd[cmd.index("--local-addr") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--rdzv-conf") + 1] == "is_host=0"
    assert env["MASTER_ADDR"] == "127.0.0.1"
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "lo"


def test_a_named_host_is_used_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cli_inputs import tiny_plan_json

    from planner.cli import _run_checks as run_checks
    from planner.cli import run as run_cli

    seen: dict = {}
    monkeypatch.setattr(run_cli, "_launch", lambda cmd, env, log: (seen.update(cmd=cmd, env=env), (0, []))[1])
    monkeypatch.setattr(run_checks, "resolvable", lambda host: host == "node0")  # a cluster's DNS name
    plan = write(tmp_path / "p.json", tiny_plan_json(4))
    code, _, err = invoke(["run", plan, "--run-dir", tmp_path / "r", "--nnodes", "2", "--nproc", "2",
                           "--rdzv-endpoint", "node0:29400"])
    assert code == 0, err
    cmd = seen["cmd"]
    assert cmd[cmd.index("--rdzv-endpoint") + 1] == "node0:29400"
    assert "--local-addr" not in cmd and "is_host=0" not in cmd
    assert "GLOO_SOCKET_IFNAME" not in seen["env"] or "GLOO_SOCKET_IFNAME" in os.environ


def test_the_loopback_store_listens_on_127_0_0_1(tmp_path: Path) -> None:
    """The helper that hosts the rendezvous store: its listening socket, read back from /proc/net/tcp*."""
    from planner.rendezvous import LoopbackStore

    store = LoopbackStore.start(tmp_path / "rendezvous.log")
    try:
        listening = _listening_addresses(store.port)
    finally:
        store.stop()
    assert listening == {"127.0.0.1"}, listening
    assert store.proc.returncode == 0


def test_the_loopback_store_stop_waits_for_a_slow_exit_and_stops_a_hung_helper(monkeypatch) -> None:
    """stop(): a helper still exiting when its stdin closes is waited for (exit 0), not killed; one that
    ignores both its stdin and SIGTERM is killed after the bounded waits."""
    import subprocess as sp
    import sys

    from planner import rendezvous

    monkeypatch.setattr(rendezvous, "EXIT_WAIT_S", 3.0)
    slow = "import sys, time; sys.stdin.read(); time.sleep(1.0)"  # a slow but clean exit
    hung = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)"
    for code, returncode in ((slow, 0), (hung, -9)):
        proc = sp.Popen([sys.executable, "-c", code], stdin=sp.PIPE, stdout=sp.PIPE, text=True)
        if code is hung:
            proc.stdout.readline()  # SIGTERM is ignored from here on
        store = rendezvous.LoopbackStore(proc, 0)
        store.stop()
        proc.stdout.close()
        assert proc.returncode == returncode, (code, proc.returncode)


def _listening_addresses(port: int) -> set[str]:
    """Addresses with a socket listening on `port` (Linux /proc/net/tcp and tcp6)."""
    import socket

    found = set()
    for path, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        if not Path(path).exists():
            continue
        for line in Path(path).read_text().splitlines()[1:]:
            fields = line.split()
            addr, hex_port = fields[1].split(":")
            if fields[3] == "0A" and int(hex_port, 16) == port:
                raw = bytes.fromhex(addr)
                raw = raw[::-1] if family == socket.AF_INET else b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                found.add(socket.inet_ntop(family, raw))
    return found


def test_calibrate_listens_on_loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """`meshplan calibrate`'s torchrun job joins a rendezvous store on 127.0.0.1 (is_host=0), with workers'
    MASTER_ADDR and gloo/NCCL sockets on loopback, like `meshplan run`."""
    import subprocess as sp

    from planner.calibration import launch

    seen: dict = {}
    real_popen = sp.Popen

    class FakeProc:
        stdout: list[str] = []

        def wait(self, timeout=None):
            return 1  # stop right after the launch line was built

    def popen(cmd, env=None, **kw):
        if "torch.distributed.run" in cmd:
            seen.update(cmd=cmd, env=env)
            return FakeProc()
        return real_popen(cmd, env=env, **kw)  # the loopback store helper itself

    monkeypatch.setattr(launch.subprocess, "Popen", popen)
    for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(RuntimeError):
        launch.measure(2, True)
    cmd, env = seen["cmd"], seen["env"]
    assert cmd[cmd.index("--rdzv-endpoint") + 1].startswith("127.0.0.1:")
    assert cmd[cmd.index("--rdzv-conf") + 1] == "is_host=0"
    assert cmd[cmd.index("--local-addr") + 1] == "127.0.0.1"
    assert env["MASTER_ADDR"] == "127.0.0.1" and env["GLOO_SOCKET_IFNAME"] == "lo"
