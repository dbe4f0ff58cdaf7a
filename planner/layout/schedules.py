"""Pipeline schedules: the one registry of what a schedule is, costs, holds in memory and is called elsewhere.

Every part of meshplan that knows a schedule reads it here: the cost model (makespan, micro-batches in
flight), the layer-partition model (its linear objective), the search (which schedules to list), the rules
(micro-batch counts, virtual stages), the figures, the exports (TorchTitan and Megatron-LM names) and the
executor (the torch.distributed.pipelining class). Adding a schedule: docs/adding_a_pipeline_schedule.md.

Makespan of the pipeline phase with m micro-batches, per-micro-batch times t_r (forward + backward +
recompute of rank r's chunks, communication inside layers included) and zero-bubble units g_r = t_r - 2 w_r
(w_r: the weight-gradient GEMMs inside t_r, the W pass; Narayanan et al. 2021 Sec. 2.2, generalised to
unequal stages):
  GPipe, 1F1B:  sum_r t_r + (m - 1) * max_r t_r             (bubble (p-1)/m of the ideal for equal stages)
  interleaved:  m * max_r t_r + (sum_r t_r - max_r t_r) / v   (bubble divided by v, Sec. 2.2.2)
  ZB-H1:        m * max_r t_r + (sum_r g_r - max_r g_r)       (Qi et al. 2023 Sec. 3: bubble (p-1)(T_F + T_B - T_W);
                                                             g_r = T_F + T_B - T_W: attention and element-wise
                                                             backward and recomputation stay in B, compute.LayerTime)
and m * t_0 for one pipeline rank (every schedule is the same loop then). Each is m * max_r t_r plus a bubble
>= 0. The same formulas work on numpy columns (one row per layout) and on Python floats.

Micro-batches whose activations rank r of p holds at its peak (Narayanan et al. 2021 Sec. 2.2; Korthikanti
et al. 2022 Sec. 4.2.3): GPipe m; 1F1B and ZB-H1 (Qi et al. 2023 Sec. 3) p - r; interleaved with v chunks
((p - r - 1) * 2 + (v - 1) * p + 1) / v, which is p(1 + (p-1)/(pv)) for r = 0 as in Korthikanti; at most m,
and 1 without pipelining. Each in-flight micro-batch holds one output per model chunk (v times the count above
in (micro-batch, chunk) pairs), sent to the next stage except on the model's last chunk, whose output is the
logits: `inflight_sent_outputs` (what the runtime keeps of each: `cost.memory.sent_output_bytes`).
A runtime that allocates an activation and a gradient receive buffer for every micro-batch of the step on each
stage (torch.distributed.pipelining) holds m of each per chunk, less the first chunk of the model (no activation
buffer) and its last (no gradient buffer); the activation buffers of in-flight pairs are the stages' saved inputs:
`extra_recv_buffers` (bytes of each: `cost.memory.recv_buffer_bytes`).

Framework names: torch.distributed.pipelining classes as the executor builds them (zb-h1 is
`ScheduleInterleavedZeroBubble` with one chunk per rank: backward split into input- and weight-gradient
passes, ZB-H1's 1F1B-memory schedule); TorchTitan's `--parallelism.pipeline_parallel_schedule` is the class
name without "Schedule"; Megatron-LM (core_v0.x) runs 1F1B, interleaved 1F1B with virtual pipeline stages
(`--num-layers-per-virtual-pipeline-stage`), and has neither GPipe nor a zero-bubble schedule (zero-bubble
pipelines exist as patches and forks of it, sail-sg/zero-bubble-pipeline-parallelism, not in Megatron-LM);
DeepSpeed 0.19.8's PipelineEngine runs one TrainSchedule in 1F1B order (runtime/pipe/schedule.py). `name_in`
answers for a framework name, and the framework rules (`planner.layout.framework_rules`) refuse a schedule
a framework has no name for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

Array = Any  # numpy array or Python number: every formula here works on both


class ScheduleCode(IntEnum):
    """Codes of the layout table's `sched` column (one per registry entry)."""

    GPIPE = 0
    ONE_F_ONE_B = 1
    INTERLEAVED = 2
    ZB_H1 = 3


def _one_f_one_b_makespan(m: Array, v: Array, t_max: Array, t_sum: Array, g_max: Array, g_sum: Array) -> Array:
    return t_sum + (m - 1) * t_max


def _interleaved_makespan(m: Array, v: Array, t_max: Array, t_sum: Array, g_max: Array, g_sum: Array) -> Array:
    return m * t_max + (t_sum - t_max) / v


