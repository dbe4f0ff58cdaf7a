"""`meshplan run` refuses what cannot work before it launches anything, in one line (exit 2).

Every test replaces the launcher with one that fails the test if called, so "refused" also means "nothing
started". Items: a bad --rdzv-endpoint (port out of range, a host that does not resolve), the executor's
own options checked by the executor's parser in the parent (--checkpoint-every without a folder,
--collective-timeout out of range), the --data file (3 bytes, a folder, too short), a GPU plan on a machine
without those GPUs (no CUDA device, fewer GPUs than ranks, too little GPU memory), CPU ranks beyond the
host's memory. Also: the hint after a run whose measured step is more than 2x off an uncalibrated
prediction, and `--data-dtype`, which the out-of-vocabulary error suggests.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_inputs import check_refusal, invoke, tiny_plan_json, write

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "distributed"))

from dist_plans import make_plan  # noqa: E402

from planner.cli import _run_checks as run_checks  # noqa: E402
from planner.cli import run as run_cli  # noqa: E402
from planner.layout import Layout  # noqa: E402
from planner.plan import preflight  # noqa: E402

GiB = 2**30


@pytest.fixture(autouse=True)
def no_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """No rendezvous store process (it imports torch: seconds per test); the launcher is fake anyway."""
    from types import SimpleNamespace

    from planner import rendezvous

    store = SimpleNamespace(endpoint="127.0.0.1:29400", stop=lambda: None)
    monkeypatch.setattr(rendezvous.LoopbackStore, "start", staticmethod(lambda log: store))


@pytest.fixture
def no_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    def launch(*a: object, **k: object) -> None:
        raise AssertionError("torchrun must not start")

    monkeypatch.setattr(run_cli, "_launch", launch)


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write(tmp_path / "tiny.json", tiny_plan_json(4))


def _gpu_plan(tmp: Path, nodes: int = 1) -> Path:
    """llama3-8b as dp x tp8 on DGX H100 hosts (8 GPUs per host)."""
    layout = Layout(dp=nodes, tp=8, micro_batch=1, num_microbatches=8, sequence_parallel=True)
    plan = make_plan("llama3-8b", layout, seq_len=8192, dtype="bf16", cluster_name="dgx-h100")
    return write(tmp / "h100.json", plan.to_json())


def refused(args: list, *needles: str) -> str:
    code, out, err = invoke([str(a) for a in args])
    line = check_refusal(code, err)
    for needle in needles:
        assert needle in line, f"{needle!r} missing from: {line}"
    assert out == ""
    return line


# Item 6: --rdzv-endpoint ------------------------------------------------------------------------------
@pytest.mark.usefixtures("no_launch")
def test_bad_rendezvous_endpoints_are_one_line(tiny: Path, tmp_path: Path) -> None:
    run = ["run", tiny, "--run-dir", tmp_path / "r"]
    refused([*run, "--rdzv-endpoint", "notahost:99999"], "--rdzv-endpoint notahost:99999", "port 99999 is out of range")
    refused([*run, "--rdzv-endpoint", "nosuchhost.invalid:29500"], "'nosuchhost.invalid' does not resolve")
    refused([*run, "--rdzv-endpoint", "host:"], "expected HOST:PORT")
    refused([*run, "--rdzv-endpoint", ":29500"], "expected HOST:PORT")
    assert not (tmp_path / "r").exists()


# Items 7 and 9: the executor's options, parsed in the parent ----------------------------------------------
@pytest.mark.usefixtures("no_launch")
@pytest.mark.parametrize(("flags", "needles"), [
    (["--checkpoint-every", "1"], ("--checkpoint-every", "needs a folder", "--checkpoint-dir")),
    (["--collective-timeout", "0.001"], ("--collective-timeout", "0.001 seconds is out of range", "1 to 604800")),
    (["--collective-timeout", "0"], ("--collective-timeout", "out of range")),
    (["--collective-timeout", "1e300"], ("--collective-timeout", "out of range")),
    (["--collective-timeout", "nan"], ("--collective-timeout", "out of range")),
])
def test_executor_options_are_checked_before_launching(tiny: Path, tmp_path: Path, flags: list[str],
                                                      needles: tuple[str, ...]) -> None:
    refused(["run", tiny, "--run-dir", tmp_path / "r", *flags], *needles)


def test_the_timeout_range_is_the_executors(tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """1 s is accepted and reaches the workers' command line (the same bound in both places)."""
    seen: dict = {}
    monkeypatch.setattr(run_cli, "_launch", lambda cmd, env, log: (seen.update(cmd=cmd), (0, []))[1])
    code, _, err = invoke(["run", str(tiny), "--run-dir", str(tmp_path / "r"), "--collective-timeout", "1"])
    assert code == 0, err
    assert seen["cmd"][seen["cmd"].index("--collective-timeout") + 1] == "1.0"


