"""Numerical-equivalence worker, run under torchrun: several layouts in one launch, each against a reference.

    torchrun --nproc-per-node N tests/distributed/equivalence_worker.py CASES.json RESULTS.jsonl

CASES.json is a list of {"name", "model" (preset name or ModelSpec dict), "layout" (Layout fields), "steps",
optionally "router_bias" (one value per expert, set in every MoE layer's DeepSeek selection bias, here and in
the reference, to steer routing: a very negative entry makes that expert provably receive no token)}.
Every case uses all N ranks. For each case every rank:
  1. builds the plan's run with the executor's own code (`executor.train.build_run`: mesh, TP/SP, CP, AC,
     FSDP/HSDP/replicate, pipeline; same seed, same data as the reference),
  2. compares its initial weights, gathered to full tensors, with the reference's (layout-independent init),
  3. trains `steps` optimizer steps with `executor.step.train_step`,
  4. compares every step's global loss and the final full weights and weight updates with the reference.
The reference is the unparallelised model (one chunk, all layers, plain tensors) trained on the full
global batch in this process, computed once per (model, steps) and cached.

Errors are reduced with MAX over all ranks; coverage (elements compared) is summed over the ranks at DP,
CP and TP coordinate 0 (for experts under EP: coordinate 0 of the expert-data-parallel and TP meshes), so
every parameter of the reference must be compared exactly once. MoE routing is logged (`RoutingLog`): rows
per expert, calls whose all-to-all splits were uneven, assignments dropped by the capacity rule. Rank 0 appends
one JSON line per case to RESULTS.jsonl (a crash keeps the finished cases).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage
from torch.distributed.tensor import DTensor

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dist_plans import make_plan, model_spec  # noqa: E402

from executor import parallelize, pipeline  # noqa: E402
from executor.data import SyntheticTokens  # noqa: E402
from executor.init import canonical_name, materialize  # noqa: E402
from executor.model import Transformer, loss_fn  # noqa: E402
from executor.model_args import from_spec  # noqa: E402
from executor.moe import MoE  # noqa: E402
from executor.step import OptimizerConfig, forward_backward, global_loss, optimizer_step  # noqa: E402
from executor.train import build_run  # noqa: E402
from executor.world import World, hardware_of  # noqa: E402
from planner.layout import Layout  # noqa: E402
from planner.plan.run_options import RunOptions  # noqa: E402

SEED = 1234
SEQ_LEN = 64
STEPS = 2
"""Optimizer steps of a case that does not say (the second step uses the optimizer state)."""
OPTIM = OptimizerConfig(lr=1e-3, eps=1e-4)
"""AdamW with eps=1e-4 rather than 1e-8: Adam's first update is lr*g/(|g|+eps), whose slope lr/eps turns
fp32 summation-order noise on near-zero gradient elements (~1e-8 absolute here) into O(lr) weight
differences; with eps=1e-8 even one process splitting the batch into micro-batches moves such elements by
up to 3% of lr (measured), so the weight comparison would test Adam's conditioning, not the layout. With
eps=1e-4 the slope is 10 and noise stays ~1e-7. Gradients themselves are compared directly as well."""

_REFERENCE: dict[str, dict] = {}


def set_router_bias(modules, bias: list[float] | None) -> None:
    """Every MoE layer's selection bias := `bias` (the model must have router_bias: true)."""
    if bias is None:
        return
    for m in modules:
        if isinstance(m, MoE):
            m.router_bias.copy_(torch.tensor(bias, dtype=m.router_bias.dtype))


