"""Hardware profiles: GPUs, links and cluster shapes as sourced YAML data, and their loader.

Never imports torch or the planner (data flows one way: profiles -> planner). Public API:

    import hardware_profiles as hp
    hp.gpu("h100-sxm").peak_flops["bf16"]          # FLOP/s
    hp.cluster("dgx-h100", nodes=4).num_gpus         # 32
    hp.cluster("local-cpu", gpus=4)                  # 4 gloo processes on this host
    hp.cluster("my_cluster.yaml", nodes=2)           # a user's own file
    hp.list_gpus(), hp.list_links(), hp.list_clusters()

Every number in the data carries a citation in the profile's `sources`.
"""

from hardware_profiles.cluster import Cluster, HostGroup
from hardware_profiles.cluster_schema import (
    ClusterSpec,
    Network,
    NetworkLevel,
    NodeGroup,
    NodeShape,
    NVLinkDomain,
)
from hardware_profiles.errors import ProfileError
from hardware_profiles.loader import (
    DATA_DIR,
    cluster,
    cluster_spec,
    gpu,
    link,
    list_clusters,
    list_gpus,
    list_links,
)
from hardware_profiles.schema import DTYPES, LINK_KINDS, GPUProfile, LinkProfile, MatmulEfficiency

__all__ = [
    "DATA_DIR",
    "DTYPES",
    "LINK_KINDS",
    "Cluster",
    "ClusterSpec",
    "GPUProfile",
    "HostGroup",
    "LinkProfile",
    "MatmulEfficiency",
    "NVLinkDomain",
    "Network",
    "NetworkLevel",
    "NodeGroup",
    "NodeShape",
    "ProfileError",
    "cluster",
    "cluster_spec",
    "gpu",
    "link",
    "list_clusters",
    "list_gpus",
    "list_links",
]
