"""The resolved `Cluster`: a concrete set of hosts with every profile it uses embedded.

A plan embeds it (JSON in, JSON out), so it carries the GPU and link profiles themselves, not their names
only: a plan stays readable after the data folder changes. `fingerprint()` hashes the canonical JSON of the
hardware content (not where it was loaded from).
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hardware_profiles.cluster_schema import MAX_GPUS, Network, NodeShape, NVLinkDomain
from hardware_profiles.schema import GPUProfile, LinkProfile, Name


class HostGroup(BaseModel):
    """`hosts` consecutive hosts of one shape, each using `gpus_per_host` of its GPUs (local 0..n-1)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    node: NodeShape = Field(description="The host shape.")
    hosts: int = Field(ge=1, le=MAX_GPUS, description="Hosts in this group (count).")
    gpus_per_host: int = Field(ge=1, le=MAX_GPUS, description="GPUs used per host (count); fewer than node.gpus for a partial host.")


class Cluster(BaseModel):
    """A concrete cluster: hosts in rank order, the fabric, and every profile they reference."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: Name = Field(description="Cluster profile name.")
    description: str = Field(default="", description="What this cluster is.")
    origin: str = Field(default="", description="Where the profile came from (builtin name or file path).")
    host_groups: list[HostGroup] = Field(min_length=1, description="Host groups in host (and rank) order.")
    gpus: dict[str, GPUProfile] = Field(description="Every GPU profile used, by name.")
    links: dict[str, LinkProfile] = Field(description="Every link profile used, by name.")
    network: Network | None = Field(default=None, description="Switched fabric between hosts.")
    nvlink_domain: NVLinkDomain | None = Field(default=None, description="Rack-scale NVLink domain.")
    sources: dict[str, str] = Field(default_factory=dict, description="Citations of the cluster shape's numbers.")

    @model_validator(mode="after")
    def _check(self) -> Cluster:
        per_host = {g.gpus_per_host for g in self.host_groups}
        if len(per_host) != 1:
            raise ValueError(f"host groups use different GPUs per host {sorted(per_host)}; use one count")
        for i, g in enumerate(self.host_groups):
            if g.node.gpu not in self.gpus:
                raise ValueError(f"host_groups.{i}.node.gpu {g.node.gpu!r} is not embedded in 'gpus'")
            if g.gpus_per_host > g.node.gpus and not g.node.virtual_devices:
                raise ValueError(f"host_groups.{i}: gpus_per_host {g.gpus_per_host} > node.gpus {g.node.gpus}")
            for field in ("scaleup_link", "pcie_link", "nic_link"):
                name = getattr(g.node, field)
                if name is not None and name not in self.links:
                    raise ValueError(f"host_groups.{i}.node.{field} {name!r} is not embedded in 'links'")
        if self.num_nodes > 1 and self.network is None and self.nvlink_domain is None:
            raise ValueError(f"{self.num_nodes} hosts but no network joins them")
        for i, lvl in enumerate(self.network.levels if self.network else []):
            if lvl.link not in self.links:
                raise ValueError(f"network.levels.{i}.link {lvl.link!r} is not embedded in 'links'")
        if self.nvlink_domain is not None and self.nvlink_domain.link not in self.links:
            raise ValueError(f"nvlink_domain.link {self.nvlink_domain.link!r} is not embedded in 'links'")
        return self

    @property
    def num_nodes(self) -> int:
        """Hosts (count)."""
        return sum(g.hosts for g in self.host_groups)

    @property
    def gpus_per_node(self) -> int:
        """GPUs per host (count); the same on every host, so rank = host * gpus_per_node + local."""
        return self.host_groups[0].gpus_per_host

    @property
    def num_gpus(self) -> int:
        """GPUs (devices) in the cluster (count)."""
        return self.num_nodes * self.gpus_per_node

    @cached_property
    def host_gpu_names(self) -> list[str]:
        """GPU profile name of each host, in host order (two kinds in a heterogeneous cluster)."""
        return [g.node.gpu for g in self.host_groups for _ in range(g.hosts)]

    def host_group_of(self, host: int) -> HostGroup:
        """The group that host `host` belongs to."""
        if not 0 <= host < self.num_nodes:
            raise IndexError(f"host {host} out of range 0..{self.num_nodes - 1}")
        for g in self.host_groups:
            if host < g.hosts:
                return g
            host -= g.hosts
        raise AssertionError("unreachable")

    def gpu_profile_of_host(self, host: int) -> GPUProfile:
        """GPU profile of the devices on host `host`."""
        return self.gpus[self.host_group_of(host).node.gpu]

    def canonical_json(self) -> str:
        """Sorted-key compact JSON of the hardware content (origin left out)."""
        data = self.model_dump(mode="json", exclude={"origin"})
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def fingerprint(self) -> str:
        """sha256 hex digest of `canonical_json()`: equal hardware, equal fingerprint."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()
