"""`python -m executor PLAN.json`: train a plan's layout on the reference model (run by torchrun on every rank).

    torchrun --nproc-per-node 4 -m executor plan.json --steps 20 --smoke
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:PORT \\
        -m executor plan.json --checkpoint-dir ckpt --checkpoint-every 100 [--resume]

(`meshplan run` builds these lines for you.) Steps: check the plan against the world found
(executor.world), join the process group, build the mesh (executor.mesh), build and parallelise the model
(executor.parallelize), then for each step read this rank's slice of the step's global batch
(executor.data), run forward/backward/AdamW (executor.step), log measured-vs-predicted metrics
(executor.metrics) and checkpoint every K steps (executor.checkpoint).

User errors print one line (`error: ...`, from each host's first rank) and exit 2; a copy goes to
`RUN_DIR/error.txt` for the launcher. A collective that times out (`--collective-timeout`) or loses a peer
ends its rank with one line naming rank, step, phase and collective (executor.timeouts), appended to
`RUN_DIR/failure.txt`, and exit 1: torchrun then stops the job, or restarts it with `--max-restarts N`, and
the restarted workers resume from the latest checkpoint by themselves (executor.loop).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from executor import faults
from executor.data import MemmapTokens, SyntheticTokens, local_batch
from executor.mesh import Meshes, build_meshes
from executor.model_args import ModelArgs, check_model, from_spec
from executor.parallelize import ParallelModel, apply_plan
from executor.step import OptimizerConfig, build_optimizers
from executor.timeouts import DEFAULT_TIMEOUT_S, CollectiveFailure, phase, set_group_timeouts
from executor.world import World, check_world, init_process_group
from planner.errors import UserError
from planner.layout import rules
from planner.model.smoke import smoke_seq_len, smoke_spec
from planner.plan import Plan
from planner.plan.preflight import token_dtype
from planner.plan.run_options import RunOptions, parse_args


@dataclass(kw_only=True)
class Run:
    """Everything one rank built for a plan."""

    plan: Plan
    world: World
    meshes: Meshes
    spec: Any
    """The ModelSpec actually trained (the smoke one under --smoke)."""
    args: ModelArgs
    seq_len: int
    model: ParallelModel
    optimizers: list[torch.optim.Optimizer]
    data: SyntheticTokens | MemmapTokens

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        lay = self.plan.layout
        x, y = local_batch(
            self.data,
            step,
            global_batch=lay.global_batch,
            dp=lay.dp,
            dp_rank=self.meshes.dp_rank,
            cp=lay.cp,
            cp_rank=self.meshes.cp_rank,
        )
        return x.to(self.world.device), y.to(self.world.device)


def check_plan(plan: Plan, *, smoke: bool, where: str) -> tuple[Any, ModelArgs, int]:
    """Model-side checks of the plan; returns (spec to train, its ModelArgs, sequence length).

    The layout must meet the rule set of `meshplan run` (`planner.layout.rules`, framework "meshplan": the
    same rules the search respects, EP's group composition included) for the plan's model and, under
    --smoke, for the toy model trained; the rank count is checked against the world (`executor.world`)."""
    lay = plan.layout
    workload = plan.inputs.workload
    spec = plan.inputs.model
    try:
        rules.check(lay, spec, workload, framework=rules.DEFAULT_FRAMEWORK)
        if smoke:  # and the toy model actually trained (widths, experts and sequence resized for the layout)
            spec = smoke_spec(spec, tp=lay.tp, cp=lay.cp, ep=lay.ep)
            workload = workload.model_copy(update={"seq_len": smoke_seq_len(lay.cp)})
            rules.check(lay, spec, workload, framework=rules.DEFAULT_FRAMEWORK)
    except UserError as exc:
        raise UserError(str(exc), where=f"{where}: layout") from None
    args = from_spec(spec)
    check_model(args)
    return spec, args, workload.seq_len


def smoke_plan(plan: Plan) -> Plan:
    """--smoke: the plan with its layout kept (mesh, schedule, chunks, ZeRO, recompute) and the smallest batch
    that layout runs: one sequence per micro-batch and as many micro-batches as pipeline ranks (what 1F1B,
    interleaved and ZB-H1 need; 1 without a pipeline). A 64-rank plan's 1024-sequence batch would otherwise
    make each toy step take minutes on a CPU."""
    lay = plan.layout
    layout = lay.model_copy(update={"micro_batch": 1, "num_microbatches": lay.pp if lay.pp > 1 else 1})
    workload = plan.inputs.workload.model_copy(update={"global_batch": layout.global_batch, "global_batch_tokens": None})
    inputs = plan.inputs.model_copy(update={"workload": workload})
    return plan.model_copy(update={"layout": layout, "inputs": inputs})


def param_dtype_for(plan: Plan, world: World) -> torch.dtype | None:
    """bf16 mixed precision on GPU when the workload says bf16; fp32 on CPU and for fp32 workloads."""
    dtype = plan.inputs.workload.dtype
    if world.device.type != "cuda" or dtype == "fp32":
        return None
    if dtype == "bf16":
        return torch.bfloat16
    raise UserError(
        f"dtype={dtype!r} training is not implemented by the executor", where="plan inputs.workload.dtype",
        fix="plan with dtype bf16 or fp32",
    )


def reduce_dtype_for(plan: Plan) -> torch.dtype | None:
    """The gradient-reduction dtype the plan asks for (`Workload.grad_reduce_dtype`): bf16, or None for the fp32
    default. Honoured on CPU too: gloo all-reduces and reduce-scatters bf16 tensors."""
    return torch.bfloat16 if plan.inputs.workload.grad_reduce_dtype == "bf16" else None


def build_run(
    plan: Plan, opts: RunOptions, world: World, *, where: str = "plan", optimizer: OptimizerConfig | None = None
) -> Run:
    """Mesh, model, optimizer and data of `plan` on this rank (process group already initialised)."""
    spec, args, seq_len = check_plan(plan, smoke=opts.smoke, where=where)
    meshes = build_meshes(plan.layout, world.device.type)
    model = apply_plan(
        args, meshes, device=world.device, seq_len=seq_len, seed=opts.seed, param_dtype=param_dtype_for(plan, world),
        reduce_dtype=reduce_dtype_for(plan),
    )
    optimizers = build_optimizers(model, optimizer or OptimizerConfig(lr=opts.lr))
    if opts.data is not None:
        dtype = token_dtype(plan.inputs.model.vocab_size, opts.data_dtype)
        data: SyntheticTokens | MemmapTokens = MemmapTokens(
            opts.data, dtype=dtype, vocab_size=args.vocab_size, seq_len=seq_len, wrap_vocab=opts.smoke
        )
    else:
        data = SyntheticTokens(vocab_size=args.vocab_size, seq_len=seq_len, seed=opts.seed)
    return Run(
        plan=plan, world=world, meshes=meshes, spec=spec, args=args, seq_len=seq_len, model=model,
        optimizers=optimizers, data=data,
    )


def _report_error(message: str, opts: RunOptions | None) -> None:
    """One line on stderr from each host's first rank, and RUN_DIR/error.txt (for `meshplan run`).

    Every rank writes the file (atomically, same text): torchrun stops the whole job when the first rank
    exits, so the rank that reports may not be the one that gets to. The others wait a moment before
    exiting for the same reason, so the printed line is not cut off."""
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if opts is not None:
        opts.run_dir.mkdir(parents=True, exist_ok=True)
        tmp = opts.run_dir / f".error.{os.getpid()}.tmp"
        tmp.write_text(message + "\n", encoding="utf-8")
        os.replace(tmp, opts.run_dir / "error.txt")
    if local_rank == 0:
        print(f"error: {message}", file=sys.stderr, flush=True)
    else:
        time.sleep(2.0)


def _report_failure(message: str, opts: RunOptions, cause: BaseException | None = None) -> None:
    """A collective failure: this rank's own line on stderr, appended to RUN_DIR/failure.txt (each rank
    that fails says where it was; `meshplan run` shows the first). MESHPLAN_DEBUG=1 adds the traceback."""
    if os.environ.get("MESHPLAN_DEBUG") and cause is not None:
        traceback.print_exception(cause, file=sys.stderr)
    print(f"error: {message}", file=sys.stderr, flush=True)
    opts.run_dir.mkdir(parents=True, exist_ok=True)
    with open(opts.run_dir / "failure.txt", "a", encoding="utf-8") as fh:
        fh.write(message + "\n")


def main(argv: list[str] | None = None) -> int:
    from executor.loop import train  # loop.py uses Run from this module

    # FSDP2 warns that the root returns a view (the TP head's local logits); nothing here modifies the
    # logits in place, which is the case the warning is about.
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")

    opts = None
    try:
        opts = parse_args(argv)
        plan = Plan.load(opts.plan)
        if opts.smoke:
            plan = smoke_plan(plan)
        world = check_world(plan, smoke=opts.smoke, plan_path=str(opts.plan))
        check_plan(plan, smoke=opts.smoke, where=str(opts.plan))  # before joining: all ranks stop alike
        faults.arm(opts.run_dir, rank=world.rank, world_size=world.world_size, steps=opts.steps,
                   checkpoint_every=opts.checkpoint_every)
        timeout_s = opts.collective_timeout_s or DEFAULT_TIMEOUT_S[world.device.type]
        init_process_group(world, timeout_s)
        with phase("setup (mesh, model, pipeline)"):
            run = build_run(plan, opts, world, where=str(opts.plan))
        set_group_timeouts(timeout_s)  # the mesh's groups were created with c10d's default (30 min on gloo)
        train(run, opts)
    except UserError as exc:
        # Every rank reaches the same verdict on the same inputs; rank 0 says it once.
        _report_error(str(exc), opts)
        return 2
    except CollectiveFailure as exc:
        assert opts is not None
        _report_failure(str(exc), opts, exc.__cause__)
        return 1
    dist.destroy_process_group()
    return 0
