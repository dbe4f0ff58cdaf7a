"""Load a meshplan TorchTitan 0.3 export with the installed TorchTitan, build it on a fake process group.

    python torchtitan_check.py SCRIPT --world-size N      # in an interpreter with torchtitan (see check_main)

Steps, each TorchTitan's own code: `ConfigManager().parse_args` on the script's TITAN_ARGS (with its
config-registry entry on sys.path), `ParallelDims.from_config` + `build_mesh` on a fake process group of the
plan's world size (rank 0), the Trainer's sequence-length and batch checks, the model built on the meta
device, then `pipelining_fn` (PP) or `parallelize_fn`: TP, CP, activation checkpointing, FSDP/HSDP/DDP, EP.
Prints one JSON line per export (check_main).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from check_main import run  # noqa: E402
from shell_text import read_array, read_heredoc  # noqa: E402


def check(path: str, world_size: int, **_: object) -> str:
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torchtitan.config.manager import ConfigManager
    from torchtitan.distributed import utils as dist_utils
    from torchtitan.distributed.parallel_dims import ParallelDims

    text = Path(path).read_text()
    entry = read_heredoc(text, "PY")
    if entry is not None:
        folder = tempfile.mkdtemp(prefix="meshplan-titan-")
        Path(folder, "meshplan_titan.py").write_text(entry)
        sys.path.insert(0, folder)
        sys.modules.pop("meshplan_titan", None)
    args = read_array(text, "TITAN_ARGS")
    config = ConfigManager().parse_args(args)
    if not torch.cuda.is_available():
        # TorchTitan falls back to "cuda" when no accelerator is found (tools/utils.get_device_info); a dry build
        # on a machine without GPUs builds the same meshes and wrappers on CPU devices.
        for module in [m for name, m in sys.modules.items() if name.startswith("torchtitan")]:
            if getattr(module, "device_type", None) == "cuda":
                module.device_type = "cpu"
            if getattr(module, "device_module", None) is torch.cuda:
                module.device_module = torch.cpu
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    dims = ParallelDims.from_config(config.parallelism, world_size)
    dims.build_mesh()
    # Trainer.__init__'s checks (torchtitan/trainer.py), in its order.
    divisor = (dims.tp if config.parallelism.enable_sequence_parallel else 1) * (2 * dims.cp if dims.cp > 1 else 1)
    if config.training.seq_len % divisor:
        raise ValueError(f"sequence length {config.training.seq_len} not divisible by {divisor}")
    dist_utils.set_spmd_backend(config.parallelism.spmd_backend)
    spec = config.model_spec
    model_config = spec.model
    model_config.update_from_config(config=config)
    config._validate_cuda_graphs()
    batch = dims.dp_replicate * dims.dp_shard
    global_batch = config.training.global_batch_size
    if global_batch % (config.training.local_batch_size * batch):
        raise ValueError(f"global batch {global_batch} is not a multiple of local batch "
                         f"{config.training.local_batch_size} x data-parallel degree {batch}")
    with torch.device("meta"):
        model = model_config.build()
    loss_fn = config.loss.build(compile_config=config.compile)
    common = dict(parallel_dims=dims, training=config.training, parallelism=config.parallelism,
                  compile_config=config.compile, ac_config=config.activation_checkpoint, dump_folder=config.dump_folder)
    if dims.pp_enabled:
        _, parts, _, _ = spec.pipelining_fn(model, device=torch.device("cpu"), model_config=model_config,
                                            parallelize_fn=spec.parallelize_fn, loss_fn=loss_fn, **common)
    else:
        parts = [spec.parallelize_fn(model, **common)]
    params = sum(p.numel() for m in parts for p in m.parameters())
    return (f"TorchTitan built {spec.name}/{spec.flavor} on {world_size} fake ranks: pp={dims.pp} "
            f"dp_replicate={dims.dp_replicate} dp_shard={dims.dp_shard} cp={dims.cp} tp={dims.tp} ep={dims.ep}, "
            f"{len(parts)} model part(s) on rank 0 ({params:,} parameter elements)")


def _probe() -> None:
    import torchtitan  # noqa: F401


def reset() -> None:
    import torch.distributed as dist

    dist.destroy_process_group()
    sys.modules.pop("meshplan_titan", None)


if __name__ == "__main__":
    sys.exit(run(check, reset, _probe))
