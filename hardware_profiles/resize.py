"""A resolved cluster at another size, from its own content (the cluster a plan embeds), not from the files.

    import hardware_profiles as hp
    old = hp.Cluster.model_validate(plan.inputs.cluster)
    hp.cluster(old, gpus=4)          # the same host shape, fabric and profiles, 4 GPUs

Used by `meshplan replan`: the plan's hardware stays what it was planned on, even if the profile files have
changed since (a recalibrated cpu.yaml) or the plan came from another machine. Sizes follow the loader's
rules (`nodes=N` hosts, or `gpus=N` on as few hosts as possible, evenly); node groups keep their order and
are weighted by their current host counts (largest remainder, ties to the earlier group).

Virtual devices (CPU processes) share their host's memory: the embedded profile holds the share of the old
process count, so the host total is taken back as share x processes and divided again. The original split
rounded down, so that total (and the new share) can be short of the built-in profile's by at most
processes - 1 bytes.
"""

from __future__ import annotations

import re

from hardware_profiles.cluster import Cluster, HostGroup
from hardware_profiles.cluster_schema import ClusterSpec, NodeGroup
from hardware_profiles.schema import GPUProfile
from hardware_profiles.sizing import cluster_size, shared_memory, split_hosts

_SHARED = re.compile(r"; divided evenly by \d+ processes on one host$")


def resized(cluster: Cluster, *, nodes: int | None = None, gpus: int | None = None) -> Cluster:
    """`cluster` with `nodes` hosts or `gpus` GPUs (neither: as it is), keeping its shapes and profiles."""
    groups = [NodeGroup(node=g.node, count=g.hosts) for g in cluster.host_groups]
    # Already validated as part of `cluster`: build the spec without re-checking its citations.
    spec = ClusterSpec.model_construct(name=cluster.name, description=cluster.description, node_groups=groups,
                                       network=cluster.network, nvlink_domain=cluster.nvlink_domain,
                                       default_nodes=cluster.num_nodes, sources=cluster.sources)
    if nodes is None and gpus is None:
        gpus = cluster.num_gpus
    hosts, per_host = cluster_size(spec, f"cluster {cluster.name!r} (embedded)", nodes, gpus)
    counts = split_hosts(groups, hosts)
    host_groups = [HostGroup(node=g.node, hosts=c, gpus_per_host=per_host) for g, c in zip(groups, counts, strict=True) if c]
    old_per_host = cluster.gpus_per_node
    profiles: dict[str, GPUProfile] = {}
    for g in host_groups:
        profile = cluster.gpus[g.node.gpu]
        if g.node.virtual_devices:
            profile = shared_memory(_whole_host(profile, old_per_host), per_host)
        profiles[g.node.gpu] = profile
    return Cluster(
        name=cluster.name,
        description=cluster.description,
        origin=cluster.origin,
        host_groups=host_groups,
        gpus=profiles,
        links=cluster.links,
        network=cluster.network,
        nvlink_domain=cluster.nvlink_domain,
        sources=cluster.sources,
    )


def _whole_host(profile: GPUProfile, processes: int) -> GPUProfile:
    """The host-wide profile behind a per-process share (see the module docstring on rounding)."""
    data = profile.model_dump()
    data["memory_bytes"] = profile.memory_bytes * processes
    data["sources"] = dict(profile.sources)
    data["sources"]["memory_bytes"] = _SHARED.sub("", profile.sources["memory_bytes"])
    return GPUProfile.model_validate(data)
