"""Devices that share a host's cores (CPU processes): a step needs at least the host's CPU work over its cores.

The rest of the cost model treats devices as independent: each runs its work at its own (solo) speed, and
the pipeline formula gives the makespan. CPU training processes are not independent: the processes of a
host share its cores, so when more are busy than the host runs at full speed (`devices_at_full_speed`,
measured by `meshplan calibrate`: processes x solo time / time with all busy), they slow each other down.
A process waiting on a collective or a pipeline neighbour uses no core (gloo blocks, it does not spin), so
the slowdown depends on how many are busy, which the schedule decides: all of them all the time under DP
and TP, fewer in a pipeline's fill and drain. Rather than simulate that, the step takes the larger of two
bounds, each exact in its own regime (a roofline over the host's CPU throughput):

    step >= the cost model's step at solo speed                               (enough cores)
    step >= CPU work of the host's ranks / devices_at_full_speed + exposed waiting   (cores saturated)

CPU work of one pipeline (its pp ranks), per step: m * (L * u_comp + e_first + e_last) plus the optimizer
over the parameters its ranks hold; a host holds min(world, devices per host) ranks, i.e. that many / pp
pipelines' worth. Exposed waiting is the time every rank spends in collectives on the critical path (TP, CP,
EP in-layer communication of the busiest rank, pipeline transfers, exposed DP communication), during which
the host's cores idle for this job. When the second bound wins, the difference is compute slowed by
sharing cores, and the breakdown books it under compute.
"""

from __future__ import annotations

import numpy as np

from planner.cost.context import CostContext


def devices_at_full_speed(ctx: CostContext) -> float | None:
    """The host's concurrency for devices that share it (None: independent devices, no bound)."""
    value = getattr(ctx.gpu, "devices_at_full_speed", None)
    return float(value) if value else None


def host_bound_s(
    ctx: CostContext,
    world: np.ndarray,
    pp: np.ndarray,
    pipeline_work_s: np.ndarray,
    exposed_wait_s: np.ndarray,
) -> np.ndarray | None:
    """The cores-saturated bound per row (see the module docstring); None when devices do not share hosts."""
    slots = devices_at_full_speed(ctx)
    if slots is None:
        return None
    ranks_on_host = np.minimum(world, int(ctx.topology.gpus_per_node)).astype(float)
    return pipeline_work_s * ranks_on_host / pp.astype(float) / slots + exposed_wait_s


def apply(
    ctx: CostContext,
    table: dict[str, np.ndarray],
    step_s: np.ndarray,
    microbatches: np.ndarray,
    pipeline_compute_s: np.ndarray,
    pipeline_params: np.ndarray,
    exposed_wait_s: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(step, extra compute) after the host bound: `step_s` unchanged and 0 where devices do not share hosts.
    `pipeline_compute_s` is the compute of one micro-batch over all pp ranks of one pipeline (its layers plus
    the embedding and head), `pipeline_params` the parameters those ranks hold (each rank's local share, summed).
    """
    if devices_at_full_speed(ctx) is None:
        return step_s, np.zeros_like(step_s)
    from planner.cost.fixed_costs import optimizer_step_s

    world = table["dp"] * table["tp"] * table["pp"] * table["cp"]
    work = microbatches * pipeline_compute_s
    work = work + optimizer_step_s(ctx, pipeline_params, table["zero"], table["dp_shard"], cp=table["cp"])
    bound = host_bound_s(ctx, world, table["pp"], work, exposed_wait_s)
    new = np.maximum(step_s, bound)
    return new, new - step_s
