"""Layer-to-stage partition by layer type with OR-Tools CP-SAT: the exact optimum where the closed form is not.

`cost.partition.balanced_split` is exact when every layer costs the same. With several layer types
(DeepSeek-V3: 3 dense + 58 MoE layers, which differ in time and above all in memory) or pipeline ranks on
different GPUs (A100 and H100 hosts), the best contiguous split is combinatorial. This model chooses it:

    data        layer types in layer order; per rank r and type k the time of one layer (per micro-batch)
                and its memory (model states + activations x the rank's in-flight micro-batches); per rank
                the extra time (embedding on rank 0, head on the last), the fixed memory and the capacity;
                pp ranks x v virtual stages: chunk c (contiguous, in layer order) runs on rank c % pp.
    variables   b[c]     first layer of chunk c (b[0] = 0, b[C] = L), chunks may be empty;
                pre[c,k] type-k layers before b[c] (an element constraint on the prefix counts);
                n[r,k]   type-k layers on rank r; t[r] rank r's time per micro-batch; t_max = max_r t[r].
    constraints every rank fits its memory; with v > 1 a rank's chunks differ by at most one layer (the
                interleaved bubble of cost.evaluate assumes even chunks, as cost.partition.chunk_partition).
    objective   the pipeline part of the schedule's step time, linear, as the schedule registry states it
                (`PipelineSchedule.objective`, planner/layout/schedules.py): bottleneck t_max; GPipe/1F1B
                sum_r t[r] + (m-1) t_max; interleaved (m v - 1) t_max + sum_r t[r] (v times the step); ZB-H1
                m t_max + sum_r g[r] - max_r g[r] (g: T_F + T_B - T_W per rank).
    ties        a secondary term (sum_c b[c], earliest boundaries first) below the primary's resolution,
                so the optimum, and the plan, is the same on every run.

Costs are scaled to integers once, in `partition_data.scale` (1 ns time units, whole bytes, memory rounded
so that a CP-SAT-feasible partition truly fits); `proven_optimal` means optimal for that integer model, and
`partition_data.brute_force` is the test oracle. Infeasibility is explained with one assumption literal per
constraint group ("memory of rank 3", "even chunks of rank 1"): the solver's sufficient assumptions (one
worker), shrunk by dropping groups while the rest stay infeasible, name a minimal set that cannot all hold.

    from planner.solver.partition_cpsat import PartitionProblem, solve_partition
    result = solve_partition(PartitionProblem(layer_types=(0, 0, 0, 1, 1), ...), work_limit=5)
    result.chunks, result.proven_optimal

Reproducible: the search runs on one worker and stops at a deterministic work limit (CP-SAT's
`max_deterministic_time`, counted in the solver's own work units, not wall time), so a search cut short stops at
the same point on a loaded machine, an idle one and another machine: the same inputs give the same partition.
A wall-clock limit made the plan depend on the load (a DeepSeek-V3 split proven optimal in 1.9 s on an idle
machine hit a 5 s limit under load, and with 8 workers CP-SAT's parallel portfolio is not deterministic at all).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import numpy as np

from planner.errors import InfeasibleError
from planner.solver.partition_data import (
    SCHEDULES,
    TIME_UNIT_S,
    PartitionProblem,
    ScaledProblem,
    brute_force,
    counts_of,
    integer_objective,
    objective_coefficients,
    objective_s,
    pipeline_value,
    scale,
)

__all__ = [
    "SCHEDULES", "TIME_UNIT_S", "PartitionInfeasibleError", "PartitionProblem", "PartitionResult", "brute_force",
    "counts_of", "integer_objective", "objective_s", "pipeline_value", "scale", "solve_partition",
]

WORK_LIMIT = 5.0
"""CP-SAT's `max_deterministic_time` per partition search. The unit is the solver's deterministic work, which
sat_parameters.proto says should be as close as possible to a second; on this project's 2-core dev machine the
DeepSeek-V3 split over 4 ranks x 8 virtual stages (the largest in the tests and benchmarks) is proven optimal at
1.41 units, 1.9-2.9 s wall on one worker."""

_INT_LIMIT = 2**62  # keep every objective value inside int64 with room for CP-SAT's sums


class PartitionInfeasibleError(InfeasibleError):
    """No contiguous partition fits; `groups` names the constraint groups that conflict."""

    def __init__(self, message: str, groups: list[str]) -> None:
        super().__init__(message)
        self.groups = groups


@dataclass(frozen=True)
class PartitionResult:
    chunks: tuple[int, ...]  # layers per chunk, chunk c on rank c % pp
    rank_type_counts: np.ndarray  # (p, K)
    objective_s: float  # the objective on the unrounded data (interleaved: divided back by v)
    proven_optimal: bool
    status: str
    wall_s: float
    stats: dict[str, float] = field(default_factory=dict)


# The model -------------------------------------------------------------------------------------------
def solve_partition(
    problem: PartitionProblem,
    *,
    hint_chunks: tuple[int, ...] | None = None,
    work_limit: float = WORK_LIMIT,
    seed: int = 0,
    export_path: str | None = None,
) -> PartitionResult:
    """The contiguous partition minimising the schedule's pipeline time subject to memory (module docstring).

    Raises PartitionInfeasibleError (naming the conflicting constraint groups) when nothing fits, and
    RuntimeError when CP-SAT finds no solution within `work_limit` (deterministic units) or rejects the model.
    """
    from ortools.sat.python import cp_model  # here, not at import: OR-Tools loads in ~0.4 s

    s = scale(problem)
    start = time.perf_counter()
    model, b, lits = _build(s, hint_chunks, explain=False)
    if export_path:
        model.export_to_file(export_path)
    solver = _solver(work_limit, seed)
    status = solver.solve(model)
    name = solver.status_name(status)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        chunks = tuple(int(solver.value(b[c + 1]) - solver.value(b[c])) for c in range(len(b) - 1))
        return PartitionResult(
            chunks=chunks, rank_type_counts=counts_of(s.layer_types, chunks, s.pp, s.time.shape[1]),
            objective_s=objective_s(problem, chunks), proven_optimal=status == cp_model.OPTIMAL, status=name,
            wall_s=time.perf_counter() - start,
            stats={"conflicts": solver.num_conflicts, "branches": solver.num_branches,
                   "objective": solver.objective_value, "bound": solver.best_objective_bound},
        )
    if status == cp_model.INFEASIBLE:
        raise _explain_infeasible(s, work_limit, seed)
    if status == cp_model.MODEL_INVALID:
        raise RuntimeError(f"CP-SAT rejected the partition model: {model.validate()}")
    raise RuntimeError(f"CP-SAT found no partition within its work limit of {work_limit:g} (status {name})")


def _build(s: ScaledProblem, hint_chunks, *, explain: bool, assume: list[str] | None = None):
    """Model, boundary variables and the named group literals (explain: enforcement literals, and assumptions
    for the groups in `assume`, all by default)."""
    from ortools.sat.python import cp_model

    L, p, K, C = len(s.layer_types), s.pp, s.time.shape[1], s.pp * s.v
    model = cp_model.CpModel()
    prefix = [[0] * (L + 1) for _ in range(K)]  # prefix[k][i]: type-k layers among the first i
    for k in range(K):
        for i, lt in enumerate(s.layer_types):
            prefix[k][i + 1] = prefix[k][i] + (lt == k)
    t_hi = int(L * max(int(s.time.max(initial=0)), 0) + max(int(s.extra.max(initial=0)), 0))
    g_hi = int(L * max(int(s.bubble.max(initial=0)), 0) + max(int(s.extra_bubble.max(initial=0)), 0))

    # Variables: b[c] is the first layer of chunk c; pre[c, k] the type-k layers before it; n[r, k] the
    # type-k layers on rank r; t[r] and g[r] rank r's time and zero-bubble unit per micro-batch.
    b = {c: model.new_int_var(0, L, f"b[{c}]") for c in range(C + 1)}
    pre = {(c, k): model.new_int_var(0, prefix[k][L], f"pre[{c},{k}]") for c in range(C + 1) for k in range(K)}
    n = {(r, k): model.new_int_var(0, prefix[k][L], f"n[{r},{k}]") for r in range(p) for k in range(K)}
    t = {r: model.new_int_var(min(0, int(s.extra[r])), t_hi, f"t[{r}]") for r in range(p)}
    g = {r: model.new_int_var(min(0, int(s.extra_bubble[r])), g_hi, f"g[{r}]") for r in range(p)}
    t_max = model.new_int_var(min(0, int(s.extra.min(initial=0))), t_hi, "t_max")

    # The chunks cover the layers in order: chunk 0 starts at layer 0, the last ends at L, none overlap.
    model.add(b[0] == 0)
    model.add(b[C] == L)
    for c in range(C):
        model.add(b[c] <= b[c + 1])
    # Each boundary's prefix counts are read from the layer types (one element constraint per type); they
    # add up to the boundary and never decrease (redundant, but linear: the LP relaxation sees them).
    for c in range(C + 1):
        for k in range(K):
            model.add_element(b[c], prefix[k], pre[c, k])
        model.add(sum(pre[c, k] for k in range(K)) == b[c])
        if c < C:
            for k in range(K):
                model.add(pre[c, k] <= pre[c + 1, k])
    # A rank holds the layers of its chunks c = r, r + pp, r + 2 pp, ...
    for r in range(p):
        for k in range(K):
            model.add(n[r, k] == sum(pre[c + 1, k] - pre[c, k] for c in range(r, C, p)))
    # A rank's time is its extra work plus its layers' times, each type at the rank's own price.
    for r in range(p):
        model.add(t[r] == int(s.extra[r]) + sum(int(s.time[r, k]) * n[r, k] for k in range(K)))
        model.add(g[r] == int(s.extra_bubble[r]) + sum(int(s.bubble[r, k]) * n[r, k] for k in range(K)))
    model.add_max_equality(t_max, [t[r] for r in range(p)])
    # Redundant, for propagation: every layer of each type is on some rank; the busiest rank is at least average.
    for k in range(K):
        model.add(sum(n[r, k] for r in range(p)) == prefix[k][L])
    model.add(p * t_max >= sum(t.values()))
    # Each rank's chunks hold equally many layers, give or take one (the interleaved schedule's bubble in
    # cost.evaluate assumes even chunks; `cost.partition.chunk_partition` splits the same way).
    lits: dict[str, cp_model.IntVar] = {}  # named enforcement literals (explain mode only)
    for r in range(p if s.v > 1 else 0):
        sizes = [b[c + 1] - b[c] for c in range(r, C, p)]
        lit = model.new_bool_var(f"even chunks of rank {r}") if explain else None
        for x, y in itertools.permutations(sizes, 2):
            cons = model.add(x - y <= 1)
            if lit is not None:
                cons.only_enforce_if(lit)
        if lit is not None:
            lits[lit.name] = lit
    # Every rank fits in its GPU's memory (one named group per rank, so infeasibility can be explained).
    for r in range(p):
        used = int(s.fixed[r]) + sum(int(s.mem[r, k]) * n[r, k] for k in range(K))
        if explain:
            lit = model.new_bool_var(f"memory of rank {r}")
            model.add(used <= int(s.cap[r])).only_enforce_if(lit)
            lits[lit.name] = lit
        else:
            model.add(used <= int(s.cap[r]))
    if explain:
        model.add_assumptions([lits[name] for name in (lits if assume is None else assume)])

    # Objective: the schedule's pipeline time (its registry coefficients, times their divisor), then the
    # tie-break below its resolution.
    a, b_sum, c_bubble, _ = objective_coefficients(s.schedule, s.m, s.v)
    primary, hi = a * t_max, a * t_hi
    if b_sum:
        primary, hi = primary + b_sum * sum(t.values()), hi + b_sum * p * t_hi
    if c_bubble:
        g_max = model.new_int_var(min(0, int(s.extra_bubble.min(initial=0))), g_hi, "g_max")
        model.add_max_equality(g_max, [g[r] for r in range(p)])
        primary, hi = primary + c_bubble * (sum(g.values()) - g_max), hi + c_bubble * p * g_hi
    ties = C * L + 1
    weight = ties if (hi + 1) * ties < _INT_LIMIT else 1
    model.minimize(weight * primary + (sum(b.values()) if weight > 1 else 0))

    # Hint: the closed-form split (or any partition the caller trusts).
    if hint_chunks is not None and len(hint_chunks) == C and sum(hint_chunks) == L:
        bounds = np.concatenate([[0], np.cumsum(hint_chunks)])
        for c in range(C + 1):
            model.add_hint(b[c], int(bounds[c]))
    return model, [b[c] for c in range(C + 1)], lits


def _solver(work_limit: float, seed: int):
    """A CP-SAT solver whose answer does not depend on the machine or its load (module docstring)."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.max_deterministic_time = work_limit
    solver.parameters.num_workers = 1  # CP-SAT's multi-worker portfolio is not deterministic
    solver.parameters.random_seed = seed
    return solver


