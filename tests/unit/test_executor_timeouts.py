"""executor.timeouts without a process group: a failed collective becomes one line naming the step, the phase,
the collective and torch's message. The tracebacks are real, raised through code compiled under the file
names of the torch and executor modules involved (what `where_raised` reads)."""

from __future__ import annotations

import pytest

from executor import timeouts


def _raiser(message: str, torch_file: str, torch_fn: str, executor_file: str, executor_fn: str):
    """executor_fn (in executor_file) calls torch_fn (in torch_file), which raises RuntimeError(message)."""
    scope: dict = {"message": message}
    exec(compile(f"def {torch_fn}():\n    raise RuntimeError(message)\n", torch_file, "exec"), scope)
    exec(compile(f"def {executor_fn}():\n    {torch_fn}()\n", executor_file, "exec"), scope)
    return scope[executor_fn]


SITE = "/venv/lib/python3.11/site-packages/torch/distributed"
GLOO_TIMEOUT = "[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 5000ms for recv operation to complete"


def test_timeout_in_fsdp_all_gather(monkeypatch) -> None:
    monkeypatch.setitem(timeouts._state, "timeout_s", 5.0)
    fn = _raiser(GLOO_TIMEOUT, f"{SITE}/fsdp/_fully_shard/_fsdp_collectives.py", "foreach_all_gather",
                 "/repo/executor/step.py", "forward_backward")
    with pytest.raises(timeouts.CollectiveFailure) as info, timeouts.phase("training step", 3):
        fn()
    assert str(info.value) == (
        "rank ?: collective timed out after 5 s at step 3 in training step > forward/backward: FSDP all-gather "
        "at executor.step.forward_backward; torch: Timed out waiting 5000ms for recv operation to complete"
    )
    assert isinstance(info.value.__cause__, RuntimeError)


def test_lost_peer_in_loss_all_reduce() -> None:
    msg = "[../gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:6319"
    fn = _raiser(msg, f"{SITE}/distributed_c10d.py", "all_reduce", "/repo/executor/step.py", "global_loss")
    with pytest.raises(timeouts.CollectiveFailure) as info, timeouts.phase("training step", 4):
        fn()
    assert str(info.value) == (
        "rank ?: collective failed (a peer rank crashed or was stopped) at step 4 in training step > loss "
        "all-reduce: c10d all_reduce at executor.step.global_loss; torch: Connection closed by peer "
        "[127.0.0.1]:6319"
    )


def test_other_errors_pass_through() -> None:
    fn = _raiser("shape mismatch", "/repo/executor/model.py", "matmul", "/repo/executor/step.py", "forward_backward")
    with pytest.raises(RuntimeError, match="^shape mismatch$"), timeouts.phase("training step", 1):
        fn()
    with pytest.raises(ValueError, match="no"), timeouts.phase("training step", 1):
        raise ValueError("no")


def test_no_groups_without_a_process_group() -> None:
    assert timeouts.set_group_timeouts(7.0) == 0 and timeouts._state["timeout_s"] == 7.0
    timeouts._state["timeout_s"] = None
