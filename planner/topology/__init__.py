"""Cluster topology: the hardware as a networkx graph, and collective bandwidth/latency queries on it.

Public API: `Topology(cluster)` / `build_topology(cluster)`, `Topology.collective(kind, group, concurrent=)`,
`Topology.mesh_groups(mesh_shape, axis, ranks=)`, `Topology.axis_collective(kind, mesh_shape, axis)`,
`CollectiveEstimate`, `KINDS`. `planner.topology.detect` reads the local machine. Pure Python (numpy,
networkx); never imports torch.
"""

from planner.topology.core import Topology, build_topology
from planner.topology.estimate import KINDS, CollectiveEstimate

__all__ = ["KINDS", "CollectiveEstimate", "Topology", "build_topology"]
