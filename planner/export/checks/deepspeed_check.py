"""Load a meshplan DeepSpeed 0.19.8 export with the installed DeepSpeed's `DeepSpeedConfig`.

    python deepspeed_check.py CONFIG --world-size N --tp T --pp P

`DeepSpeedConfig` reads the file as DeepSpeed does (hjson, header comments allowed), rejects removed keys
(MiCS), validates every section with its pydantic models and checks the batch identity against the
data-parallel size it gets from the process group (a fake one of the plan's world size) or, with TP/PP, from
an mpu reporting world / (T x P) as Megatron-DeepSpeed's does. Every top-level key of the file must also be
read by DeepSpeed: one it never looks at would be silently ignored. Prints one JSON line per export (check_main).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("DS_ACCELERATOR", "cpu")
sys.path.insert(0, str(Path(__file__).parent))
from check_main import run  # noqa: E402


class _Mpu:
    """The part of a model-parallel unit DeepSpeedConfig asks: the data-parallel world size."""

    def __init__(self, dp: int) -> None:
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp


class _Tracked(dict):
    """A config dict that records which top-level keys DeepSpeed reads."""

    read: set[str] = set()

    def __getitem__(self, key):
        _Tracked.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        _Tracked.read.add(key)
        return super().get(key, default)

    def __contains__(self, key):
        _Tracked.read.add(key)
        return super().__contains__(key)


def check(path: str, world_size: int, tp: int = 1, pp: int = 1, **_: object) -> str:
    import deepspeed.comm
    import hjson
    import torch.distributed as dist
    from deepspeed.runtime.config import DeepSpeedConfig
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    # DeepSpeedConfig asks DeepSpeed's communication layer for the rank and world size; answer from the fake
    # process group (initialising that layer's backend would wait for real peers).
    deepspeed.comm.get_rank = lambda group=None: dist.get_rank(group)
    deepspeed.comm.get_world_size = lambda group=None: dist.get_world_size(group)
    params = hjson.loads(Path(path).read_text())
    mpu = _Mpu(world_size // (tp * pp)) if tp * pp > 1 else None
    config = DeepSpeedConfig(_Tracked(params), mpu=mpu)
    ignored = sorted(set(params) - _Tracked.read)
    if ignored:
        raise ValueError(f"DeepSpeed does not read the key(s) {ignored}: they would be silently ignored")
    return (f"DeepSpeedConfig loaded: train_batch_size {config.train_batch_size} = micro "
            f"{config.train_micro_batch_size_per_gpu} x accumulation {config.gradient_accumulation_steps} x "
            f"dp {config.world_size}; ZeRO stage {config.zero_optimization_stage}")


def _probe() -> None:
    import deepspeed  # noqa: F401


def reset() -> None:
    import torch.distributed as dist

    dist.destroy_process_group()
    _Tracked.read = set()


if __name__ == "__main__":
    sys.exit(run(check, reset, _probe))
