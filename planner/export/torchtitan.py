"""TorchTitan 0.3.x export: a bash script with the `--module/--config` command line and its overrides.

TorchTitan 0.3 replaced TOML job files with Python config functions (`torchtitan/config/manager.py`
`ConfigManager.parse_args`: `--module M --config F` then `--section.field value` overrides parsed by tyro).
The script runs

    torchrun ... -m torchtitan.train --module llama3 --config llama3_70b --parallelism.tensor_parallel_degree 8 ...

For a model TorchTitan ships as a flavor (Llama 3 8B/70B) the built-in config function plus overrides is
enough. Where something cannot be said on the command line (a model shape TorchTitan does not ship, Llama 3
405B without the built-in Float8 converter, an explicit layer partition `module_fqns_per_model_part`), the
script also writes a config-registry entry, `meshplan_titan.py`, next to itself and passes
`--module meshplan_titan`. `--torchtitan-version 0.2` writes the TOML job file of TorchTitan 0.2.x instead
(`planner.export.torchtitan_toml`).

Mapping (sources in planner/frameworks/torchtitan.py): ZeRO-0 -> data_parallel_replicate_degree = dp (DDP);
ZeRO-2 -> FSDP with fsdp_reshard_after_forward never; ZeRO-3 -> FSDP (always without PP), HSDP with
dp_replicate x dp_shard; expert_parallel_degree = ep x tp (TorchTitan's EP borrows the TP ranks); local batch
= micro-batch (pp == 1; global_batch_size makes TorchTitan accumulate over the micro-batches) or micro-batch
x micro-batches split into pipeline micro-batches of pipeline_parallel_microbatch_size (pp > 1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from planner.export import ExportResult, header, launch_shape
from planner.export.script import shell_array, torchrun
from planner.frameworks.torchtitan import PROFILE
from planner.layout.schedules import SCHEDULES

if TYPE_CHECKING:
    from planner.plan import Plan

FLAVORS = {"llama3-8b": "8B", "llama3-70b": "70B", "llama3-405b": "405B"}
"""meshplan presets that are TorchTitan llama3 flavors (torchtitan/models/llama3/__init__.py llama3_configs)."""
BUILTIN_CONFIGS = {"llama3-8b": "llama3_8b", "llama3-70b": "llama3_70b"}
"""Flavors whose built-in config function trains what the plan costs (405B's adds Float8 and compile)."""
AC_SUBCOMMANDS = {"none": "none", "full": "full", "op": "selective"}
"""Recompute policy -> TorchTitan 0.3's activation-checkpoint subcommand (torchtitan/distributed/
activation_checkpoint.py `ActivationCheckpointingConfig`: `SelectiveAC` is the per-op policy, "selective"; the
framework rules refuse the plan's attention-core "selective" before export)."""
REGISTRY_MODULE = "meshplan_titan"
REGISTRY_FUNCTION = "meshplan_config"


def chunk_modules(num_layers: int, partition: tuple[int, ...], head: str = "lm_head") -> list[list[str]]:
    """TorchTitan module FQNs of each model chunk: embeddings on the first, norm + output head on the last (the
    head is `lm_head` in 0.3, `output` in 0.2)."""
    parts, start = [], 0
    for c, n in enumerate(partition):
        names = [f"layers.{i}" for i in range(start, start + n)]
        start += n
        if c == 0:
            names.insert(0, "tok_embeddings")
        if c == len(partition) - 1:
            names += ["norm", head]
        parts.append(names)
    assert start == num_layers
    return parts


def _model_code(plan: Plan) -> str:
    """Python building the plan's model as a TorchTitan ModelSpec (Llama 3 blocks; Qwen3-MoE blocks for MoE)."""
    m = plan.inputs.model
    if m.name in FLAVORS:
        return f'    return L.model_registry("{FLAVORS[m.name]}")  # bf16, no Float8 converter\n'
    common = (f"    dim, vocab, heads, kv, head_dim = {m.hidden_size}, {m.vocab_size}, {m.num_heads}, "
              f"{m.num_kv_heads}, {m.head_dim}\n")
    if m.moe is None:
        return common + (
            "    model = L.Llama3Model.Config(\n"
            "        dim=dim, vocab_size=vocab,\n"
            "        tok_embeddings=L.Embedding.Config(num_embeddings=vocab, embedding_dim=dim, param_init=L._EMBEDDING_INIT),\n"
            "        norm=L.RMSNorm.Config(normalized_shape=dim, param_init=L._NORM_INIT),\n"
            "        lm_head=L.Linear.Config(in_features=dim, out_features=vocab, param_init=L._output_linear_init(dim)),\n"
            f"        layers=L._build_llama3_layers(fuse_qkv=True, n_layers={m.num_layers}, dim=dim, n_heads=heads, "
            f"n_kv_heads=kv, hidden_dim={m.ffn_hidden_size},\n"
            f"            rope=L.ComplexRoPE.Config(dim=head_dim, max_seq_len={m.max_seq_len}, theta={float(m.rope_theta)!r}), "
            "attn_backend=\"flex\"))\n"
            '    return L.ModelSpec(name="llama3", flavor="meshplan", model=model, parallelize_fn=L.parallelize_llama,\n'
            "                       pipelining_fn=L.pipeline_llm, post_optimizer_build_fn=None,\n"
            "                       state_dict_adapter=L.Llama3StateDictAdapter)\n")
    e = m.moe
    return common + (
        "    # Mixtral-style MoE (every layer MoE, softmax top-k routing renormalised, no shared expert) as TorchTitan's\n"
        "    # Qwen3-MoE block, which adds a per-head q/k RMSNorm (2 x head_dim parameters per layer).\n"
        "    model = Q.Qwen3Model.Config(\n"
        "        vocab_size=vocab, dim=dim, norm=Q._qwen3_norm(dim),\n"
        "        tok_embeddings=Q.Embedding.Config(num_embeddings=vocab, embedding_dim=dim, param_init=Q._EMBEDDING_INIT),\n"
        "        lm_head=Q.Linear.Config(in_features=dim, out_features=vocab, param_init=Q._LINEAR_INIT),\n"
        f"        layers=Q._build_qwen3_moe_layers(fuse_qkv=True, n_layers={m.num_layers}, dim=dim, n_heads=heads, "
        f"n_kv_heads=kv, head_dim=head_dim,\n"
        f"            moe_hidden_dim={e.expert_ffn_hidden_size}, num_experts={e.num_experts}, top_k={e.top_k}, "
        'attn_backend="flex", moe_comm_backend="standard",\n'
        f"            rope=Q.CosSinRoPE.Config(dim=head_dim, max_seq_len={m.max_seq_len}, theta={float(m.rope_theta)!r})))\n"
        '    return Q.ModelSpec(name="qwen3", flavor="meshplan", model=model, parallelize_fn=Q.parallelize_qwen3,\n'
        "                       pipelining_fn=Q.pipeline_llm, post_optimizer_build_fn=Q.register_moe_load_balancing_hook,\n"
        "                       state_dict_adapter=Q.Qwen3StateDictAdapter)\n")


def registry_entry(plan: Plan) -> str | None:
    """The config-registry module the command line needs, or None when a built-in config function will do."""
    m, lay = plan.inputs.model, plan.layout
    partition = lay.partition(m.num_layers) if lay.pp > 1 else None
    if m.name in BUILTIN_CONFIGS and partition is None:
        return None
    lines = [f'"""TorchTitan {PROFILE.release} config-registry entry written by meshplan: {m.name}, {lay.describe()}.\n\n'
             f"Used as `--module {REGISTRY_MODULE} --config {REGISTRY_FUNCTION}` with this file's folder on PYTHONPATH;\n"
             "training settings (optimizer, data, checkpoints) are those of TorchTitan's llama3_8b config.\n\"\"\"\n\n",
             "import torchtitan.models.llama3 as L\n",
             "import torchtitan.models.qwen3 as Q\n" if m.moe is not None else "",
             "from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss\n",
             "from torchtitan.config import CompileConfig\n",
             "from torchtitan.models.common.config_utils import decoder_vocab_size\n",
             "from torchtitan.models.llama3 import config_registry as base\n\n\n",
             "def _model_spec():\n", _model_code(plan), "\n\n",
             f"def {REGISTRY_FUNCTION}():\n",
             "    config = base.llama3_8b()\n",
             "    config.model_spec = _model_spec()\n",
             "    config.loss = ChunkedLossWrapper.Config(\n"
             "        loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(config.model_spec)))\n",
             "    config.compile = CompileConfig(enable=False)\n"]
    if partition is not None:
        lines.append(f"    # The plan's layer partition, chunk c on pipeline rank c % {lay.pp}.\n"
                     f"    config.parallelism.module_fqns_per_model_part = {chunk_modules(m.num_layers, partition)!r}\n")
    lines.append("    return config\n")
    return "".join(lines)


def arguments(plan: Plan, module: str, config: str) -> list[str]:
    """`--module/--config` and the overrides that give the plan's layout, batch and recomputation."""
    lay, w = plan.layout, plan.inputs.workload
    shard = lay.dp_shard if lay.zero > 0 else 1
    local = lay.micro_batch * lay.num_microbatches if lay.pp > 1 else lay.micro_batch
    args = ["--module", module, "--config", config,
            "--parallelism.data_parallel_replicate_degree", str(lay.dp // shard),
            "--parallelism.data_parallel_shard_degree", str(shard),
            "--parallelism.tensor_parallel_degree", str(lay.tp),
            "--parallelism.pipeline_parallel_degree", str(lay.pp),
            "--parallelism.context_parallel_degree", str(lay.cp),
            "--parallelism.expert_parallel_degree", str(lay.ep * lay.tp if lay.ep > 1 else 1),
            "--training.local_batch_size", str(local), "--training.global_batch_size", str(lay.global_batch),
            "--training.seq_len", str(w.seq_len),
            "--training.mixed_precision_param", "float32" if w.dtype == "fp32" else "bfloat16"]
    if lay.tp > 1 and not lay.sequence_parallel:
        args.append("--parallelism.no-enable-sequence-parallel")
    if w.runtime == "pytorch-compile":  # the plan was costed with compiled blocks (cost.runtime)
        args.append("--compile.enable")
        if w.tp_comm_overlap and lay.tp > 1 and lay.sequence_parallel:
            args.append("--compile.enable_async_tensor_parallel")  # async TP: a torch.compile pass
    if lay.zero > 0:
        policy = "never" if lay.zero == 2 else "always" if lay.pp == 1 else "default"
        args += ["--parallelism.fsdp_reshard_after_forward", policy]
    if lay.pp > 1:
        args += ["--parallelism.pipeline_parallel_schedule", SCHEDULES[lay.schedule].torchtitan,
                 "--parallelism.pipeline_parallel_microbatch_size", str(lay.micro_batch)]
    if lay.pp > 1 or lay.ep > 1:
        # Trainer.Config._validate_cuda_graphs: "CUDA graphs do not support pipeline parallelism", nor the
        # all-to-all token dispatcher of expert parallelism.
        args.append("--training.disable_cuda_graphs")
    args.append(f"activation-checkpoint:{AC_SUBCOMMANDS[lay.recompute]}")  # tyro subcommand, last
    return args


def export(plan: Plan, *, rdzv_port: int = 29500, **_: Any) -> ExportResult:
    m = plan.inputs.model
    entry = registry_entry(plan)
    module, config = (REGISTRY_MODULE, REGISTRY_FUNCTION) if entry else ("llama3", BUILTIN_CONFIGS[m.name])
    shape = launch_shape(plan)
    text = "#!/usr/bin/env bash\n" + header(plan, PROFILE) + "set -euo pipefail\n"
    warnings = [f"{m.name} is not a TorchTitan flavor: the config-registry entry builds it ({'Qwen3-MoE' if m.moe else 'Llama 3'} blocks)"] \
        if m.name not in FLAVORS else []
    if entry:
        text += ('here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\n'
                 f"# TorchTitan builds models from Python config functions: the entry this command line needs.\n"
                 f"cat > \"$here/{REGISTRY_MODULE}.py\" <<'PY'\n{entry}PY\n"
                 'export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"\n')
    text += "# Set --hf_assets_path to your tokenizer (the built-in configs point at ./assets/hf/...).\n"
    text += shell_array("TITAN_ARGS", arguments(plan, module, config))
    text += torchrun(shape, "-m torchtitan.train", rdzv_port) + ' "${TITAN_ARGS[@]}" "$@"\n'
    return ExportResult("torchtitan", text, tuple(warnings))
