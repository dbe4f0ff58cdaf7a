"""Cluster sizes for a request (hosts, GPUs per host, hosts per node group) and shared-host device memory.

Used when a cluster profile is loaded (`hardware_profiles.loader.cluster`) and when a resolved cluster is
resized (`hardware_profiles.resize`), so both size clusters by the same rules.
"""

from __future__ import annotations

import math

from hardware_profiles.cluster_schema import MAX_GPUS, ClusterSpec, NodeGroup
from hardware_profiles.errors import ProfileError
from hardware_profiles.schema import GPUProfile


def split_hosts(groups: list[NodeGroup], hosts: int) -> list[int]:
    """Hosts per group for a request of `hosts`: largest remainder over weights, ties to the earlier group."""
    weights = [g.weight if g.weight is not None else float(g.count) for g in groups]
    quotas = [hosts * w / sum(weights) for w in weights]
    counts = [math.floor(q) for q in quotas]
    order = sorted(range(len(groups)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in order[: hosts - sum(counts)]:
        counts[i] += 1
    return counts


def cluster_size(spec: ClusterSpec, where: str, nodes: int | None, gpus: int | None) -> tuple[int, int]:
    """(hosts, gpus per host) for a request."""
    hosts, per_host = _requested_sizes(spec, where, nodes, gpus)
    if hosts * per_host > MAX_GPUS:
        raise ProfileError(f"{hosts} hosts x {per_host} GPUs = {hosts * per_host} devices is more than meshplan "
                           f"handles ({MAX_GPUS})", where=where, allowed=f"at most {MAX_GPUS} GPUs in all")
    return hosts, per_host


def _requested_sizes(spec: ClusterSpec, where: str, nodes: int | None, gpus: int | None) -> tuple[int, int]:
    if nodes is not None and gpus is not None:
        raise ProfileError("give nodes= or gpus=, not both", where=where)
    gpn = spec.node_groups[0].node.gpus
    virtual = all(g.node.virtual_devices for g in spec.node_groups)
    if gpus is not None:
        if not isinstance(gpus, int) or gpus < 1:
            raise ProfileError(f"gpus={gpus!r} must be a positive integer", where=where)
        if virtual or gpus <= gpn:
            return 1, gpus
        hosts = -(-gpus // gpn)
        if spec.network is None and spec.nvlink_domain is None:
            raise ProfileError(f"gpus={gpus} needs {hosts} hosts of {gpn} GPUs but this is a single-host profile",
                               where=where, allowed=f"gpus=1..{gpn}")
        if gpus % hosts:
            lo, hi = (hosts - 1) * gpn, hosts * gpn
            raise ProfileError(
                f"gpus={gpus} does not fill {hosts} hosts of {gpn} GPUs evenly",
                where=where,
                allowed=f"1..{gpn}, or a count that splits evenly over the fewest hosts (e.g. {lo} or {hi})",
            )
        return hosts, gpus // hosts
    hosts = spec.default_nodes if nodes is None else nodes
    if not isinstance(hosts, int) or hosts < 1:
        raise ProfileError(f"nodes={nodes!r} must be a positive integer", where=where)
    if hosts > 1 and spec.network is None and spec.nvlink_domain is None:
        raise ProfileError(f"nodes={hosts} but this is a single-host profile", where=where, allowed="nodes=1 or gpus=N")
    return hosts, gpn


def shared_memory(profile: GPUProfile, devices: int) -> GPUProfile:
    """A virtual device's profile when `devices` processes share the host memory evenly."""
    data = profile.model_dump()
    data["memory_bytes"] = profile.memory_bytes // devices
    data["sources"] = dict(profile.sources)
    data["sources"]["memory_bytes"] = f"{profile.sources['memory_bytes']}; divided evenly by {devices} processes on one host"
    return GPUProfile.model_validate(data)
