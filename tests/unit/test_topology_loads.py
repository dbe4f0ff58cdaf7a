"""`flows.Loads` against a plain statement of what it stores and answers, bit for bit.

`Loads.add` keeps the loads at skewed indices and adds integer counts directly when the weight is 1.0 (each
call adds its per-edge count x a scalar weight, or its per-edge sum of weights);
`Loads.min_ratio` divides in place over the skewed arrays. Neither may change a load or an answer: here they
are held to per-edge accumulation (`np.add.at` at plain indices, call by call) and to min over the loaded edges of
capacity / load (first index on ties), on random loads (with NaN, +inf and zero capacities) and on the loads
real collective queries route on several clusters.
"""

from __future__ import annotations

import numpy as np
import pytest

import hardware_profiles as hp
from planner.topology import flows
from planner.topology.core import Topology


def _reference_min_ratio(loads: flows.Loads, used: flows.Loads | None = None) -> tuple[float, str, int]:
    best = (np.inf, "", -1)
    for cls in loads.arr:
        load, mark = loads.load(cls), (used or loads).load(cls)
        idx = np.flatnonzero(mark)
        if len(idx) == 0:
            continue
        ratio = loads.lay.cap[cls][idx] / load[idx]
        i = int(np.argmin(ratio))
        if ratio[i] < best[0]:
            best = (float(ratio[i]), cls, int(idx[i]))
    return best


def _same(a: tuple[float, str, int], b: tuple[float, str, int]) -> bool:
    return a[1:] == b[1:] and (a[0] == b[0] or (np.isnan(a[0]) and np.isnan(b[0])))


@pytest.mark.parametrize("seed", range(8))
def test_random_loads_match_per_edge_accumulation_and_the_plain_minimum(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lay = Topology(hp.cluster("dgx-h100", gpus=4096)).layout
    lay.cap = {cls: cap.copy() for cls, cap in lay.cap.items()}  # this test's own copy, edited below
    for cap in lay.cap.values():
        if len(cap):
            special = rng.choice(len(cap), size=min(len(cap), 3), replace=False)
            cap[special] = rng.choice([0.0, np.inf, np.nan, 1e9], size=len(special))
            cap[rng.integers(len(cap) // 2, len(cap))] = 1.0  # a bottleneck past the first pad slot (skew)
    loads, used = flows.Loads(lay), flows.Loads(lay)
    expected = {cls: np.zeros(len(cap)) for cls, cap in lay.cap.items()}
    for _ in range(40):
        cls = str(rng.choice(list(lay.cap)))
        n = len(lay.cap[cls])
        if n == 0:
            continue
        idx = rng.integers(0, rng.integers(1, n + 1), size=int(rng.integers(0, 300)))
        w = rng.choice([1.0, 0.5, 1 / 3]) if rng.random() < 0.6 else rng.random(len(idx))
        loads.add(cls, idx, w)
        per_edge = np.zeros(n)  # one call's loads: its weights summed per edge, then added (scaled once if scalar)
        np.add.at(per_edge, idx, 1.0 if np.isscalar(w) else w)
        expected[cls] += per_edge * w if np.isscalar(w) else per_edge
        if rng.random() < 0.3:
            used.add(cls, idx, 1.0)
    for cls in lay.cap:
        assert np.array_equal(loads.load(cls), expected[cls])  # integer counts and x * 1.0 add exactly
    assert _same(loads.min_ratio(), _reference_min_ratio(loads))
    assert _same(loads.min_ratio(used=used), _reference_min_ratio(loads, used))


@pytest.mark.parametrize("cluster", ["dgx-h100", "dgx-a100", "gb200-nvl72"])
def test_routed_queries_answer_as_the_plain_minimum(cluster: str) -> None:
    topo = Topology(hp.cluster(cluster, gpus=1152 if cluster == "gb200-nvl72" else 1024))
    n = topo.num_gpus
    for kind in ("all_reduce", "p2p", "all_to_all"):
        for shape, axis in (((n // 64, 64), 1), ((8, n // 8), 1), ((n // 8, 8), 0), ((2, n // 16, 8), 1)):
            G = topo._mesh_block(shape, axis, None)
            loads, _ = topo._route(kind, [G])
            alone, _ = topo._route(kind, [G[:1]])
            assert _same(loads.min_ratio(), _reference_min_ratio(loads))
            assert _same(loads.min_ratio(used=alone), _reference_min_ratio(loads, alone))


@pytest.mark.parametrize("cluster", ["dgx-h100", "dgx-a100", "gb200-nvl72", "pcie-4xl40s", "hetero-a100-h100"])
def test_a_rings_receiving_ends_load_as_when_counted_apart(cluster: str, monkeypatch) -> None:
    """A ring's net hops enter each NIC, switch and GPU as often as they leave it, so `_add_net(mirrored=True)`
    takes the receiving ends' counts from the sending ends': the loads must be the ones counted apart, bit for bit."""
    sized = {"gb200-nvl72": 1152, "pcie-4xl40s": 64}
    topo = Topology(hp.cluster(cluster, gpus=sized[cluster]) if cluster in sized else hp.cluster(cluster))
    n = topo.num_gpus
    real, shared_calls = flows._add_net, []

    def apart(*args, mirrored=False, **kwargs):
        shared_calls.append(mirrored and np.isscalar(args[5]))
        return real(*args, **kwargs)

    for shape, axis in (((n // 8, 8), 0), ((n // 8, 8), 1), ((n // 16, 4, 4), 1), ((2, n // 4, 2), 1), ((n // 2, 2), 0)):
        G = np.sort(topo._mesh_block(shape, axis, None), axis=1)
        shared = flows.Loads(topo.layout)
        lat_shared = flows.ring(shared, G)
        monkeypatch.setattr(flows, "_add_net", apart)
        counted = flows.Loads(topo.layout)
        lat_counted = flows.ring(counted, G)
        monkeypatch.undo()
        assert lat_shared.tobytes() == lat_counted.tobytes()
        for cls in counted.arr:
            assert shared.load(cls).tobytes() == counted.load(cls).tobytes(), (shape, axis, cls)
    assert any(shared_calls)  # the shared path ran
