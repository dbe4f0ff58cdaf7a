"""Time `Topology` construction and uncached `axis_collective` queries on a 65,536-GPU cluster.

Targets (project brief): build < 0.5 s for 8,192 DGX H100 nodes; any axis_collective < 20 ms uncached.
Run:  .venv/bin/python benchmarks/topology_speed.py [--nodes 8192] [--repeats 5]
"""

from __future__ import annotations

import argparse
import math
import time

import hardware_profiles as hp
from planner.topology import KINDS, Topology

MESHES = [(8192, 8), (64, 128, 8), (16, 16, 16, 16), (2, 4096, 8), (65536,)]


def best_of(fn, repeats: int) -> float:
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    cluster = hp.cluster("dgx-h100", nodes=args.nodes)
    build = best_of(lambda: Topology(cluster), args.repeats)
    print(f"Topology(dgx-h100 x {args.nodes} = {cluster.num_gpus} GPUs) build: {build * 1e3:.1f} ms (best of {args.repeats})")
    topo = Topology(cluster)
    worst = 0.0
    for mesh in MESHES:
        if math.prod(mesh) != cluster.num_gpus:
            continue
        for axis in range(len(mesh)):
            for kind in KINDS:
                def query(kind=kind, mesh=mesh, axis=axis):
                    topo.clear_cache()
                    return topo.axis_collective(kind, mesh, axis)

                t = best_of(query, args.repeats)
                worst = max(worst, t)
                est = query()
                print(f"  {kind:<15} mesh {str(mesh):<20} axis {axis}: {t * 1e3:6.1f} ms  "
                      f"busbw {est.bus_bandwidth_Bps / 1e9:7.2f} GB/s  ({est.bottleneck})")
    print(f"slowest uncached axis_collective: {worst * 1e3:.1f} ms")
    t0 = time.perf_counter()
    g = topo.graph
    print(f"networkx graph (lazy, first access): {time.perf_counter() - t0:.1f} s, "
          f"{g.number_of_nodes()} nodes, {g.number_of_edges()} edges")


if __name__ == "__main__":
    main()
