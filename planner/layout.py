"""`Layout`: the one object that owns the parallel degrees and every training knob of a plan.

It holds DP x TP x PP x CP (x EP inside DP) and the knobs that go with them (ZeRO stage and the HSDP
split, micro-batching, pipeline schedule and virtual stages, recomputation, sequence parallelism), the
order of the mesh axes in rank order, and the layer-to-chunk partition. All divisibility rules that do not
depend on the model live here; model-dependent ones (heads % tp, layers vs partition, sequence % 2cp,
experts % ep) are checked by `check_against_model`. Messages print every factor and the fix.
"""

from __future__ import annotations

from enum import Enum
from math import prod
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Schedule = Literal["gpipe", "1f1b", "interleaved", "zb-h1"]
Recompute = Literal["none", "selective", "full"]


class Axis(str, Enum):
    """Mesh axis names. "Axis" is a mesh axis; "dim" is a tensor dimension."""

    PP = "pp"
    DP_REPLICATE = "dp_replicate"
    DP_SHARD = "dp_shard"
    CP = "cp"
    TP = "tp"


DEFAULT_MESH_AXES: tuple[str, ...] = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
"""Outermost first: TP varies fastest (consecutive ranks, inside an NVLink domain), PP slowest."""


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
        if self.dp % self.dp_shard:
            raise ValueError(f"dp_shard={self.dp_shard} must divide dp={self.dp}")
        if self.zero == 0 and self.dp_shard != 1:
            raise ValueError(f"dp_shard={self.dp_shard} needs zero >= 1 (ZeRO-0 replicates; set dp_shard=1)")
        if self.sequence_parallel and self.tp == 1:
            raise ValueError("sequence_parallel=True needs tp > 1")
        if (self.dp * self.cp) % self.ep:
            raise ValueError(f"ep={self.ep} must divide dp*cp={self.dp * self.cp} (experts are sharded inside DP x CP)")
        if self.pp == 1 and self.virtual_stages != 1:
            raise ValueError(f"virtual_stages={self.virtual_stages} needs pp > 1")
        if self.virtual_stages > 1 and self.schedule != "interleaved":
            raise ValueError(f"virtual_stages={self.virtual_stages} needs schedule='interleaved' (got {self.schedule!r})")
        if self.schedule == "interleaved" and self.pp > 1 and self.virtual_stages < 2:
            raise ValueError("schedule='interleaved' needs virtual_stages >= 2")
        if self.pp > 1 and self.schedule in ("1f1b", "interleaved", "zb-h1") and self.num_microbatches < self.pp:
            raise ValueError(
                f"num_microbatches={self.num_microbatches} < pp={self.pp}: schedule {self.schedule!r} needs at "
                "least as many micro-batches as pipeline ranks"
            )
        if self.schedule == "interleaved" and self.pp > 1 and self.num_microbatches % self.pp:
            raise ValueError(
                f"interleaved schedule needs num_microbatches={self.num_microbatches} divisible by pp={self.pp}"
            )
        if self.layer_partition is not None:
            if len(self.layer_partition) != self.num_chunks:
                raise ValueError(
                    f"layer_partition has {len(self.layer_partition)} entries; needs pp*virtual_stages={self.num_chunks}"
                )
            if any(n < 0 for n in self.layer_partition):
                raise ValueError(f"layer_partition={list(self.layer_partition)} has a negative entry")
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


def product(values: tuple[int, ...]) -> int:
    return prod(values)