def _zb_h1_makespan(m: Array, v: Array, t_max: Array, t_sum: Array, g_max: Array, g_sum: Array) -> Array:
    return m * t_max + (g_sum - g_max)


def _all_microbatches(r: Array, p: Array, v: Array, m: Array) -> Array:
    return m


def _one_f_one_b_inflight(r: Array, p: Array, v: Array, m: Array) -> Array:
    return p - r


def _interleaved_inflight(r: Array, p: Array, v: Array, m: Array) -> Array:
    return ((p - r - 1) * 2 + (v - 1) * p + 1) / v


@dataclass(frozen=True)
class PipelineSchedule:
    """One pipeline schedule: its plan name, table code, cost formulas and its names in other frameworks."""

    name: str
    """Name in plans, the CLI and the API (`Layout.schedule`)."""
    code: ScheduleCode
    """Integer code in the layout table's `sched` column."""
    title: str
    """Display name."""
    makespan_formula: Callable[..., Array]
    """(m, v, t_max, t_sum, g_max, g_sum) -> pipeline-phase seconds for pp > 1 (module docstring)."""
    objective: Callable[[int, int], tuple[int, int, int, int]]
    """(m, v) -> integer (a, b, c, d): makespan = (a * t_max + b * sum t + c * (sum g - max g)) / d, for pp > 1
    (the linear form the layer-partition model minimises in integer units)."""
    inflight_formula: Callable[..., Array]
    """(rank, pp, v, m) -> micro-batches in flight on that rank for pp > 1, before the cap at m."""
    virtual_stages: bool
    """True: needs v >= 2 model chunks per rank (interleaving); False: exactly one chunk per rank."""
    needs_microbatches_per_rank: bool
    """True: needs at least pp micro-batches (the steady 1F1B phase)."""
    microbatches_multiple_of_pp: bool
    """True: the number of micro-batches must be a multiple of pp (Megatron's interleaving constraint)."""
    splits_backward: bool
    """Backward split into input-gradient (B) and weight-gradient (W) passes (zero-bubble schedules)."""
    torch_class: str
    """torch.distributed.pipelining.schedules class the executor builds."""
    torch_multi_stage: bool
    """The torch class takes a list of stages (PipelineScheduleMulti), even with one chunk per rank."""
    torchtitan: str
    """TorchTitan `parallelism.pipeline_parallel_schedule` value."""
    megatron: str | None
    """Megatron-LM's schedule of that name (its args come from the exporter), None when it has none."""
    megatron_instead: str
    """What Megatron-LM runs instead, and what that costs, when `megatron` is None."""
    deepspeed: str | None
    """DeepSpeed's pipeline engine schedule of that name, None when it has none."""
    deepspeed_instead: str
    """Why DeepSpeed cannot run it, when `deepspeed` is None."""
    dominated_by: str | None = None
    """A schedule with the same makespan and no more memory: the search lists this one only when asked for."""
    source: str = ""

    def makespan(self, m: float, v: float, t_max: float, t_sum: float, g_max: float, g_sum: float,
                 pp: int) -> float:
        """Pipeline-phase seconds of one layout (module docstring); m * t_max when pp == 1."""
        return m * t_max if pp == 1 else self.makespan_formula(m, v, t_max, t_sum, g_max, g_sum)

    def inflight(self, rank: Array, pp: Array, v: Array, m: Array) -> Array:
        """Micro-batches whose activations `rank` holds at its peak for pp > 1, before the cap at m."""
        return self.inflight_formula(rank, pp, v, m)


