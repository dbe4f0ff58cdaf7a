"""`meshplan topology CLUSTER`: summarise a cluster's graph; optionally write GraphML or node-link JSON.

meshplan topology dgx-h100 --nodes 4
meshplan topology gb200-nvl72 --nodes 36 --graphml nvl72.graphml --json nvl72.json
"""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import typer
from rich.table import Table

from planner.cli.app import abort, app, err, out
from planner.cli.options import emit_json
from planner.errors import UserError


def summarize(topo) -> dict:  # noqa: ANN001 - planner.topology.Topology, imported lazily
    """Counts per element kind, link kinds with bandwidths, and two reference collectives."""
    lay, c = topo.layout, topo.cluster
    gpn, hosts = c.gpus_per_node, c.num_nodes
    links: Counter = Counter()
    for cls, labels in lay.label.items():
        if cls.endswith("_up") and len(labels):
            for label, cap in zip(labels, lay.cap[cls], strict=True):
                if cap == cap:  # skip NaN (absent PCIe on CPU hosts)
                    links[(str(label), float(cap))] += 1
    tp = min(8, gpn)
    tp_est = topo.axis_collective("all_reduce", (c.num_gpus // tp, tp), 1)
    dp_est = topo.axis_collective("all_reduce", (hosts, gpn), 0)
    return {
        "cluster": c.name,
        "fingerprint": c.fingerprint(),
        "gpus": c.num_gpus,
        "hosts": hosts,
        "gpus_per_host": gpn,
        "gpu_kinds": dict(Counter(g for g in c.host_gpu_names for _ in range(gpn))),
        "scaleup_domains": int(len(set(lay.dom[lay.dom >= 0].tolist()))),
        "pcie_switches": int(len(lay.sw_host)),
        "nics": int(len(lay.nic_host)),
        "switches": {name: int(anc.max()) + 1 for name, anc in zip(lay.level_names, lay.anc, strict=True)},
        "links": [{"link": k[0], "bandwidth_Bps": k[1], "count": v} for k, v in sorted(links.items())],
        "reference": {
            f"tp{tp}_all_reduce": {"bus_bandwidth_Bps": tp_est.bus_bandwidth_Bps, "bottleneck": tp_est.bottleneck},
            "dp_all_reduce_across_hosts": {"bus_bandwidth_Bps": dp_est.bus_bandwidth_Bps, "bottleneck": dp_est.bottleneck,
                                           "group_size": dp_est.group_size, "groups": dp_est.num_groups},
        },
    }


def _render(s: dict) -> None:
    kinds = ", ".join(f"{n}x {k}" for k, n in s["gpu_kinds"].items())
    out.print(f"{s['cluster']}: {s['gpus']} GPUs ({kinds}) on {s['hosts']} hosts x {s['gpus_per_host']}", markup=False)
    t = Table(title="Elements", title_justify="left")
    t.add_column("element")
    t.add_column("count", justify="right")
    t.add_row("scale-up (NVLink/loopback) domains", str(s["scaleup_domains"]))
    t.add_row("PCIe switches", str(s["pcie_switches"]))
    t.add_row("NICs", str(s["nics"]))
    for name, n in s["switches"].items():
        t.add_row(f"{name} switch groups", str(n))
    out.print(t)
    lt = Table(title="Links (per direction)", title_justify="left")
    lt.add_column("link")
    lt.add_column("GB/s", justify="right")
    lt.add_column("count", justify="right")
    for lk in s["links"]:
        lt.add_row(lk["link"], f"{lk['bandwidth_Bps'] / 1e9:.4g}", str(lk["count"]))
    out.print(lt)
    rt = Table(title="All-reduce bus bandwidth (all groups at once)", title_justify="left")
    rt.add_column("collective")
    rt.add_column("GB/s", justify="right")
    rt.add_column("bottleneck")
    for name, r in s["reference"].items():
        rt.add_row(name, f"{r['bus_bandwidth_Bps'] / 1e9:.4g}", r["bottleneck"])
    out.print(rt)


@app.command("topology")
def topology_command(
    cluster: str = typer.Argument(..., metavar="CLUSTER", help="Cluster profile name or YAML path."),
    nodes: int = typer.Option(None, "--nodes", min=1, help="Hosts to use (default: the profile's default_nodes)."),
    gpus: int = typer.Option(None, "--gpus", min=1, help="GPUs to use, on as few hosts as possible."),
    graphml: str = typer.Option(None, "--graphml", metavar="FILE", help="Write the graph as GraphML."),
    json_out: str = typer.Option(None, "--json", metavar="FILE", help="Write summary, cluster and node-link graph as JSON ('-' = stdout)."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing output files."),
) -> None:
    """Summarise a cluster's topology: elements, links, TP and DP all-reduce bus bandwidth."""
    import networkx as nx

    import hardware_profiles as hp
    from planner.io import check_targets, write_bytes_atomic
    from planner.topology import Topology
    from planner.topology.graph import node_link_json

    try:
        check_targets(graphml, json_out, force=force)  # both or neither, before any work
        topo = Topology(hp.cluster(cluster, nodes=nodes, gpus=gpus))
        summary = summarize(topo)
        if graphml is not None:
            buf = io.BytesIO()
            nx.write_graphml(topo.graph, buf)
            write_bytes_atomic(Path(graphml), buf.getvalue(), force=force)
            err.print(f"wrote {graphml}", markup=False)
        if json_out is not None:
            doc = {"summary": summary, "cluster": topo.cluster.model_dump(mode="json"), "graph": node_link_json(topo.graph)}
            if emit_json(json.dumps(doc), json_out, force=force):
                return
    except (UserError, hp.ProfileError) as exc:
        abort(str(exc))
    _render(summary)