class RoutingLog:
    """While active, records every MoE call of this rank's training forward passes: rows per global expert and
    assignments offered.

    Two kinds of call are left out, because they route tokens that the step does not train on:
      - a pipeline stage's metadata inference: on its first micro-batch, torch.distributed.pipelining runs
        each stage once to learn its output shapes, and a later stage runs on inputs made from those shapes
        with `torch.empty`: uninitialised memory, occasionally NaN, which top-k ranks above every biased
        probability, so a steered-away expert can be chosen (this made the starved-expert check flaky);
      - recomputation in the backward pass (activation checkpointing): it repeats its forward's routing.
    The test checks the assignments offered against the training forward passes' count, so neither can creep in.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[torch.Tensor, int]] = []
        self.inferring = False

    def __enter__(self) -> RoutingLog:
        original = self._original = MoE.assignments
        infer = self._infer = PipelineStage._forward_metadata_inference

        def logged(moe: MoE, x: torch.Tensor):
            out = original(moe, x)
            in_backward = torch._C._current_graph_task_id() != -1
            if not self.inferring and not in_backward:
                self.calls.append((out[3].detach().cpu(), x[..., 0].numel() * moe.top_k))
            return out

        def inferring(stage: PipelineStage, *args, **kwargs):
            self.inferring = True
            try:
                return infer(stage, *args, **kwargs)
            finally:
                self.inferring = False

        MoE.assignments = logged
        PipelineStage._forward_metadata_inference = inferring
        return self

    def __exit__(self, *exc) -> None:
        MoE.assignments = self._original
        PipelineStage._forward_metadata_inference = self._infer

    def summary(self, ep: int, num_experts: int) -> dict:
        """Summed over all ranks: rows per expert, calls whose per-destination split sizes differed,
        assignments offered to the router and those the capacity rule dropped."""
        if not self.calls:
            rows, uneven, offered = torch.zeros(num_experts, dtype=torch.int64), 0, 0
        else:
            rows = torch.stack([c for c, _ in self.calls]).sum(dim=0)
            uneven = sum(int(len(set(c.view(ep, -1).sum(dim=1).tolist())) > 1) for c, _ in self.calls)
            offered = sum(n for _, n in self.calls)
        stats = torch.cat([rows, torch.tensor([uneven, offered, len(self.calls)])]).to(torch.int64)
        dist.all_reduce(stats)
        n = len(rows)
        offered = int(stats[n + 1])
        return {"rows_per_expert": stats[:n].tolist(), "uneven_calls": int(stats[n]), "offered": offered,
                "dropped": offered - sum(stats[:n].tolist()), "calls": int(stats[n + 2])}


def reference(model: str | dict, steps: int, global_batch: int, router_bias: list[float] | None = None, *,
              seed: int = SEED, optim: OptimizerConfig = OPTIM) -> dict:
    """Losses and weights (initial and after `steps`) of the single-process model on the full batch (the
    executor's init and data for `seed`; `meshplan run` uses seed 0 and OptimizerConfig(lr=3e-4))."""
    key = json.dumps([model, steps, global_batch, router_bias, seed, repr(optim)], sort_keys=True)
    if key in _REFERENCE:
        return _REFERENCE[key]
    args = from_spec(model_spec(model))
    with torch.device("meta"):
        ref = Transformer(args, range(args.num_layers), first=True, last=True)
    materialize(ref, torch.device("cpu"), num_layers=args.num_layers, seed=seed)
    set_router_bias(ref.modules(), router_bias)
    ref.set_positions(torch.arange(SEQ_LEN))
    cfg = optim
    opt = torch.optim.AdamW(
        ref.parameters(), lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay, foreach=False
    )
    init = {n: p.detach().clone() for n, p in ref.named_parameters()}
    data = SyntheticTokens(vocab_size=args.vocab_size, seq_len=SEQ_LEN, seed=seed)
    losses, grads = [], {}
    for step in range(1, steps + 1):
        tokens = data.rows(step, 0, global_batch, global_batch)
        loss = loss_fn(ref(tokens[:, :-1]), tokens[:, 1:])
        loss.backward()
        if step == 1:
            grads = {n: p.grad.detach().clone() for n, p in ref.named_parameters()}
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    final = {n: p.detach().clone() for n, p in ref.named_parameters()}
    # Tied weights appear once in named_parameters; map the head's name to the embedding too.
    if args.tied_embeddings:
        for d in (init, final, grads):
            d["output.weight"] = d["tok_embeddings.weight"]
    numel = sum(p.numel() for p in ref.parameters())
    _REFERENCE[key] = {"losses": losses, "init": init, "grads": grads, "final": final, "numel": numel}
    return _REFERENCE[key]


def _full(t: torch.Tensor) -> torch.Tensor:
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()


def full_params(parts, *, grads: bool = False) -> dict[str, torch.Tensor]:
    """Every local chunk's parameters (or gradients) as full tensors (collective within each DTensor's mesh).

    A missing gradient reads as zeros (it can only be wrong where the reference's is not zero)."""
    out = {}
    for part in parts:
        for name, p in part.named_parameters():
            if grads and p.grad is None:
                out[canonical_name(name)] = torch.zeros(p.shape)
            else:
                out[canonical_name(name)] = _full(p.grad if grads else p)
    return out


FLOOR = 1e-4
"""Noise floor: a tensor is compared relative to its own largest element, or to FLOOR times the model's
largest element of the same kind when that is bigger. Without it, a tensor whose true value is 0 compares
rounding noise with rounding noise: without RoPE the key-projection bias gets an exactly-zero gradient
(softmax ignores a per-query constant), computed as ~1e-11 against a model maximum of ~1e-1. The smallest
genuine gradient tensor of these models (query bias, ~3e-5) stays above the floor (1e-5)."""


def rel_errs(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], floor: float = FLOOR) -> dict[str, float]:
    """Per tensor: max |got - want| / max(max |want|, floor * max over all tensors of max |want|)."""
    model_scale = max(t.abs().max().item() for t in want.values())
    out = {}
    for name, g in got.items():
        w = want[name]
        scale = max(w.abs().max().item(), floor * model_scale)
        out[name] = (g - w).abs().max().item() / scale
    return out