# Items 8 and 15: the token file -----------------------------------------------------------------------------
@pytest.mark.usefixtures("no_launch")
def test_bad_token_files_are_one_line(tiny: Path, tmp_path: Path) -> None:
    run = ["run", tiny, "--run-dir", tmp_path / "r", "--data"]
    three = write(tmp_path / "three.bin", b"abc")
    refused([*run, three], f"--data {three}", "3 bytes is not a whole number of uint16 tokens", "--data-dtype")
    refused([*run, tmp_path], f"--data {tmp_path}", "is a folder, not a token file")  # it said "no such file"
    refused([*run, tmp_path / "none.bin"], "No such file")
    short = tmp_path / "short.bin"
    np.arange(10, dtype=np.uint16).tofile(short)
    refused([*run, short], "10 uint16 tokens, fewer than one sequence of seq_len+1=65")
    refused([*run, short, "--data-dtype", "uint32"], "5 uint32 tokens")  # the dtype given is the one checked


def test_data_dtype_reaches_the_workers(tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The out-of-vocabulary error tells the user to pass --data-dtype: `meshplan run` must accept it."""
    tokens = tmp_path / "tokens.bin"
    np.zeros(200, dtype=np.uint32).tofile(tokens)
    seen: dict = {}
    monkeypatch.setattr(run_cli, "_launch", lambda cmd, env, log: (seen.update(cmd=cmd), (0, []))[1])
    code, _, err = invoke(["run", str(tiny), "--run-dir", str(tmp_path / "r"), "--data", str(tokens),
                           "--data-dtype", "uint32"])
    assert code == 0, err
    cmd = seen["cmd"]
    assert cmd[cmd.index("--data-dtype") + 1] == "uint32"
    import executor.data

    source = Path(executor.data.__file__).read_text()
    assert "meshplan run --data-dtype" in source  # the suggestion names the flag meshplan run has


# Item 13: the machine ---------------------------------------------------------------------------------------
@pytest.mark.usefixtures("no_launch")
def test_a_gpu_plan_without_gpus_is_refused_before_launching(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preflight, "visible_gpus", lambda: [])
    plan = _gpu_plan(tmp_path)
    refused(["run", plan, "--run-dir", tmp_path / "r"], "8 h100-sxm GPUs", "no CUDA device", "nothing was started",
            "--smoke", f"meshplan replan {plan} --gpus N")
    assert not (tmp_path / "r").exists()


@pytest.mark.usefixtures("no_launch")
def test_fewer_gpus_than_ranks_suggests_a_replan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    four = [preflight.Gpu(i, "NVIDIA H100 80GB HBM3", 80 * GiB) for i in range(4)]
    monkeypatch.setattr(preflight, "visible_gpus", lambda: four)
    plan = _gpu_plan(tmp_path)
    refused(["run", plan, "--run-dir", tmp_path / "r"], "8 ranks of the plan run on this host",
            "only 4 CUDA device(s)", f"meshplan replan {plan} --gpus 4")


@pytest.mark.usefixtures("no_launch")
def test_too_little_gpu_memory_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small = [preflight.Gpu(i, "NVIDIA A10", 1 * GiB) for i in range(8)]
    monkeypatch.setattr(preflight, "visible_gpus", lambda: small)
    refused(["run", _gpu_plan(tmp_path), "--run-dir", tmp_path / "r"], "prediction.peak_memory_bytes",
            "exceeds the 1.0 GiB of GPU 0 (NVIDIA A10)")


@pytest.mark.usefixtures("no_launch")
def test_cpu_ranks_beyond_host_memory_are_refused(tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preflight, "available_host_memory_bytes", lambda: 500 * 2**20)
    refused(["run", tiny, "--run-dir", tmp_path / "r"], "4 CPU ranks need about", "0.5 GiB of memory is available",
            "--gpus 2")


def test_cuda_visible_devices_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert preflight.visible_gpus() == []


# Item 14: the calibration hint -------------------------------------------------------------------------------
def _fake_run(step_s: float):  # noqa: ANN202
    """A launcher that writes the metrics a run measuring `step_s` per step would write."""

    def launch(cmd: list[str], env: dict, log: Path) -> tuple[int, list[str]]:
        metrics = Path(cmd[cmd.index("--metrics") + 1])
        rows = [{"step": s, "loss": 5.0, "step_time_s": step_s, "tokens_per_s": 512 / step_s, "mfu": 0.01}
                for s in range(1, 4)]
        metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return 0, []

    return launch


def test_a_run_far_off_an_uncalibrated_prediction_names_calibration(tiny: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    predicted = json.loads(tiny.read_text())["prediction"]["step_time_s"]
    monkeypatch.setattr(run_cli, "_launch", _fake_run(40 * predicted))
    code, out, err = invoke(["run", str(tiny), "--run-dir", str(tmp_path / "r")])
    assert code == 0, err
    notes = [ln for ln in err.splitlines() if "calibrate" in ln]
    assert len(notes) == 1 and "is 40.0x the prediction" in notes[0], err
    assert f"meshplan run {tiny} --calibrate" in notes[0] and "not calibrated for this machine" in notes[0]
    assert "measured vs predicted" in out

    monkeypatch.setattr(run_cli, "_launch", _fake_run(1.5 * predicted))  # within 2x: nothing to say
    code, _, err = invoke(["run", str(tiny), "--run-dir", str(tmp_path / "r2")])
    assert code == 0 and "calibrate" not in err, err


def test_the_hint_knows_a_calibrated_profile() -> None:
    plan = make_plan("tiny", Layout(dp=2, micro_batch=4))
    data = json.loads(plan.to_json())
    data["inputs"]["cluster"]["gpus"]["cpu"]["sources"]["peak_flops"] = "measured by meshplan calibrate on host x"
    from planner.plan import Plan

    calibrated = Plan.model_validate(data)
    hint = run_checks.calibration_hint(calibrated, 0.5, 0.1, Path("p.json"))
    assert hint is not None and "although the plan's profile was calibrated" in hint
    assert run_checks.calibration_hint(plan, 0.01, 0.1, Path("p.json")).startswith("note: the measured step (10.0 ms) "
                                                                                  "is 1/10.0 the prediction")


# Item 18: --smoke -------------------------------------------------------------------------------------------
def test_smoke_shows_no_deviation_against_the_full_size_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = write(tmp_path / "p.json", tiny_plan_json(4))
    monkeypatch.setattr(run_cli, "_launch", _fake_run(100.0))
    code, out, err = invoke(["run", str(plan), "--run-dir", str(tmp_path / "r"), "--smoke", "--json", "-"])
    assert code == 0, err
    summary = json.loads(out)
    assert summary["smoke"] is True and summary["deviation"] is None
    assert "calibrate" not in err  # no hint either: there is no prediction for the toy model
    code, out, err = invoke(["run", str(plan), "--run-dir", str(tmp_path / "r2"), "--smoke"])
    assert code == 0 and "predicted" not in out and "deviation" not in out, out


@pytest.mark.usefixtures("no_launch")
def test_an_existing_metrics_file_is_kept_without_force(tiny: Path, tmp_path: Path) -> None:
    """The executor starts --metrics over: a user's file of that name is refused unless --force (or --resume,
    which appends to it)."""
    mine = write(tmp_path / "mine.jsonl", "keep me\n")
    refused(["run", tiny, "--run-dir", tmp_path / "r", "--metrics", mine], "mine.jsonl: file exists", "--force")
    assert mine.read_text() == "keep me\n"
    refused(["run", tiny, "--run-dir", tmp_path / "r", "--metrics", tmp_path / "no" / "m.jsonl"],
            f"folder {tmp_path / 'no'} does not exist")
