"""File format of node and cluster shapes (`data/clusters/*.yaml`).

A cluster is a list of node groups (a node shape and how many of it), an optional switched network
(levels leaf -> spine -> core, each with its fan-in and uplink oversubscription), and an optional rack-scale
NVLink domain (GB200 NVL72: 18 trays share one NVLink fabric). Names of GPUs and links are checked against
the data folder by the loader, which knows the file path for the error message.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hardware_profiles.schema import Name, Sourced

MAX_GPUS = 2**20
"""Largest count of hosts or devices accepted anywhere in a cluster (1,048,576): an input-sanity bound, not a
hardware fact. The topology keeps arrays per host and per device, so an absurd count (a typo, 10**12) must
fail validation in one line rather than exhaust memory or overflow int64 arrays."""


class NodeShape(BaseModel):
    """One host: its GPUs, how they talk to each other, and its NICs."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: Name = Field(description="Human name, e.g. 'DGX H100'.")
    gpu: Name = Field(description="GPU profile name (data/gpus).")
    gpus: int = Field(ge=1, le=MAX_GPUS, description="GPUs per host (count).")
    scaleup_link: Name | None = Field(
        default=None,
        description="Link profile of the GPU-to-GPU switch fabric (NVLink via NVSwitch, or loopback for CPU "
        "processes); null when GPUs talk through PCIe only.",
    )
    pcie_link: Name | None = Field(
        default=None,
        description="Link profile of each GPU's (and NIC's) PCIe attachment; null only for virtual devices "
        "(CPU processes), which talk through scaleup_link.",
    )
    gpus_per_pcie_switch: int = Field(
        default=1, ge=1, le=MAX_GPUS, description="GPUs sharing one PCIe switch (count); 1 = each GPU on its own switch/root port."
    )
    nics: int = Field(default=0, ge=0, le=MAX_GPUS, description="Compute-fabric NICs (ports) per host (count).")
    nic_link: Name | None = Field(default=None, description="Link profile of each NIC port.")
    nic_of_gpu: list[int] | None = Field(
        default=None,
        description="Index of the NIC closest to each GPU (non-decreasing); default spreads GPUs evenly: i*nics//gpus.",
    )
    virtual_devices: bool = Field(
        default=False,
        description="Devices are processes (CPU/gloo): any count per host is allowed and they share host memory.",
    )

    @model_validator(mode="after")
    def _check(self) -> NodeShape:
        if self.pcie_link is None and (self.nics > 0 or self.scaleup_link is None):
            raise ValueError("pcie_link is required unless the host has no NICs and a scaleup_link")
        if (self.nics > 0) != (self.nic_link is not None):
            raise ValueError("give both 'nics' (> 0) and 'nic_link', or neither")
        if self.gpus % self.gpus_per_pcie_switch:
            raise ValueError(f"gpus_per_pcie_switch={self.gpus_per_pcie_switch} must divide gpus={self.gpus}")
        if self.nic_of_gpu is not None:
            if len(self.nic_of_gpu) != self.gpus:
                raise ValueError(f"nic_of_gpu has {len(self.nic_of_gpu)} entries; needs one per GPU ({self.gpus})")
            if any(not 0 <= n < self.nics for n in self.nic_of_gpu):
                raise ValueError(f"nic_of_gpu entries must be in 0..{self.nics - 1}")
            if any(b < a for a, b in zip(self.nic_of_gpu, self.nic_of_gpu[1:], strict=False)):
                raise ValueError("nic_of_gpu must be non-decreasing (number NICs in the order of their GPUs)")
        return self

    def nic_index(self, local: int) -> int:
        """NIC closest to GPU `local` (-1 when the host has no NIC)."""
        if self.nics == 0:
            return -1
        if self.nic_of_gpu is not None:
            return self.nic_of_gpu[local]
        return local * self.nics // self.gpus


class NodeGroup(BaseModel):
    """`count` hosts of one shape. Hosts are numbered group by group, in file order."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    node: NodeShape = Field(description="The host shape.")
    count: int = Field(ge=1, le=MAX_GPUS, description="Hosts of this shape in the full cluster (count).")
    weight: float | None = Field(
        default=None,
        gt=0,
        description="Share of hosts this group gets when a smaller/larger cluster is requested with nodes=N "
        "(default: count). Split by largest remainder, ties to the earlier group.",
    )


class NetworkLevel(BaseModel):
    """One switch tier. Level 0 is the leaf; the last level joins everything (its size is not used)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: Name = Field(description="Tier name: leaf, spine, core ...")
    size: int = Field(
        ge=1,
        le=MAX_GPUS,
        description="Fan-in: hosts per leaf switch (per rail if rail-optimized) for level 0; lower-level "
        "switch groups per switch group above (count).",
    )
    oversubscription: float = Field(
        default=1.0, ge=1.0, description="Down:up bandwidth ratio of this tier's uplinks (1 = non-blocking)."
    )
    link: Name = Field(description="Link profile of the switch ports of this tier.")


class Network(BaseModel):
    """A tree of switches (fat tree, possibly oversubscribed), optionally rail-optimized."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    rail_optimized: bool = Field(
        description="NIC i of every host in a leaf group plugs into leaf switch i (a 'rail'); else all NICs "
        "of a host share one top-of-rack switch."
    )
    levels: list[NetworkLevel] = Field(min_length=1, description="Switch tiers, leaf first.")

    @model_validator(mode="after")
    def _check(self) -> Network:
        if self.rail_optimized and len(self.levels) < 2:
            raise ValueError("a rail-optimized network needs a tier above the rail leaves (add a 'spine' level)")
        return self


class NVLinkDomain(BaseModel):
    """A rack-scale NVLink domain: `hosts` consecutive hosts share one NVLink switch fabric."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    hosts: int = Field(ge=1, le=MAX_GPUS, description="Hosts (compute trays) per NVLink domain (count).")
    link: Name = Field(description="Link profile of the domain's NVLink (e.g. nvlink5).")


class ClusterSpec(Sourced):
    """A named cluster shape as written in a YAML file."""

    name: Name = Field(description="Cluster profile name.")
    description: str = Field(default="", description="What this cluster is.")
    node_groups: list[NodeGroup] = Field(min_length=1, description="Host groups, in host order.")
    network: Network | None = Field(default=None, description="Switched fabric between hosts; null = single host.")
    nvlink_domain: NVLinkDomain | None = Field(default=None, description="Rack-scale NVLink domain, if any.")
    default_nodes: int = Field(ge=1, le=MAX_GPUS, description="Hosts used when no nodes=/gpus= is given (count).")

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        per_host = {g.node.gpus for g in self.node_groups}
        if len(per_host) > 1:
            raise ValueError(
                f"node groups have different GPUs per host {sorted(per_host)}; ranks are host-major with one "
                "gpus_per_node, so use one count"
            )
        if self.network is not None and any(g.node.nics == 0 for g in self.node_groups):
            raise ValueError("a cluster with a network needs nics > 0 on every node shape")
        if self.nvlink_domain is not None and any(g.node.scaleup_link is None for g in self.node_groups):
            raise ValueError("an nvlink_domain needs scaleup_link on every node shape")
        return self
