"""Property-based fuzzing (hypothesis) of every file loader and of the `meshplan` CLI entry points.

Loaders (cluster, GPU and link YAML, model YAML/JSON, Hugging Face config.json, plan JSON) get mutated
valid files (`fuzz_inputs.mutated`) and raw junk (random bytes, truncated or overwritten files). They may
return a valid object or refuse with `UserError` / `ProfileError` (InfeasibleError is a UserError) in one
line; any other exception is a bug. What they accept must also be usable: a loaded cluster builds its
topology, a loaded model answers its parameter and FLOP counts.

The CLI (`plan`, `evaluate`, `model`, `topology`, `export`, `explain`, `compare`) gets generated argument
lists built from valid, edge and invalid option values and generated files; it must exit 0 or 2, and a
refusal is exactly one `error: ...` line on stderr, never a traceback.

File types: generated inputs and outputs include folders, FIFOs (with a helper thread at the other end),
/dev/null, character device nodes (mknod, as root), symlinks and dangling symlinks; documents nested up to
1,500 levels; plan predictions set to NaN, Infinity or negative values (each must be refused). `meshplan run`
gets generated flags with torchrun replaced by a recorder (whatever it would launch must pass the workers'
option parser).

Sizes: `settings(max_examples=...)` per test, about 4,100 inputs in all, a minute or two on the 2-core CI
machine. The suite derandomizes (the `ci` profile, tests/conftest.py), so every run of the test command tries
the same inputs; MESHPLAN_FUZZ_RANDOM=1 explores new ones on each run. The total tried is printed when the module finishes.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_inputs import (
    HF_CONFIGS,
    check_refusal,
    hf_data,
    invoke,
    pipeline_plan_json,
    preset_data,
    profile_data,
    special_file,
    tiny_plan_json,
    write,
)
from fuzz_inputs import BAD_NUMBERS, INTS, SPECIAL_FILES, deep_document, junk_bytes, mutated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hardware_profiles as hp
from planner.errors import UserError
from planner.model import load_model
from planner.model.hf_import import from_hf_config
from planner.plan import Plan

TRIED: Counter = Counter()
_names = itertools.count()


def fuzz(examples: int) -> settings:
    """Per-test size (times MESHPLAN_FUZZ_SCALE, for longer local hunts); the rest (deadline, derandomize
    under CI) comes from the loaded profile."""
    return settings(max_examples=max(1, round(examples * float(os.environ.get("MESHPLAN_FUZZ_SCALE", "1")))),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, request) -> Path:  # noqa: ANN001
    """One folder for every generated file, and the working folder (relative outputs land there); prints
    the number of inputs tried when the module ends."""
    folder = tmp_path_factory.mktemp("fuzz")
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield folder
    finally:
        os.chdir(before)
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        parts = ", ".join(f"{k} {v}" for k, v in sorted(TRIED.items()))
        print(f"\nfuzz: {sum(TRIED.values())} generated inputs ({parts})")


def fresh(workdir: Path, suffix: str) -> Path:
    return workdir / f"f{next(_names)}{suffix}"


def clean(call: Callable[[], Any]) -> Any:
    """Run a loader: its result, or None after a clean refusal (one non-empty line); anything else raises."""
    try:
        return call()
    except (UserError, hp.ProfileError) as exc:
        text = str(exc)
        assert text.strip() and len(text.splitlines()) == 1, repr(text)
        return None


def _dump(doc: Any, suffix: str) -> str:
    return json.dumps(doc) if suffix == ".json" else yaml.safe_dump(doc, sort_keys=False, allow_unicode=False)


# Loaders ------------------------------------------------------------------------------------------------
CLUSTERS = [profile_data("clusters", n) for n in ("local-cpu", "dgx-h100", "hetero-a100-h100", "gb200-nvl72")]
GPUS = [profile_data("gpus", n) for n in ("cpu", "h100-sxm", "mi300x")]
LINKS = [profile_data("links", n) for n in ("loopback-gloo", "ib-ndr", "nvlink4")]
MODELS = [preset_data(n) for n in ("tiny", "tiny-moe", "deepseek-v3", "gpt3-175b")]
HF = [hf_data(p.stem) for p in sorted(HF_CONFIGS.glob("*.json"))]
PLANS = [json.loads(tiny_plan_json()), json.loads(pipeline_plan_json())]
SIZES = st.one_of(st.none(), st.tuples(st.sampled_from(["nodes", "gpus"]), st.integers(min_value=-2, max_value=40)))


def load_cluster(path: Path, size: tuple[str, int] | None) -> None:
    from planner.topology import Topology

    cluster = clean(lambda: hp.cluster(str(path), **({size[0]: size[1]} if size else {})))
    if cluster is not None and cluster.num_gpus <= 512:  # accepted: it must also build its topology graph
        Topology(cluster)


def load_model_file(path: Path) -> None:
    spec = clean(lambda: load_model(str(path)))
    if spec is not None:  # accepted: counts must work (every consumer asks the spec for them)
        spec.num_params()
        spec.training_flops_per_token(min(64, spec.max_seq_len), "selective")


@fuzz(500)
@given(doc=st.sampled_from(CLUSTERS).flatmap(mutated), size=SIZES)
def test_cluster_yaml(workdir: Path, doc: dict, size: tuple[str, int] | None) -> None:
    TRIED["cluster YAML"] += 1
    load_cluster(write(fresh(workdir, ".yaml"), _dump(doc, ".yaml")), size)


@fuzz(350)
@given(doc=st.sampled_from(GPUS).flatmap(mutated))
def test_gpu_yaml(workdir: Path, doc: dict) -> None:
    TRIED["GPU YAML"] += 1
    path = write(fresh(workdir, ".yaml"), _dump(doc, ".yaml"))
    clean(lambda: hp.gpu(str(path)))


@fuzz(350)
@given(doc=st.sampled_from(LINKS).flatmap(mutated))
def test_link_yaml(workdir: Path, doc: dict) -> None:
    TRIED["link YAML"] += 1
    path = write(fresh(workdir, ".yaml"), _dump(doc, ".yaml"))
    clean(lambda: hp.link(str(path)))


@fuzz(500)
@given(doc=st.sampled_from(MODELS).flatmap(mutated), suffix=st.sampled_from([".yaml", ".json"]))
def test_model_file(workdir: Path, doc: dict, suffix: str) -> None:
    TRIED["model YAML/JSON"] += 1
    load_model_file(write(fresh(workdir, suffix), _dump(doc, suffix)))


@fuzz(400)
@given(doc=st.sampled_from(HF).flatmap(mutated))
def test_hf_config(workdir: Path, doc: dict) -> None:
    TRIED["HF config.json"] += 1
    path = write(fresh(workdir, ".json"), json.dumps(doc))
    clean(lambda: from_hf_config(path))
    load_model_file(path)


@fuzz(500)
@given(doc=st.sampled_from(PLANS).flatmap(mutated))
def test_plan_json(workdir: Path, doc: dict) -> None:
    TRIED["plan JSON"] += 1
    path = write(fresh(workdir, ".json"), json.dumps(doc))
    clean(lambda: Plan.load(path))


RAW_KINDS: dict[str, tuple[str, str, Callable[[Path], Any]]] = {
    "cluster": (yaml.safe_dump(CLUSTERS[1]), ".yaml", lambda p: load_cluster(p, None)),
    "gpu": (yaml.safe_dump(GPUS[1]), ".yaml", lambda p: clean(lambda: hp.gpu(str(p)))),
    "link": (yaml.safe_dump(LINKS[1]), ".yaml", lambda p: clean(lambda: hp.link(str(p)))),
    "model": (yaml.safe_dump(MODELS[0]), ".yaml", load_model_file),
    "hf": (json.dumps(HF[0]), ".json", lambda p: (clean(lambda: from_hf_config(p)), load_model_file(p))),
    "plan": (tiny_plan_json(), ".json", lambda p: clean(lambda: Plan.load(p))),
}


@fuzz(600)
@given(data=st.data(), kind=st.sampled_from(sorted(RAW_KINDS)))
def test_raw_bytes(workdir: Path, data: st.DataObject, kind: str) -> None:
    TRIED["raw bytes"] += 1
    text, suffix, load = RAW_KINDS[kind]
    load(write(fresh(workdir, suffix), data.draw(junk_bytes(text))))


@fuzz(60)
@given(data=st.data(), kind=st.sampled_from(sorted(RAW_KINDS)))
def test_nesting_depth(workdir: Path, data: st.DataObject, kind: str) -> None:
    """Documents nested 65 to 1,500 levels deep: a clean refusal naming the depth, never a RecursionError."""
    TRIED["deeply nested"] += 1
    _, suffix, load = RAW_KINDS[kind]
    path = write(fresh(workdir, suffix), data.draw(deep_document(suffix)))
    if kind == "plan":
        with pytest.raises(UserError, match="nested deeper than 64 levels"):
            Plan.load(path)
    else:
        load(path)


def _numbers(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Paths to every number (not bool) inside dicts and lists."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _numbers(v, (*prefix, k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _numbers(v, (*prefix, i))]
    return [prefix] if isinstance(node, int | float) and not isinstance(node, bool) else []


@fuzz(300)
@given(doc=st.sampled_from(PLANS), data=st.data())
def test_impossible_prediction_numbers(workdir: Path, doc: dict, data: st.DataObject) -> None:
    """Any number of a plan's prediction set to NaN, +-Infinity or a negative value is refused on load (one
    line naming the file): the schema bounds every one of them."""
    TRIED["plan NaN/Infinity/negative"] += 1
    doc = json.loads(json.dumps(doc))
    paths = _numbers(doc["prediction"])
    path = paths[data.draw(st.integers(min_value=0, max_value=len(paths) - 1))]
    parent = doc["prediction"]
    for key in path[:-1]:
        parent = parent[key]
    bad = data.draw(st.sampled_from(BAD_NUMBERS))
    if "error_band" in path and math.isfinite(bad):
        bad = -1.0 - abs(bad)  # a band's ends are deviations: negative is fine, at or below -100 % is impossible
    parent[path[-1]] = bad
    file = write(fresh(workdir, ".json"), json.dumps(doc))  # NaN and Infinity as Python's json writes them
    with pytest.raises(UserError) as info:
        Plan.load(file)
    assert str(file) in str(info.value) and len(str(info.value).splitlines()) == 1


# CLI ----------------------------------------------------------------------------------------------------
def _file(suffix: str, content: st.SearchStrategy) -> st.SearchStrategy:
    """A generated input file, written by the test: ("FILE", suffix, text or bytes)."""
    return content.map(lambda c: ("FILE", suffix, c))


def _special(suffix: str, content: st.SearchStrategy) -> st.SearchStrategy:
    """An input path that is not a regular file: ("SPECIAL", suffix, kind, content)."""
    return st.tuples(st.just("SPECIAL"), st.just(suffix), st.sampled_from(SPECIAL_FILES), content)


MODEL_ARG = st.one_of(
    st.sampled_from(["tiny", "tiny-moe", "nosuch", ""]),
    _special(".yaml", st.just(yaml.safe_dump(MODELS[0]))),
    _file(".json", deep_document(".json")),
    _file(".yaml", st.sampled_from(MODELS[:2]).flatmap(mutated).map(yaml.safe_dump)),
    _file(".json", st.sampled_from(HF).flatmap(mutated).map(json.dumps)),
    _file(".yaml", junk_bytes(yaml.safe_dump(MODELS[0]))),
)
CLUSTER_ARG = st.one_of(
    st.sampled_from(["local-cpu", "local-cpu", "dgx-h100", "nosuch", "x.yaml"]),
    _special(".yaml", st.just(yaml.safe_dump(CLUSTERS[0]))),
    _file(".yaml", deep_document(".yaml")),
    _file(".yaml", st.sampled_from(CLUSTERS[:2]).flatmap(mutated).map(yaml.safe_dump)),
    _file(".yaml", junk_bytes(yaml.safe_dump(CLUSTERS[0]))),
)
PLAN_ARG = st.one_of(
    st.just(("FILE", ".json", tiny_plan_json())),
    st.just(("FILE", ".json", pipeline_plan_json())),
    _file(".json", st.sampled_from(PLANS).flatmap(mutated).map(json.dumps)),
    _file(".json", junk_bytes(tiny_plan_json())),
    _special(".json", st.just(tiny_plan_json())),
    _file(".json", deep_document(".json")),
    st.just("missing.json"),
)
OUT_ARG = st.sampled_from([("OUT", "new"), ("OUT", "existing"), "-", ("OUT", "dir"), ("OUT", "fifo"),
                           ("OUT", "devnull"), ("OUT", "chardev"), ("OUT", "symlink"), ("OUT", "dangling"),
                           ("OUT", "missing-folder")])


def _options(draw: st.DrawFn, table: dict[str, st.SearchStrategy], max_count: int = 6) -> list:
    names = draw(st.lists(st.sampled_from(sorted(table)), max_size=max_count, unique=True))
    args: list = []
    for name in names:
        value = draw(table[name])
        args += [name] if value is None else [name, value]
    return args


INPUT_OPTIONS = {
    "--model": MODEL_ARG, "--cluster": CLUSTER_ARG, "--gpus": st.sampled_from(["1", "2", "3", "4", "8", "0", "-1", "x"]),
    "--nodes": st.sampled_from(["1", "2", "0", "x"]), "--global-batch": INTS,
    "--global-batch-tokens": st.sampled_from(["512", "100", "0", "64"]),
    "--seq-len": st.sampled_from(["16", "32", "64", "65", "0", "128", "x"]), "--no-flash-attention": st.none(),
}
PIN_OPTIONS = {
    "--tp": INTS, "--pp": INTS, "--dp": INTS, "--cp": INTS, "--ep": INTS, "--micro-batch": INTS,
    "--num-microbatches": INTS, "--schedule": st.sampled_from(["gpipe", "1f1b", "interleaved", "zb-h1", "bogus"]),
    "--virtual-stages": INTS, "--zero": st.sampled_from(["0", "1", "2", "3", "4", "-1"]), "--dp-shard": INTS,
    "--recompute": st.sampled_from(["none", "selective", "full", "some"]), "--sequence-parallel": st.none(),
    "--mesh-axes": st.sampled_from(["pp,dp_replicate,dp_shard,cp,tp", "tp,cp,dp_shard,dp_replicate,pp", "pp,tp", "x"]),
    "--max-tp": INTS, "--max-micro-batch": INTS,
}
LAYOUTS = st.sampled_from(["dp=4", "dp=2,tp=2", "tp=2,pp=2,mb=2,m=4", "pp=2,schedule=interleaved,v=2", "tp=3",
                           "dp=2,zero=3,dp_shard=2", "x", "tp=", "sp=maybe", "mesh=pp/tp", "dp=4,dp=2", "bogus=1"])


@st.composite
def cli_argv(draw: st.DrawFn) -> list:
    command = draw(st.sampled_from(["plan", "evaluate", "model", "topology", "export", "explain", "compare"]))
    base = ["--model", "tiny", "--cluster", "local-cpu", "--gpus", "4", "--seq-len", "64", "--global-batch", "8"]
    if command in ("plan", "evaluate", "compare"):
        # Start from a small valid request (fast to plan) and override some of it: later options win.
        args = [command, *(base if draw(st.booleans()) else ["--model", "tiny"])]
        args += _options(draw, INPUT_OPTIONS, 3) + _options(draw, PIN_OPTIONS, 4)
        if command == "plan":
            args += _options(draw, {"--top": st.sampled_from(["1", "3", "0"]), "--json": OUT_ARG, "--force": st.none()}, 2)
        elif command == "evaluate":
            args += _options(draw, {"--allow-oom": st.none(), "--json": OUT_ARG, "--force": st.none()}, 2)
        else:
            args[1:1] = draw(st.lists(PLAN_ARG, max_size=2))
            args += _options(draw, {"--layout": LAYOUTS, "--top": st.sampled_from(["1", "2", "0"]),
                                    "--csv": OUT_ARG, "--json": OUT_ARG}, 3)
        return args
    if command == "model":
        return ["model", draw(MODEL_ARG), *_options(draw, {"--seq-len": INTS, "--json": OUT_ARG, "--force": st.none()}, 2)]
    if command == "topology":
        return ["topology", draw(CLUSTER_ARG), *_options(draw, {
            "--nodes": st.sampled_from(["1", "2", "0", "x", "99999999999"]), "--gpus": INTS, "--graphml": OUT_ARG,
            "--json": OUT_ARG, "--force": st.none()}, 3)]
    if command == "export":
        return ["export", draw(PLAN_ARG), *_options(draw, {
            "--to": st.sampled_from(["torchtitan", "megatron", "deepspeed", "torchrun", "slurm", "nowhere"]),
            "--out": OUT_ARG, "--rdzv-host": st.sampled_from(["node0", "a b", "$(touch x)", ""]),
            "--rdzv-port": st.sampled_from(["29500", "0", "70000"]), "--plan-path": st.sampled_from(["p.json", "a b;c"]),
            "--json": OUT_ARG, "--force": st.none()}, 4)]
    return ["explain", draw(PLAN_ARG), *_options(draw, {"--json": OUT_ARG, "--force": st.none()}, 2)]


def materialize(workdir: Path, argv: list) -> tuple[list[str], list]:
    """Write the generated files of `argv`; plain strings, and the FIFO helpers to close after the command."""
    out, peers = [], []
    for arg in argv:
        if isinstance(arg, tuple) and arg[0] == "FILE":
            out.append(str(write(fresh(workdir, arg[1]), arg[2])))
        elif isinstance(arg, tuple) and arg[0] == "SPECIAL":
            path, peer = special_file(fresh(workdir, arg[1]), arg[2], arg[3])
            out.append(str(path))
            peers += [peer] if peer is not None else []
        elif isinstance(arg, tuple) and arg[0] == "OUT":
            path = fresh(workdir, ".out")
            if arg[1] == "existing":
                path.write_text("keep me\n")
            elif arg[1] == "missing-folder":
                path = path / "sub" / "out.json"
            elif arg[1] != "new":
                path, peer = special_file(path, arg[1], "keep me\n" if arg[1] == "symlink" else b"")
                peers += [peer] if peer is not None else []
            out.append(str(path))
        else:
            out.append(arg)
    return out, peers


def run_cli(workdir: Path, argv: list) -> tuple[int, str]:
    """Run generated arguments; the exit code and stderr, after checking the one-line refusal contract."""
    args, peers = materialize(workdir, argv)
    try:
        code, _, err = invoke(args)
    finally:
        for peer in peers:
            peer.close()
    assert code in (0, 2), (args, code, err)
    if code == 2:
        check_refusal(code, err)
    assert "Traceback" not in err
    return code, err


@fuzz(250)
@given(argv=cli_argv())
def test_cli(workdir: Path, argv: list) -> None:
    TRIED["CLI argument lists"] += 1
    run_cli(workdir, argv)


RUN_OPTIONS = {
    "--steps": INTS, "--nproc": st.sampled_from(["1", "2", "3", "4", "0", "x"]), "--nnodes": st.sampled_from(["1", "2", "0"]),
    "--node-rank": st.sampled_from(["0", "1", "-1"]),
    "--rdzv-endpoint": st.sampled_from(["127.0.0.1:29500", "notahost:99999", "nosuchhost.invalid:29500", "host",
                                        ":1", "localhost:0", "[::1]:29500"]),
    "--data": st.one_of(_file(".bin", st.binary(max_size=600)), _special(".bin", st.binary(min_size=2, max_size=600)),
                        st.just("missing.bin")),
    "--data-dtype": st.sampled_from(["uint16", "uint32", "int8"]), "--checkpoint-every": st.sampled_from(["0", "1", "-1", "x"]),
    "--checkpoint-dir": st.one_of(st.just(("OUT", "dir")), st.just(("OUT", "new"))),
    "--collective-timeout": st.sampled_from(["0.001", "0", "1", "5", "-1", "nan", "inf", "1e300", "604800", "x"]),
    "--resume": st.one_of(st.just(("OUT", "dir")), st.just("missing-ckpt")), "--max-restarts": st.sampled_from(["0", "1", "-1"]),
    "--json": OUT_ARG, "--metrics": OUT_ARG, "--smoke": st.none(), "--force": st.none(),
}


@st.composite
def run_argv(draw: st.DrawFn) -> list:
    plan = draw(st.one_of(st.none(), PLAN_ARG))
    args = ["run", *([] if plan is None else [plan])]
    return args + draw(st.just(["--run-dir", ("OUT", "new")])) + _options(draw, RUN_OPTIONS, 5)


@pytest.fixture(scope="module")
def fake_launch():  # noqa: ANN201
    """`meshplan run` with torchrun replaced by a launcher that records the command and writes one step of
    metrics, and no rendezvous store process: the fuzzing is about what the CLI accepts and how it refuses,
    not about training."""
    from types import SimpleNamespace

    from planner import rendezvous
    from planner.cli import run as run_module

    launched: list[list[str]] = []
    store = SimpleNamespace(endpoint="127.0.0.1:29400", stop=lambda: None)  # no store process (it loads torch)

    def launch(cmd: list[str], env: dict, log: Path) -> tuple[int, list[str]]:
        """Record the command and write the metrics rank 0 would (to a regular or new file, as it does)."""
        launched.append(cmd)
        metrics = Path(cmd[cmd.index("--metrics") + 1])
        if metrics.parent.is_dir() and (metrics.is_file() or not metrics.exists()):
            metrics.write_text(json.dumps({"step": 1, "loss": 5.0, "step_time_s": 0.1, "tokens_per_s": 5120.0,
                                           "mfu": None}) + "\n")
        return 0, []

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run_module, "_launch", launch)
        mp.setattr(rendezvous.LoopbackStore, "start", staticmethod(lambda log: store))
        yield launched


@fuzz(150)
@given(argv=run_argv())
def test_run_flags(workdir: Path, fake_launch: list, argv: list) -> None:
    """`meshplan run` with generated flags: exit 0 (launched) or 2 with one line, never a traceback; whatever
    was launched passed the executor's own option parser."""
    TRIED["meshplan run flags"] += 1
    before = len(fake_launch)
    code, err = run_cli(workdir, argv)
    if len(fake_launch) > before:
        from planner.plan.run_options import parse_args

        cmd = fake_launch[-1]
        parse_args(cmd[cmd.index("executor") + 1:])  # the workers would accept it
    else:
        assert code == 2, err