def _explain_infeasible(s: ScaledProblem, work_limit: float, seed: int) -> PartitionInfeasibleError:
    """Name a minimal set of conflicting constraint groups: CP-SAT's sufficient assumptions (one worker), then
    each group dropped in turn while the rest stay infeasible (deletion filter: the set left is minimal)."""

    from ortools.sat.python import cp_model

    def infeasible(names: list[str]) -> tuple[bool, list[str]]:
        model, _, lits = _build(s, None, explain=True, assume=names)
        solver = _solver(work_limit, seed)  # one worker: the assumption core needs the single-worker search too
        status = solver.solve(model)
        by_index = {lit.index: name for name, lit in lits.items()}
        core = [by_index[i] for i in solver.sufficient_assumptions_for_infeasibility() if i in by_index]
        return status == cp_model.INFEASIBLE, core

    names = list(_build(s, None, explain=True)[2])
    _, core = infeasible(names)
    core = core or names
    for name in list(core):
        rest = [x for x in core if x != name]
        if rest and infeasible(rest)[0]:
            core = rest
    return PartitionInfeasibleError(
        f"no contiguous split of the {len(s.layer_types)} layers over {s.pp} pipeline ranks fits: "
        f"{', '.join(core)} cannot all hold their share at once",
        core,
    )