SCHEDULES: dict[str, PipelineSchedule] = {
    s.name: s
    for s in (
        PipelineSchedule(
            name="gpipe", code=ScheduleCode.GPIPE, title="GPipe", makespan_formula=_one_f_one_b_makespan,
            objective=lambda m, v: (m - 1, 1, 0, 1), inflight_formula=_all_microbatches,
            virtual_stages=False, needs_microbatches_per_rank=False, microbatches_multiple_of_pp=False,
            splits_backward=False, torch_class="ScheduleGPipe", torch_multi_stage=False, torchtitan="GPipe",
            megatron=None, megatron_instead="Megatron-LM has no GPipe schedule: it runs 1F1B (same time, less "
            "activation memory)", deepspeed=None,
            deepspeed_instead="DeepSpeed's pipeline engine runs its own 1F1B-order TrainSchedule, not GPipe",
            dominated_by="1f1b", source="Huang et al. 2019: every forward, then every backward",
        ),
        PipelineSchedule(
            name="1f1b", code=ScheduleCode.ONE_F_ONE_B, title="1F1B", makespan_formula=_one_f_one_b_makespan,
            objective=lambda m, v: (m - 1, 1, 0, 1), inflight_formula=_one_f_one_b_inflight,
            virtual_stages=False, needs_microbatches_per_rank=True, microbatches_multiple_of_pp=False,
            splits_backward=False, torch_class="Schedule1F1B", torch_multi_stage=False, torchtitan="1F1B",
            megatron="1F1B (forward_backward_pipelining_without_interleaving)", megatron_instead="",
            deepspeed="PipelineEngine TrainSchedule (1F1B order)", deepspeed_instead="",
            source="PipeDream-Flush, Narayanan et al. 2021 Sec. 2.2.1",
        ),
        PipelineSchedule(
            name="interleaved", code=ScheduleCode.INTERLEAVED, title="interleaved 1F1B", makespan_formula=_interleaved_makespan,
            objective=lambda m, v: (m * v - 1, 1, 0, v), inflight_formula=_interleaved_inflight,
            virtual_stages=True, needs_microbatches_per_rank=True, microbatches_multiple_of_pp=True,
            splits_backward=False, torch_class="ScheduleInterleaved1F1B", torch_multi_stage=True,
            torchtitan="Interleaved1F1B", megatron="interleaved 1F1B (--num-layers-per-virtual-pipeline-stage)",
            megatron_instead="", deepspeed=None,
            deepspeed_instead="DeepSpeed's pipeline engine has no interleaved schedule",
            source="Narayanan et al. 2021 Sec. 2.2.2",
        ),
        PipelineSchedule(
            name="zb-h1", code=ScheduleCode.ZB_H1, title="ZB-H1", makespan_formula=_zb_h1_makespan,
            objective=lambda m, v: (m, 0, 1, 1), inflight_formula=_one_f_one_b_inflight,
            virtual_stages=False, needs_microbatches_per_rank=True, microbatches_multiple_of_pp=False,
            splits_backward=True, torch_class="ScheduleInterleavedZeroBubble", torch_multi_stage=True,
            torchtitan="InterleavedZeroBubble", megatron=None,
            megatron_instead="Megatron-LM core_v0.19 has no zero-bubble schedule (ZB-H1) flag: it would run 1F1B, "
            "slower by the bubble difference", deepspeed=None,
            deepspeed_instead="DeepSpeed's pipeline engine has no zero-bubble schedule",
            source="Qi et al. 2023 Sec. 3.1 (ZB-H1)",
        ),
    )
}
"""Every pipeline schedule by plan name, in table-code order."""

SCHEDULE_NAMES: tuple[str, ...] = tuple(SCHEDULES)
BY_CODE: tuple[PipelineSchedule, ...] = tuple(sorted(SCHEDULES.values(), key=lambda s: s.code))
SEARCH_ORDER: tuple[str, ...] = ("1f1b", "zb-h1", "gpipe", "interleaved")
"""Order in which the search lists the schedules of one layout (equal step times keep the first)."""
ONE_RANK = "1f1b"
"""Without pipelining every schedule is the same loop of m forward/backward pairs: reported under this name."""


def name_in(s: PipelineSchedule, framework: str) -> str | None:
    """What `framework` calls schedule `s` (the executor: its torch class), None when it cannot run it; "any"
    runs every schedule under its plan name."""
    names = {"meshplan": s.torch_class, "torchtitan": s.torchtitan, "megatron": s.megatron, "deepspeed": s.deepspeed}
    return names.get(framework, s.name)


def missing_in(s: PipelineSchedule, framework: str) -> str:
    """Why `framework` cannot run `s` (`name_in` is None), and what it runs instead."""
    return {"megatron": s.megatron_instead, "deepspeed": s.deepspeed_instead}[framework]


def schedule(name: str) -> PipelineSchedule:
    """The registry entry of `name` (ValueError naming the known ones otherwise)."""
    try:
        return SCHEDULES[name]
    except KeyError:
        raise ValueError(f"unknown pipeline schedule {name!r}; known: {', '.join(SCHEDULE_NAMES)}") from None


