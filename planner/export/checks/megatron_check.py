"""Load a meshplan Megatron-LM core_v0.19 export with the installed Megatron, build its groups on a fake process group.

    python megatron_check.py SCRIPT --world-size N [--megatron-lm CHECKOUT]

With a Megatron-LM checkout (core_v0.19.0; --megatron-lm or MEGATRON_LM), the script's MEGATRON_ARGS go
through Megatron-LM's own `parse_args` (an unknown flag is an error, not ignored) and `validate_args`, and the
`TransformerConfig` comes from `core_transformer_config_from_args`. Without one, megatron-core alone builds
`TransformerConfig` from the parallel and model arguments (the flag names are then not checked). Either
way `parallel_state.initialize_model_parallel` builds every process group of the layout on a fake process
group of the plan's world size, in the order the arguments select. Prints one JSON line per export (check_main).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from check_main import run  # noqa: E402
from shell_text import read_array, read_exports  # noqa: E402

# Arguments pretrain_gpt.py needs that are not the plan's business (data, tokenizer, schedule of the run).
RUN_ARGS = ["--train-iters", "10", "--lr", "1e-4", "--mock-data", "--tokenizer-type", "NullTokenizer"]


def _value(args: list[str], flag: str, default: str | None = None) -> str | None:
    return args[args.index(flag) + 1] if flag in args else default


def _with_megatron_lm(args: list[str], world_size: int):
    """Megatron-LM's own parser and validation; returns (TransformerConfig, parsed args)."""
    import torch
    from megatron.training import arguments
    from megatron.training.argument_utils import core_transformer_config_from_args
    from megatron.training.arguments import parse_args, validate_args

    if not torch.cuda.is_available():
        # validate_args asks the GPU's architecture (CUDA_DEVICE_MAX_CONNECTIONS rules differ on Blackwell);
        # without a GPU here, validate as on Hopper (9), the DGX H100 the plans target.
        arguments.get_device_arch_version = lambda: 9

    vocab = ["--vocab-size", "128256"] if "--vocab-size" not in args else []
    try:
        import transformer_engine  # noqa: F401
        no_te = []
    except ImportError:  # Megatron's default fused RoPE needs Transformer Engine, absent from a CPU check
        no_te = ["--no-rope-fusion"]
    sys.argv = ["pretrain_gpt.py", *args, *RUN_ARGS, *vocab, *no_te]
    os.environ.update({"WORLD_SIZE": str(world_size), "RANK": "0", "LOCAL_RANK": "0"})
    parsed = parse_args()
    validate_args(parsed)
    return core_transformer_config_from_args(parsed), parsed


def _core_only(args: list[str]):
    """TransformerConfig from the arguments that megatron-core itself reads (no Megatron-LM checkout)."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    ints = {"num_layers": "--num-layers", "hidden_size": "--hidden-size", "num_attention_heads": "--num-attention-heads",
            "tensor_model_parallel_size": "--tensor-model-parallel-size",
            "pipeline_model_parallel_size": "--pipeline-model-parallel-size",
            "context_parallel_size": "--context-parallel-size", "expert_model_parallel_size": "--expert-model-parallel-size",
            "ffn_hidden_size": "--ffn-hidden-size", "num_query_groups": "--num-query-groups",
            "num_moe_experts": "--num-experts", "moe_router_topk": "--moe-router-topk"}
    kw = {k: int(_value(args, f)) for k, f in ints.items() if f in args}
    kw["sequence_parallel"] = "--sequence-parallel" in args
    kw["bf16"] = "--bf16" in args
    kw["gated_linear_unit"] = "--swiglu" in args
    kw["normalization"] = _value(args, "--normalization", "LayerNorm")
    kw["hidden_dropout"] = float(_value(args, "--hidden-dropout", "0.1"))
    kw["attention_dropout"] = float(_value(args, "--attention-dropout", "0.1"))
    kw["recompute_granularity"] = _value(args, "--recompute-granularity")
    if kw["recompute_granularity"] == "full":
        kw.update(recompute_method=_value(args, "--recompute-method"),
                  recompute_num_layers=int(_value(args, "--recompute-num-layers")))
    if "--num-layers-per-virtual-pipeline-stage" in args:
        per = int(_value(args, "--num-layers-per-virtual-pipeline-stage"))
        kw["virtual_pipeline_model_parallel_size"] = kw["num_layers"] // (per * kw["pipeline_model_parallel_size"])
    return TransformerConfig(**kw)


def check(path: str, world_size: int, megatron_lm: str | None = None, **_: object) -> str:
    import torch.distributed as dist
    from megatron.core import parallel_state
    from torch.testing._internal.distributed.fake_pg import FakeStore

    text = Path(path).read_text()
    args = read_array(text, "MEGATRON_ARGS")
    os.environ.update(read_exports(text))  # the environment the script sets (CUDA_DEVICE_MAX_CONNECTIONS)
    if megatron_lm:
        if megatron_lm not in sys.path:
            sys.path.insert(0, megatron_lm)
        config, parsed = _with_megatron_lm(args, world_size)
        how = "Megatron-LM parse_args + validate_args"
        vpp, instances = parsed.virtual_pipeline_model_parallel_size, parsed.num_distributed_optimizer_instances
        order = "tp-cp-ep-pp-dp" if parsed.use_tp_pp_dp_mapping else "tp-cp-ep-dp-pp"
    else:
        config = _core_only(args)
        how = "megatron-core TransformerConfig (argument names unchecked: no Megatron-LM checkout)"
        vpp = config.virtual_pipeline_model_parallel_size
        instances = int(_value(args, "--num-distributed-optimizer-instances", "1"))
        order = "tp-cp-ep-pp-dp" if "--use-tp-pp-dp-mapping" in args else "tp-cp-ep-dp-pp"
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=config.tensor_model_parallel_size,
        pipeline_model_parallel_size=config.pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=vpp, context_parallel_size=config.context_parallel_size,
        expert_model_parallel_size=config.expert_model_parallel_size,
        num_distributed_optimizer_instances=instances, order=order, create_gloo_process_groups=False)
    dp = parallel_state.get_data_parallel_world_size()
    return (f"Megatron built {world_size} fake ranks ({how}): tp={config.tensor_model_parallel_size} "
            f"pp={config.pipeline_model_parallel_size} cp={config.context_parallel_size} "
            f"ep={config.expert_model_parallel_size} dp={dp}, order {order}")


def _probe() -> None:
    import megatron.core  # noqa: F401


def reset() -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(run(check, reset, _probe))