def optimizer_state_error(run) -> float:
    """|held / predicted - 1| for this rank's AdamW state bytes (its moments, after a step) against the plan's
    optimizer_bytes for its pipeline rank: the planner's memory model against what the executor holds."""
    held = 0
    for opt in run.optimizers:
        for state in opt.state.values():
            for name in ("exp_avg", "exp_avg_sq"):
                t = state[name]
                local = t.to_local() if isinstance(t, DTensor) else t
                held += local.numel() * local.element_size()
    predicted = run.plan.prediction.memory_per_stage[run.meshes.pp_rank].optimizer_bytes
    return abs(held / predicted - 1.0) if predicted else float("nan")


def run_case(case: dict, world_size: int) -> dict:
    layout = Layout(**case["layout"])
    steps = case.get("steps", STEPS)
    plan = make_plan(case["model"], layout, seq_len=SEQ_LEN, workload_fields=case.get("workload"))
    world = World(
        rank=dist.get_rank(),
        local_rank=int(os.environ.get("LOCAL_RANK", 0)),
        world_size=world_size,
        device=torch.device("cpu"),
        backend="gloo",
        hardware=hardware_of(plan.inputs.cluster),
        on_planned_device=True,
    )
    t0 = time.perf_counter()
    if case.get("per_layer_fsdp_under_zero_bubble"):
        # Negative control: undo the executor's zero-bubble rule (shard only chunk roots) for this case.
        parallelize.splits_backward = lambda layout: False
    try:
        run = build_run(plan, RunOptions(plan=Path("test-plan.json"), seed=SEED), world, optimizer=OPTIM)
    finally:
        parallelize.splits_backward = pipeline.splits_backward
    bias = case.get("router_bias")
    for part in run.model.parts:
        set_router_bias(part.modules(), bias)
    ref = reference(case["model"], steps, layout.global_batch, bias)
    got_init = full_params(run.model.parts)
    init_err = max(rel_errs(got_init, ref["init"]).values())
    losses = []
    grad_err, worst_grad = 0.0, ""
    log = RoutingLog()
    held_outputs = 0
    for step in range(1, steps + 1):
        inputs, targets = run.batch(step)
        with log:
            local = forward_backward(run.model, inputs, targets)
        # pipeline stages must not keep the step's outputs (the logits) after it: the plan's memory has no room
        held_outputs = max(held_outputs, sum(len(stage.output_chunks) for stage in run.model.stages))
        if step == 1:
            got_grads = full_params(run.model.parts, grads=True)
            grad_errs = rel_errs(got_grads, ref["grads"])
            grad_err = max(grad_errs.values())
            worst_grad = max(grad_errs, key=grad_errs.get)
        optimizer_step(run.optimizers)
        losses.append(global_loss(local, inputs.device))
    optimizer_err = optimizer_state_error(run)
    got_final = full_params(run.model.parts)
    # Weights relative to the model's largest weight (floor 1.0): zero-initialised biases hold only two
    # Adam steps, so relative to themselves they would measure Adam's conditioning (see OPTIM).
    weight_errs = rel_errs(got_final, ref["final"], floor=1.0)
    weight_err = max(weight_errs.values())
    worst_weight = max(weight_errs, key=weight_errs.get)
    ref_update = {n: ref["final"][n] - ref["init"][n] for n in got_final}
    got_update = {n: v - got_init[n] for n, v in got_final.items()}
    update_err = max(rel_errs(got_update, ref_update, floor=1e-2).values())
    loss_err = max(abs(a - b) / abs(b) for a, b in zip(losses, ref["losses"], strict=True))
    m = run.meshes
    dense_owner = m.dp_rank == 0 and m.cp_rank == 0 and m.tp_rank == 0
    expert_owner = m.owns_experts()
    covered = sum(
        v.numel() for n, v in got_final.items()
        if (n != "output.weight" or not run.args.tied_embeddings)
        and (expert_owner if ".experts." in n else dense_owner)
    )
    errs = torch.tensor([init_err, loss_err, weight_err, update_err, grad_err, optimizer_err], dtype=torch.float64)
    dist.all_reduce(errs, op=dist.ReduceOp.MAX)
    count = torch.tensor([covered], dtype=torch.int64)
    dist.all_reduce(count)
    held = torch.tensor([held_outputs], dtype=torch.int64)  # the last stage's rank holds them, not rank 0
    dist.all_reduce(held, op=dist.ReduceOp.MAX)
    return {
        "name": case["name"],
        "layout": layout.describe(),
        "losses": losses,
        "ref_losses": ref["losses"],
        "init_err": errs[0].item(),
        "loss_err": errs[1].item(),
        "weight_err": errs[2].item(),
        "update_err": errs[3].item(),
        "grad_err": errs[4].item(),
        "optimizer_memory_err": errs[5].item(),
        "covered": int(count.item()),
        "held_outputs": int(held.item()),
        "ref_numel": ref["numel"],
        "worst_on_rank0": {"grad": worst_grad, "weight": worst_weight},
        "routing": log.summary(layout.ep, run.args.moe.num_experts if run.args.moe else 0),
        "seconds": time.perf_counter() - t0,
    }


def main() -> None:
    cases = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=120))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(SEED)
    for case in cases:
        try:
            result = run_case(case, world_size)
        except Exception:  # record and go on: one broken layout must not hide the others' results
            result = {"name": case["name"], "error": traceback.format_exc(limit=-6)}
            print(f"[rank {rank}] case {case['name']} failed:\n{result['error']}", file=sys.stderr, flush=True)
            if rank == 0:
                with open(out, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(result) + "\n")
            raise
        if rank == 0:
            with open(out, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(result) + "\n")
            print(f"{result['name']}: {result['layout']} {result['seconds']:.1f}s", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter finalisation (gloo teardown race; see executor/__main__.py)
