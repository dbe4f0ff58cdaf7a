"""`Layout`: the one object that owns the parallel degrees and every training knob of a plan.

It holds DP x TP x PP x CP (x EP inside DP) and the knobs that go with them (ZeRO stage and the HSDP
split, micro-batching, pipeline schedule and virtual stages, recomputation, sequence parallelism), the
order of the mesh axes in rank order, and the layer-to-chunk partition. Building one checks the shape of
each field and every rule of `planner.layout.rules` that needs no model numbers; the model-, workload- and
cluster-dependent rules run in `rules.check(layout, model, workload, gpus)`. Messages print every factor.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.layout.names import ANY_FRAMEWORK, MAX_SIZE
from planner.layout.rules import Facts, violations
from planner.layout.schedules import BY_CODE, SCHEDULE_NAMES
from planner.layout.table import DEFAULT_MESH_AXES, MESH_ORDERS, RECOMPUTE_NAMES

Schedule = Literal[SCHEDULE_NAMES]  # type: ignore[valid-type]
"""Pipeline schedule names: the registry's (`planner.layout.schedules.SCHEDULES`)."""
Recompute = Literal[RECOMPUTE_NAMES]  # type: ignore[valid-type]
"""Recomputation policies: `planner.layout.table.RecomputeCode`'s."""


_SIZES = ("dp", "tp", "pp", "cp", "ep", "micro_batch", "num_microbatches", "virtual_stages", "dp_shard")
"""The integer knobs (`MAX_SIZE` bounds them)."""


