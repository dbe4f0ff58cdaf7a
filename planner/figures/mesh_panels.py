"""What the device-mesh figures draw per mesh axis: its groups, its collective and the link that limits it.

Shared by the detailed figure (`planner.figures.mesh`) and the aggregated one for large clusters
(`planner.figures.mesh_large`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.plan import Plan

AXIS_COLLECTIVE = {"tp": "all_reduce", "cp": "all_gather", "pp": "p2p", "dp_shard": "reduce_scatter",
                   "dp_replicate": "all_reduce"}
"""The collective the cost model costs on each axis (planner.cost.evaluate)."""
_LINK_CATEGORY = {"nvlink": "NVLink", "pcie": "PCIe", "infiniband": "network", "roce": "network",
                  "ethernet": "network", "loopback": "loopback"}
LINK_STYLE = {"NVLink": "-", "PCIe": "--", "network": ":", "loopback": "-.", "none": "-"}


@dataclass(frozen=True)
class AxisPanel:
    """One panel: a mesh axis, its groups, and the link its collective is limited by."""

    axis: str
    size: int
    num_groups: int
    collective: str
    bottleneck: str  # the topology estimate's bottleneck link label, e.g. "nvlink4", "ib-ndr NIC"
    link: str  # "NVLink", "PCIe", "network (infiniband)", "loopback" or "none"
    gpu_cells: int  # GPU cells drawn for used ranks (detailed mode); 0 when aggregated
    host_cells: int  # host cells drawn (aggregated mode); 0 when detailed


@dataclass(frozen=True)
class MeshFigureData:
    world_size: int
    num_gpus: int
    idle_gpus: int
    num_hosts: int
    aggregated: bool
    aggregation: str  # how the figure aggregated ("" when every GPU is drawn)
    panels: tuple[AxisPanel, ...]


def topology_for(plan: Plan) -> Any:
    from hardware_profiles import Cluster
    from planner.topology import Topology

    return Topology(Cluster.model_validate(plan.inputs.cluster))


def link_of(topo: Any, bottleneck: str) -> str:
    """Link category of a bottleneck label, read from the topology's edge table (label -> technology)."""
    lay = topo.layout
    kinds = {str(lbl): str(k) for cls in lay.label for lbl, k in zip(lay.label[cls], lay.link_kind[cls])}
    tech = kinds.get(bottleneck, "")
    cat = _LINK_CATEGORY.get(tech, "none")
    return f"network ({tech})" if cat == "network" else cat


def axis_panels(plan: Plan, topo: Any) -> list[tuple[AxisPanel, list[list[int]]]]:
    """Every axis of size > 1 with its groups (rank lists) and its link."""
    lay = plan.layout
    shape = lay.mesh_shape
    out = []
    for i, axis in enumerate(lay.mesh_axes):
        if shape[i] <= 1:
            continue
        kind = AXIS_COLLECTIVE[axis]
        est = topo.axis_collective(kind, shape, i)
        groups = topo.mesh_groups(shape, i)
        panel = AxisPanel(axis=axis, size=shape[i], num_groups=len(groups), collective=kind,
                          bottleneck=str(est.bottleneck), link=link_of(topo, str(est.bottleneck)),
                          gpu_cells=0, host_cells=0)
        out.append((panel, groups))
    return out


def axis_cmap(size: int):
    from matplotlib import colormaps

    return colormaps["tab10" if size <= 10 else "tab20" if size <= 20 else "viridis"].resampled(size)
