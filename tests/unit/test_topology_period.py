"""`symmetry.period`'s checks against their plain statement, on the shipped clusters and on broken copies.

`_is_period` is written for speed (cheap checks first, edge-level comparisons of capacities and latencies, a
scatter for "one window per edge"). The reference here states each fact per GPU, the slow way: every
candidate P of every cluster, and layouts with one capacity, latency or ownership changed, must get the same
answer from both.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

import hardware_profiles as hp
from planner.topology.layout import build_layout
from planner.topology.symmetry import _is_period, _owners, period
from tests.unit.test_topology_symmetry import CLUSTERS as SYMMETRY_CLUSTERS

CLUSTERS = {**SYMMETRY_CLUSTERS, "hetero-a100-h100": {}}  # and one that is not periodic (two node types)


def _reference(lay, P: int) -> bool:
    """The period's definition, per GPU (module docstring of planner.topology.symmetry)."""
    N = lay.num_gpus
    if P >= N:
        return False
    window = np.arange(N) // P

    def shift_constant(f: np.ndarray) -> bool:
        a, b = f[:-P], f[P:]
        if not np.array_equal(a < 0, b < 0):
            return False
        d = (b - a)[a >= 0]
        return len(d) == 0 or (d[0] > 0 and len(set(d.tolist())) == 1)

    if not all(shift_constant(a) for a in (lay.host, lay.unit, lay.dom, lay.sw, lay.nic)):
        return False
    if not np.array_equal(lay.local[:-P], lay.local[P:]):
        return False
    for cls, maps in _owners(lay).items():
        for f in maps:
            if not shift_constant(f):
                return False
            windows: dict[int, set[int]] = {}
            for e, w in zip(f.tolist(), window.tolist()):
                if e >= 0:
                    windows.setdefault(e, set()).add(w)
            if any(len(ws) > 1 for ws in windows.values()):
                return False
            for g in range(N - P):
                if f[g] < 0:
                    continue
                for d in ("up", "down"):
                    for table in (lay.cap, lay.lat):
                        x, y = table[f"{cls}_{d}"][f[g]], table[f"{cls}_{d}"][f[g + P]]
                        if not (x == y or (np.isnan(x) and np.isnan(y))):
                            return False
    return True


def _candidates(lay) -> list[int]:
    gpn = lay.gpus_per_node
    return sorted({gpn * k for k in (1, 2, 4, 8, 9, 16, 18, 32, 36, 72, 140)} | {math.lcm(18, 32) * 4})


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_fast_checks_equal_the_definition(name: str) -> None:
    lay = build_layout(hp.cluster(name, **CLUSTERS[name]))
    owners = _owners(lay)
    answers = {P: _is_period(lay, owners, P) for P in _candidates(lay)}
    assert answers == {P: _reference(lay, P) for P in _candidates(lay)}
    if name != "hetero-a100-h100":
        assert any(answers.values())  # the shipped homogeneous clusters are periodic


@pytest.mark.parametrize("what", ["cap", "lat", "nan", "owner"])
def test_a_broken_copy_is_refused_by_both(what: str) -> None:
    """One edge changed in the second P-window: the fast checks refuse P exactly where the definition does."""
    base = build_layout(hp.cluster("dgx-h100-oversub", nodes=64))
    P = period(base, 1, [8, 8, 1]) or 32
    lay = copy.deepcopy(base)
    if what in ("cap", "lat", "nan"):
        table = lay.cap if what == "cap" else lay.lat
        edge = int(lay.nic[P + 3])
        table["nic_up"][edge] = np.nan if what == "nan" else table["nic_up"][edge] * 2
    else:
        lay.nic_sw = lay.nic_sw.copy()
        lay.nic_sw[int(lay.nic[P + 3])] = int(lay.nic_sw[int(lay.nic[3])])  # an edge shared by two windows
    owners = _owners(lay)
    for Q in _candidates(lay):
        assert _is_period(lay, owners, Q) == _reference(lay, Q), Q
    assert not _is_period(lay, owners, P)