class Layout(BaseModel):
    """A complete parallel layout. Sizes multiply to `world_size`; EP is a sub-grouping of DP x CP."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dp: int = Field(1, ge=1, description="Data-parallel degree (replicas x shards).")
    tp: int = Field(1, ge=1, description="Tensor-parallel degree (Megatron column/row split).")
    pp: int = Field(1, ge=1, description="Pipeline-parallel degree (number of pipeline ranks).")
    cp: int = Field(1, ge=1, description="Context-parallel degree (sequence split, all-gathered K/V).")
    ep: int = Field(1, ge=1, description="Expert-parallel degree; EP groups are formed inside DP x CP.")
    micro_batch: int = Field(1, ge=1, description="Sequences per micro-batch per DP replica.")
    num_microbatches: int = Field(1, ge=1, description="Micro-batches per step per DP replica.")
    schedule: Schedule = Field("1f1b", description="Pipeline schedule (ignored when pp == 1).")
    virtual_stages: int = Field(1, ge=1, description="Model chunks per pipeline rank (interleaved schedule).")
    zero: int = Field(0, ge=0, le=3, description="ZeRO stage: 0 replicate, 1 optimizer, 2 +gradients, 3 +parameters (FSDP).")
    dp_shard: int = Field(
        1,
        ge=1,
        description="Size of the ZeRO/FSDP sharding group inside DP; dp_shard < dp with zero > 0 is HSDP. Must be 1 when zero == 0.",
    )
    recompute: Recompute = Field("none", description="Activation recomputation policy (Korthikanti et al. 2022).")
    sequence_parallel: bool = Field(False, description="Megatron sequence parallelism in the TP group (needs tp > 1).")
    mesh_axes: tuple[str, ...] = Field(
        DEFAULT_MESH_AXES, description="Mesh axis names in rank order, outermost (slowest-varying) first."
    )
    layer_partition: tuple[int, ...] | None = Field(
        None,
        description=(
            "Decoder layers per model chunk, pp * virtual_stages entries; chunk c runs on pipeline rank c % pp "
            "(Megatron interleaving). Embeddings live on chunk 0, the final norm and LM head on the last chunk. "
            "None means as even as possible."
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> Layout:
        if sorted(self.mesh_axes) != sorted(DEFAULT_MESH_AXES):
            raise ValueError(
                f"mesh_axes={list(self.mesh_axes)} must be a permutation of {list(DEFAULT_MESH_AXES)}"
            )
        if self.layer_partition is not None:
            if len(self.layer_partition) != self.num_chunks:
                raise ValueError(
                    f"layer_partition has {len(self.layer_partition)} entries; needs pp*virtual_stages={self.num_chunks}"
                )
            if any(n < 0 for n in self.layer_partition):
                raise ValueError(f"layer_partition={list(self.layer_partition)} has a negative entry")
        for name, value in (*((k, getattr(self, k)) for k in _SIZES), *(("layer_partition", n) for n in self.layer_partition or ())):
            if value > MAX_SIZE:
                raise ValueError(f"{name}={value} is larger than any layout can be (at most {MAX_SIZE:,})")
        found = violations(self, Facts(), ANY_FRAMEWORK)  # the generic rules that read no model numbers
        if found:
            raise ValueError("; ".join(text for _, text in found))
        return self

    # Derived facts -------------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def dp_replicate(self) -> int:
        return self.dp // self.dp_shard

    @property
    def hsdp(self) -> bool:
        return self.zero > 0 and 1 < self.dp_shard < self.dp

    @property
    def num_chunks(self) -> int:
        return self.pp * self.virtual_stages

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step: dp x micro_batch x num_microbatches."""
        return self.dp * self.micro_batch * self.num_microbatches

    def axis_sizes(self) -> dict[str, int]:
        return {
            "pp": self.pp,
            "dp_replicate": self.dp_replicate,
            "dp_shard": self.dp_shard,
            "cp": self.cp,
            "tp": self.tp,
        }

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        """Sizes of `mesh_axes`, in the same order (row-major over ranks 0..world_size-1)."""
        sizes = self.axis_sizes()
        return tuple(sizes[a] for a in self.mesh_axes)

    def partition(self, num_layers: int) -> tuple[int, ...]:
        """Layers per chunk: the explicit partition, or the most even split (earlier chunks get the extras)."""
        if self.layer_partition is not None:
            if sum(self.layer_partition) != num_layers:
                raise ValueError(
                    f"layer_partition sums to {sum(self.layer_partition)} but the model has {num_layers} layers"
                )
            return self.layer_partition
        base, extra = divmod(num_layers, self.num_chunks)
        return tuple(base + (1 if c < extra else 0) for c in range(self.num_chunks))

    def rank_coords(self, rank: int) -> dict[str, int]:
        """Coordinates of `rank` along every axis (row-major over `mesh_shape`)."""
        coords: dict[str, int] = {}
        rem = rank
        for axis, size in zip(reversed(self.mesh_axes), reversed(self.mesh_shape)):
            coords[axis] = rem % size
            rem //= size
        return coords

    def describe(self) -> str:
        parts = [f"dp{self.dp}", f"tp{self.tp}", f"pp{self.pp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        text = "x".join(parts) + f" mb{self.micro_batch}x{self.num_microbatches}"
        if self.pp > 1:
            text += f" {self.schedule}" + (f"(v{self.virtual_stages})" if self.virtual_stages > 1 else "")
        text += f" zero{self.zero}"
        if self.hsdp:
            text += f"(hsdp {self.dp_replicate}x{self.dp_shard})"
        if self.sequence_parallel:
            text += " sp"
        if self.recompute != "none":
            text += f" rc-{self.recompute}"
        return text


KNOBS: tuple[str, ...] = tuple(f for f in Layout.model_fields if f != "layer_partition")
"""Layout fields a user can pin (every knob but the partition, which follows from the others)."""


def row_to_layout(row: dict[str, Any], partition: tuple[int, ...] | None = None) -> Layout:
    """The `Layout` of one table row (`planner.layout.table.COLUMNS`), with an optional layer partition."""
    return Layout(
        dp=row["dp"], tp=row["tp"], pp=row["pp"], cp=row["cp"], ep=row["ep"], micro_batch=row["mb"],
        num_microbatches=row["m"], schedule=BY_CODE[row["sched"]].name, virtual_stages=row["v"], zero=row["zero"],
        dp_shard=row["dp_shard"], recompute=RECOMPUTE_NAMES[row["rc"]], sequence_parallel=bool(row["sp"]),
        mesh_axes=MESH_ORDERS[row["order"]], layer_partition=partition,
    )
