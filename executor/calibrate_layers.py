"""Reference-layer measurements of `executor.calibrate`: the executor's decoder layer plain, tensor-parallel,
FSDP-sharded and (an MoE layer) expert-parallel, its optimizer step, and how many CPU processes run it at
full speed at once."""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from executor.calibrate_timing import Clock, median_over_ranks

LAYER_SEQS = (1, 4)
"""Micro-batch sizes (sequences of the preset's max_seq_len) of the layer measurement: two points give
the per-token slope and the fixed part."""


def layer_specs():
    """The reference layers timed: the `tiny` preset's widths (hidden 64) and the same layer 4x wider, so
    the fit can tell a fixed per-layer cost from one that grows with tokens x hidden."""
    from planner.model import ModelSpec, preset

    tiny = preset("tiny")
    wide = tiny.model_dump(exclude={"head_dim"})
    wide.update(name="tiny-x4", hidden_size=4 * tiny.hidden_size, ffn_hidden_size=6 * tiny.hidden_size)
    return tiny, ModelSpec.model_validate(wide)


def moe_layer_spec():
    """The MoE layer timed expert-parallel over a pair: the `tiny-moe` preset (4 experts, top-2, 1 shared)."""
    from planner.model import preset

    return preset("tiny-moe")


def _layer_part(spec, tp_mesh, dp_mesh, device: torch.device, dtype: torch.dtype, ep_mesh=None):
    """One decoder layer of `spec` as the executor builds it (a Transformer chunk without embeddings/head),
    tensor-parallel over `tp_mesh`, ZeRO-1 data-parallel (FSDP2 per layer) over `dp_mesh` or with its experts
    sharded over `ep_mesh` (executor.ep) when given."""
    from executor.ep import apply_ep
    from executor.fsdp import apply_fsdp
    from executor.init import materialize
    from executor.model import Transformer
    from executor.model_args import from_spec
    from executor.tp import apply_tp

    args = from_spec(spec)
    with torch.device("meta"):
        part = Transformer(args, [0], first=False, last=False)
    if ep_mesh is not None:
        apply_ep(part, ep_mesh, None)
    if tp_mesh is not None:
        apply_tp(part, tp_mesh, sequence_parallel=False)
    if dp_mesh is not None:
        apply_fsdp(part, dp_mesh, zero=1, param_dtype=torch.bfloat16 if device.type == "cuda" else None)
    materialize(part, device, num_layers=args.num_layers, seed=0)
    part.to(dtype)
    part.set_positions(torch.arange(spec.max_seq_len, device=device))
    return part, args


def measure_layer(clock: Clock, spec, tp_mesh=None, dp_mesh=None, ep_mesh=None) -> dict:
    """Forward and backward seconds of one reference decoder layer per micro-batch (plain, TP, FSDP or EP)."""
    dtype = torch.bfloat16 if clock.device.type == "cuda" else torch.float32  # what the planner costs there
    part, args = _layer_part(spec, tp_mesh, dp_mesh, clock.device, torch.float32 if dp_mesh is not None else dtype,
                             ep_mesh)
    seq = spec.max_seq_len
    mesh = next((m for m in (tp_mesh, dp_mesh, ep_mesh) if m is not None), None)
    collective = mesh is not None
    group = mesh.get_group() if collective else None
    points = []
    for b in LAYER_SEQS:
        h = torch.randn(b, seq, args.hidden_size, device=clock.device, dtype=dtype, requires_grad=True)
        state: dict = {}

        def forward(h=h, state=state):
            state["out"] = part(h)

        def backward(state=state):
            state["out"].backward(state["grad"])

        def fresh_forward(h=h, state=state):
            state["out"] = part(h)
            state["grad"] = torch.ones_like(state["out"])

        fwd = clock.time(forward, collective=collective, group=group)
        bwd = clock.time(backward, setup=fresh_forward, collective=collective, group=group)
        points.append({"tokens": b * seq, "forward_s": fwd, "backward_s": bwd})
    return {"model": spec.model_dump(mode="json"), "tp": 1 if tp_mesh is None else tp_mesh.size(),
            "dp": 1 if dp_mesh is None else dp_mesh.size(), "ep": 1 if ep_mesh is None else ep_mesh.size(),
            "points": points}


