"""What a plan extrapolates: every knob that lies outside all validated runs, said in one line each.

A prediction is only as good as the runs its cost model was checked on (records.py). For a plan this module
lists, in words a user can act on, where it leaves that envelope:

- a GPU family or a runtime with no validated run, or a runtime whose validated runs never used the plan's
  TP, PP or CP;
- more GPUs than the largest validated run of the GPU family;
- a deeper pipeline than any validated run, or a schedule no validated run used;
- TP beyond one NVLink domain when no validated run did that;
- CP at a degree, or at as few tokens per CP rank (within 2x), that no validated run reached; CP in an MoE model
  with no validated MoE run using CP (expert groups are formed inside DP x CP, so EP then spans CP ranks);
- expert parallelism without a validated MoE run with EP, or beyond the largest validated EP;
- a recompute policy no validated run used (op and the every-k policies: the published runs with them all have
  other gaps);
- ZeRO-3/FSDP with no validated ZeRO-3 run on the GPU family;
- FlashAttention-2 (`Workload.attention_kernel` flash2) on a GPU whose profile times it apart from its fastest
  kernel (Hopper), or FlashAttention-1 (flash1) on any GPU, with no validated run of that family using it;
- a training precision (`Workload.dtype`) no validated run trained in, or none of the plan's runtime: fp8 GEMM
  peaks are twice bf16's, but runs measure far less (TorchTitan 2024 Table 1: +28 % from Float8 on Llama 3.1 8B;
  NeMo on DGX H100: 1.33-1.50x), and each stack's recipe casts differently (cost.runtime.Fp8Casts);
- a predicted MFU above the best published MFU of the GPU family (then the prediction beats every run ever
  published on that hardware, which is the first thing to doubt).
"""

from __future__ import annotations

from planner.validation.bands import gpu_family
from planner.validation.records import ValidatedRun, load_validated_runs

PARALLEL_DIMS = ("tp", "pp", "cp")
"""Model-parallel dimensions a runtime's validated runs must have used before its plans with them count as covered."""

CP_TOKENS_SLACK = 2.0
"""A validated CP run covers a plan whose tokens per CP rank are at least 1/2 of its own."""


def _best_mfu(runs: list[ValidatedRun]) -> ValidatedRun | None:
    dense = [r for r in runs if not r.moe]
    return max(dense, key=lambda r: r.published_mfu) if dense else None


def _kernel_basis(ctx, kernel: str) -> str | None:
    """Where the speed of a named attention kernel comes from when it is not the profile's own measured kernel
    (None when it is: `auto`, and FlashAttention-2 on a GPU whose profile times no other)."""
    if kernel == "flash1":
        return "its speed is FlashAttention-2's over the published speedup of FlashAttention-2 over it"
    if kernel == "flash2" and getattr(ctx.gpu, "attention_efficiency_flash2", None):
        return "its speed there is one published kernel benchmark at one shape, not a training run"
    return None


def extrapolations(ctx, layout, mfu: float, runs=None) -> tuple[str, ...]:
    """The plan's knobs outside every validated run (module docstring; `runs`: the committed ones by default);
    empty when it is inside."""
    from planner.solver.space import nvlink_domain_size

    runs = list(load_validated_runs().runs if runs is None else runs)
    family = gpu_family(ctx.gpu.name)
    name = family.upper()
    runtime = str(ctx.workload.runtime)
    seq = int(ctx.workload.seq_len)
    gpus = layout.world_size
    domain = nvlink_domain_size(ctx.cluster)
    same_family = [r for r in runs if r.family == family]
    out: list[str] = []
    if not same_family:
        out.append(f"{name} GPUs: no validated run on this GPU family (its error band comes from other families)")
    same_runtime = [r for r in runs if r.runtime == runtime]
    if not same_runtime:
        out.append(f"runtime {runtime}: no validated run on this training stack")
    for dim in PARALLEL_DIMS:  # a runtime validated only on other layouts (e.g. FSDP alone) does not vouch for these
        used = [r for r in runs if getattr(r, dim) > 1]  # none at all: the dimension's own line below speaks
        if same_runtime and getattr(layout, dim) > 1 and used and not any(r.runtime == runtime for r in used):
            out.append(f"runtime {runtime} with {dim} > 1: no validated run on this training stack used {dim}")
    if same_family:
        largest = max(same_family, key=lambda r: r.gpus)
        if gpus > largest.gpus:
            out.append(f"{gpus:,} GPUs: beyond the largest validated {name} run ({largest.gpus:,} GPUs, {largest.id})")
    if layout.pp > 1:
        deepest = max((r.pp for r in runs), default=1)
        if layout.pp > deepest:
            out.append(f"pp={layout.pp}: deeper than any validated pipeline (pp={deepest})")
        if not any(r.pp > 1 and r.schedule == layout.schedule for r in runs):
            out.append(f"schedule {layout.schedule}: no validated run used it")
    if layout.tp > domain and not any(r.tp > r.nvlink_domain for r in runs):
        out.append(f"tp={layout.tp} spans {-(-layout.tp // domain)} NVLink domains: no validated run has TP beyond one")
    if layout.cp > 1:
        per_rank = seq // layout.cp
        if not any(r.cp >= layout.cp and r.seq_len / r.cp <= CP_TOKENS_SLACK * per_rank for r in runs):
            out.append(f"cp={layout.cp} at {seq:,} tokens per sequence ({per_rank:,} per CP rank): no validated run "
                       f"with cp >= {layout.cp} at <= {int(CP_TOKENS_SLACK * per_rank):,} tokens per CP rank")
        if ctx.model.moe is not None and not any(r.moe and r.cp > 1 for r in runs):
            out.append(f"cp={layout.cp} in an MoE model: no validated MoE run used context parallelism (its expert "
                       "groups then span CP ranks)")
    if layout.ep > 1:
        with_ep = [r for r in runs if r.moe and r.ep > 1]
        if not with_ep:
            out.append(f"ep={layout.ep}: no validated MoE run with expert parallelism")
        elif layout.ep > max(r.ep for r in with_ep):
            out.append(f"ep={layout.ep}: beyond the largest validated expert parallelism (ep={max(r.ep for r in with_ep)})")
    dtype = str(ctx.workload.dtype)
    if runs and not any(r.dtype == dtype for r in runs):
        out.append(f"dtype {dtype}: no validated run trained in {dtype}")
    elif same_runtime and not any(r.dtype == dtype for r in same_runtime):  # another stack's fp8 recipe vouches not
        out.append(f"dtype {dtype} on runtime {runtime}: no validated run of this training stack trained in {dtype}")
    kernel = str(getattr(ctx.workload, "attention_kernel", "auto"))
    basis = _kernel_basis(ctx, kernel)
    if basis and ctx.flash_attention and not any(r.attention_kernel == kernel for r in same_family):
        out.append(f"attention kernel {kernel} on {name}: no validated run used it ({basis})")
    if runs and not any(r.recompute == layout.recompute for r in runs):
        out.append(f"recompute {layout.recompute}: no validated run used it (its share of recomputation is costed "
                   "from the layer's own bytes and FLOPs)")
    if layout.zero == 3 and not any(r.zero == 3 for r in same_family):
        out.append(f"ZeRO-3/FSDP: no validated ZeRO-3 run on {name}")
    best = _best_mfu(same_family)
    if best is not None and mfu > best.published_mfu:
        out.append(f"predicted MFU {100 * mfu:.1f} % is above the best published {name} run "
                   f"({100 * best.published_mfu:.1f} %, {best.id})")
    return tuple(out)
