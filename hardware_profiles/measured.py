"""Profile parts only a measurement fills in (`meshplan calibrate`): framework overhead, host sharing and
collective costs.

All are optional fields of the GPU and link profiles (`GPUProfile.framework_overhead`,
`GPUProfile.devices_at_full_speed`, `LinkProfile.measured_collectives`); datasheet profiles leave them out
and the planner then uses its analytical terms alone. Numbers here need sources like every other (the profile's `sources` map).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class FrameworkOverhead(BaseModel):
    """Host-side time per decoder layer and micro-batch that FLOP and byte counts do not explain:
    a fixed part, a part per token and hidden unit, fixed extras under tensor and data parallelism, the
    pipeline machinery per stage-boundary transfer, and the optimizer step's time per parameter.

    Python, the dispatcher, autograd bookkeeping and small-kernel costs of an eager training stack. Where
    the host also does the math (CPU processes) it adds to the compute time; on an accelerator the host
    runs ahead of the device, so a layer takes the longer of the two (planner.cost.overhead).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    layer_forward_s: float = Field(ge=0, description="Per decoder layer and micro-batch, forward pass (s).")
    layer_backward_s: float = Field(ge=0, description="Per decoder layer and micro-batch, backward pass (s).")
    forward_s_per_element: float = Field(
        0.0,
        ge=0,
        description="Per decoder layer, forward: seconds per token and hidden unit of a micro-batch, divided by the "
        "TP degree (eager element-wise kernels beyond the cost model's itemised bytes) (s).",
    )
    backward_s_per_element: float = Field(
        0.0, ge=0, description="The same for the backward pass (s)."
    )
    tp_layer_forward_s: float = Field(
        0.0, ge=0, description="Extra per layer and micro-batch, forward, when the layer is tensor-parallel (s)."
    )
    tp_layer_backward_s: float = Field(
        0.0, ge=0, description="Extra per layer and micro-batch, backward, when the layer is tensor-parallel (s)."
    )
    dp_layer_forward_s: float = Field(
        0.0, ge=0, description="Extra per layer and micro-batch, forward, when the layer is a data-parallel "
        "(FSDP/DDP) unit: its hooks (s)."
    )
    dp_layer_backward_s: float = Field(
        0.0, ge=0, description="Extra per layer and micro-batch, backward, for a data-parallel unit (s)."
    )
    pp_transfer_s: float = Field(
        0.0, ge=0, description="Pipeline machinery per stage-boundary transfer of a micro-batch (schedule "
        "bookkeeping, send/recv setup), beyond the transfer itself (s)."
    )
    optimizer_s_per_param: float = Field(
        0.0, ge=0, description="Optimizer step time per parameter held (the framework's AdamW as it runs); the "
        "cost model uses the larger of this and its memory-traffic estimate (s)."
    )


class MeasuredCollective(BaseModel):
    """One collective kind over groups of one size on this fabric: time = latency_s + factor * S / bandwidth.

    `factor` is the NCCL bus-bandwidth factor of the kind (planner.topology.estimate.bytes_factor), S the
    message size in the planner's convention; measured with every group of that size running at once (a
    mesh axis). On a host's own link (`meshplan calibrate`) it overrides the ring model for groups inside one
    host; on a NIC link (a multi-host measurement entered by hand, with its source: how many hosts, the message
    size, the library version) it floors the cost of groups that cross hosts (planner.cost.measured_comm).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    kind: Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p"] = Field(description="Collective.")
    group_size: int = Field(ge=2, description="Ranks per group (count).")
    latency_s: float = Field(ge=0, description="Time of a call with an empty message: the fitted intercept (s).")
    bus_bandwidth_Bps: float = Field(gt=0, description="Bus bandwidth: factor * S / (time - latency) (bytes/s).")