def measure_optimizer(clock: Clock, spec) -> dict:
    """Seconds per parameter of the executor's optimizer step (AdamW, foreach, executor.step's settings)
    over the parameters of one `spec` layer."""
    from executor.step import OptimizerConfig

    part, _ = _layer_part(spec, None, None, clock.device, torch.float32)
    params = [p for p in part.parameters()]
    for p in params:
        p.grad = torch.randn_like(p)
    cfg = OptimizerConfig()
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay, foreach=True)
    n = sum(p.numel() for p in params)
    return {"params": n, "time_s": clock.time(opt.step)}


def measure_concurrency(clock: Clock, world: int, rounds: int) -> float:
    """Devices one host runs at full speed: world x (rank 0's solo time / the time with every process running
    the same training work at once: the 4x-wide reference layer's forward and backward, whose mix of GEMMs,
    element-wise and framework work shares cores and memory bandwidth as a training step does), the median over `rounds` solo/together pairs (each pair close in time, so both
    see the same load from other work on the host), between 1 and world. Each timing is `calls` back-to-back
    GEMMs started together after a barrier, so the processes overlap for (nearly) all of it."""
    spec = layer_specs()[1]
    part, args = _layer_part(spec, None, None, clock.device, torch.float32)
    h = torch.randn(1, spec.max_seq_len, args.hidden_size, requires_grad=True)

    def loop(calls: int) -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            part(h).sum().backward()
        return (time.perf_counter() - t0) / calls

    one = torch.tensor([loop(2)], dtype=torch.float64)
    dist.all_reduce(one, op=dist.ReduceOp.MAX)
    calls = int(max(5, min(50, 4 * clock.min_time_s / float(one.item()))))
    ratios = []
    for _ in range(rounds):
        dist.barrier()
        solo = torch.tensor([loop(calls) if dist.get_rank() == 0 else 0.0], dtype=torch.float64)
        dist.broadcast(solo, 0)  # the others wait here (gloo blocks without spinning)
        together = median_over_ranks([loop(calls)], clock.device)[0]
        ratios.append(world * float(solo.item()) / together)
    return min(float(world), max(1.0, statistics.median(ratios)))


PIPELINE_MICROBATCHES = 4
"""Micro-batches of the 2-stage pipeline measured (1 sequence each)."""


def measure_pipeline(clock: Clock, pair_mesh) -> dict:
    """Seconds of one 1F1B step (forward and backward of every micro-batch, no optimizer) of a 2-stage
    pipeline over `pair_mesh`: the `tiny` preset's embeddings + layer 0 on rank 0, layer 1 + head on rank
    1, built and scheduled as executor.pipeline does. Called on the pair's two ranks only."""
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import Schedule1F1B

    from executor.init import materialize
    from executor.model import Transformer, loss_fn
    from executor.model_args import from_spec
    from planner.model import preset

    spec = preset("tiny")
    args = from_spec(spec)
    stage = pair_mesh.get_local_rank()
    with torch.device("meta"):
        part = Transformer(args, [stage], first=stage == 0, last=stage == 1)
    materialize(part, clock.device, num_layers=args.num_layers, seed=0)
    part.set_positions(torch.arange(spec.max_seq_len, device=clock.device))
    group = pair_mesh.get_group()
    pipe = PipelineStage(part, stage, 2, clock.device, group=group)
    schedule = Schedule1F1B(pipe, n_microbatches=PIPELINE_MICROBATCHES, loss_fn=loss_fn, scale_grads=True)
    tokens = torch.randint(0, args.vocab_size, (PIPELINE_MICROBATCHES, spec.max_seq_len), device=clock.device)

    def step() -> None:  # as executor/step.py runs it: no outputs kept and merged at the end
        if stage == 0:
            schedule.step(tokens, return_outputs=False)
        else:
            schedule.step(target=tokens, losses=[], return_outputs=False)

    return {"model": spec.model_copy(update={"num_layers": 2}).model_dump(mode="json"),
            "microbatches": PIPELINE_MICROBATCHES, "time_s": clock.time(step, collective=True, group=group)}