def by_code(codes: np.ndarray, per_schedule: Callable[[PipelineSchedule], Array]) -> np.ndarray:
    """Per row, `per_schedule(s)` of the row's schedule code (a vectorised dispatch over the registry)."""
    import numpy as np  # here: the registry itself is read by the command line before numpy is loaded

    from planner.layout.numeric import first_match

    codes = np.asarray(codes)
    conds = [(codes == s.code, s) for s in BY_CODE]
    # Only the schedules some row has are evaluated: an all-false condition selects nothing (and the 0.0
    # default keeps the result float either way).
    used = [(c, s) for c, s in conds if c.any()] or conds
    return first_match([c for c, _ in used], [per_schedule(s) for _, s in used], 0.0)


def makespan(codes: np.ndarray, m: Array, v: Array, t_max: Array, t_sum: Array, g_max: Array, g_sum: Array,
             pp: Array) -> np.ndarray:
    """Pipeline-phase seconds of every row, by its schedule code (module docstring)."""
    import numpy as np

    value = by_code(codes, lambda s: s.makespan_formula(m, v, t_max, t_sum, g_max, g_sum))
    return np.where(np.asarray(pp) == 1, m * t_max, value)


def inflight_microbatches(codes: np.ndarray, rank: Array, pp: Array, v: Array, m: Array) -> np.ndarray:
    """Micro-batches in flight on `rank` of every row, by its schedule code, capped at m; 1 when pp == 1."""
    import numpy as np

    p, r, vv, mf = (np.asarray(x).astype(float) for x in (pp, rank, v, m))
    out = by_code(codes, lambda s: s.inflight_formula(r, p, vv, mf))
    out = np.where(np.asarray(pp) == 1, 1.0, out)
    return np.minimum(out, mf)


def inflight_sent_outputs(codes: np.ndarray, rank: Array, pp: Array, v: Array, m: Array, last: Array) -> np.ndarray:
    """Stage outputs `rank` has sent and still holds at its peak, by schedule: its in-flight (micro-batch, chunk)
    pairs, `inflight_microbatches` x v (the count is in units of the rank's whole activations, a chunk holding 1/v
    of them), less those of the model's last chunk on the `last` rank, which sends nothing: all of them with one
    chunk per rank, one with interleaving (its forward is followed at once by its backward: the last rank's
    warm-up is the (v - 1) p forwards of its other chunks, Narayanan et al. 2021 Sec. 2.2.2, Megatron-LM
    50a4b5fa02 megatron/schedules.py `num_warmup_microbatches`, torch ScheduleInterleaved1F1B alike). 0 when pp == 1."""
    import numpy as np

    vv = np.asarray(v).astype(float)
    pairs = inflight_microbatches(codes, rank, pp, v, m) * vv
    own = np.where(vv > 1, np.minimum(pairs, 1.0), pairs)  # the last chunk's in-flight micro-batches
    held = pairs - np.where(np.asarray(last, dtype=bool), own, 0.0)
    return np.where(np.asarray(pp) == 1, 0.0, held)


def extra_recv_buffers(codes: np.ndarray, rank: Array, pp: Array, v: Array, m: Array, last: Array) -> np.ndarray:
    """Receive buffers `rank` holds beyond the activations under a runtime that allocates one activation and one
    gradient buffer per micro-batch of the step on each stage (`RuntimeCosts.step_recv_buffers`; torch 2.13
    stage.py `_setup_forward_recv_info`, `_setup_backward_recv_info`, cited in cost/runtime.py):
      gradient buffers: m per chunk but the model's last (on the `last` rank);
      activation buffers: m per chunk but the model's first (on rank 0), less the in-flight (micro-batch, chunk)
      pairs of those chunks, whose buffer is the stage input the activations already count. On rank 0 with
      interleaving the first chunk holds, at the rank's peak (end of warm-up plus one forward), its first round
      of p forwards and p - 1 of its second (torch ScheduleInterleaved1F1B `forward_stage_index`: chunk
      (step // microbatches_per_round) % v, microbatches_per_round = p for m a multiple of p; Megatron alike):
      min(2p - 1, m) of the rank's pairs; with one chunk all of them.
    0 when pp == 1."""
    import numpy as np

    p, r, vv, mf = (np.asarray(x).astype(float) for x in (pp, rank, v, m))
    pairs = inflight_microbatches(codes, rank, pp, v, m) * vv
    first = r == 0
    first_chunk = np.where(vv > 1, np.minimum(pairs, np.minimum(2 * p - 1, mf)), pairs)
    aliased = pairs - np.where(first, first_chunk, 0.0)
    act = mf * (vv - first) - aliased
    grad = mf * (vv - np.asarray(last, dtype=float))
    return np.where(p == 1, 0.0, np.maximum(act, 0.0) + grad)
