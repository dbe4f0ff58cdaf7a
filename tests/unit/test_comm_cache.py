"""The collective-coefficient caches: per topology in a process, and on disk per cluster (comm_cache).

A coefficient read back from disk must be bit-identical to a computed one, and the topology must not be
asked again; a file that is corrupt, belongs to another cluster or to other code is ignored and replaced;
MESHPLAN_CACHE_DIR=off writes nothing.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import hardware_profiles as hp
from planner.cost import comm_cache
from planner.cost.comm import AxisBandwidth
from planner.topology import Topology

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "p2p", "all_to_all")


def _columns(topology: Topology) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Coefficients of TP-like, DP-like and idle-GPU group patterns on a 96-GPU cluster."""
    size = np.array([1, 2, 3, 8, 4, 12, 2, 6])
    stride = np.array([1, 1, 1, 1, 8, 1, 32, 4])
    world = np.array([96, 96, 90, 96, 64, 72, 64, 72])
    bw = AxisBandwidth(topology)
    return {kind: bw.columns(kind, size, stride, world) for kind in KINDS}


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(comm_cache.ENV, str(tmp_path))
    comm_cache.flush()  # nothing of earlier tests may land in this folder
    return tmp_path


def _files(folder):
    return sorted((folder / "collectives").glob("*.json"))


def test_in_process_cache_is_shared_by_every_axis_bandwidth(cache_dir) -> None:
    topo = Topology(hp.cluster("dgx-h100", gpus=96))
    first = _columns(topo)
    calls = []
    original = topo.axis_collective
    topo.axis_collective = lambda *a, **k: calls.append(a) or original(*a, **k)
    again = _columns(topo)  # a new AxisBandwidth over the same topology object
    assert calls == []
    for kind in KINDS:
        assert np.array_equal(first[kind][0], again[kind][0]) and np.array_equal(first[kind][1], again[kind][1])


def test_disk_cache_round_trip_is_bit_identical_and_asks_nothing(cache_dir) -> None:
    cluster = hp.cluster("dgx-h100", gpus=96)
    computed = _columns(Topology(cluster))
    comm_cache.flush()
    (path,) = _files(cache_dir)
    assert path.stem == cluster.fingerprint()
    doc = json.loads(path.read_text())  # plain JSON
    assert doc["format"] == 1 and doc["fingerprint"] == cluster.fingerprint()

    fresh = Topology(cluster)
    fresh.axis_collective = lambda *a, **k: pytest.fail("the disk cache should have answered")
    loaded = _columns(fresh)
    for kind in KINDS:
        for x, y in zip(computed[kind], loaded[kind]):
            assert [float(v).hex() for v in x] == [float(v).hex() for v in y]


@pytest.mark.parametrize("content", [
    b"\x00\xffnot json",
    b'{"format": 1}',
    b'{"format": 2, "code": "x", "fingerprint": "y", "columns": {}}',
    b"[1, 2, 3]",
])
def test_a_corrupt_file_is_ignored_and_replaced(cache_dir, content: bytes) -> None:
    cluster = hp.cluster("dgx-h100", gpus=96)
    path = cache_dir / "collectives" / f"{cluster.fingerprint()}.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    expected = _columns(Topology(hp.cluster("dgx-h100", gpus=96)))  # computed, not read
    comm_cache.flush()
    doc = comm_cache.CacheFile.model_validate_json(path.read_bytes())  # replaced by a valid file
    assert doc.fingerprint == cluster.fingerprint() and doc.columns["all_reduce"]
    got = _columns(Topology(cluster))
    for kind in KINDS:
        assert np.array_equal(expected[kind][0], got[kind][0])


def _tampered(cluster, path, **change) -> None:
    doc = json.loads(path.read_text())
    doc.update(change)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("change", [
    {"code": "0" * 32},  # written by other code
    {"fingerprint": "f" * 64},  # another cluster's rows under this name
    {"columns": {"all_reduce": [[2, 1, 96, -1e-6, 5.0]]}},  # a negative time
    {"columns": {"p2p": [[2, 1, 96, 1.0, 1.0], [2, 1, 96, 1.0, 2.0]]}},  # one group pattern twice
    {"columns": {"all_reduce": [[8, 16, 96, 1.0, 1.0]]}},  # a group pattern larger than its world
])
def test_a_file_of_other_code_or_another_cluster_is_ignored(cache_dir, change) -> None:
    cluster = hp.cluster("dgx-h100", gpus=96)
    expected = _columns(Topology(cluster))
    comm_cache.flush()
    (path,) = _files(cache_dir)
    _tampered(cluster, path, **change)
    # Rows that AxisBandwidth never writes make the whole file suspect: it is ignored.
    got = _columns(Topology(cluster))
    for kind in KINDS:
        assert np.array_equal(expected[kind][0], got[kind][0]) and np.array_equal(expected[kind][1], got[kind][1])


def test_off_writes_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(comm_cache.ENV, "off")
    comm_cache.flush()
    _columns(Topology(hp.cluster("dgx-h100", gpus=96)))
    comm_cache.flush()
    assert comm_cache.cache_dir() is None
    assert not list(tmp_path.iterdir())


def test_writes_merge_with_what_another_process_wrote(cache_dir) -> None:
    cluster = hp.cluster("dgx-h100", gpus=96)
    AxisBandwidth(Topology(cluster)).columns("all_reduce", np.array([8]), np.array([1]), np.array([96]))
    comm_cache.flush()
    AxisBandwidth(Topology(cluster)).columns("p2p", np.array([4]), np.array([8]), np.array([96]))
    comm_cache.flush()
    (path,) = _files(cache_dir)
    doc = comm_cache.CacheFile.model_validate_json(path.read_bytes())
    assert set(doc.columns) == {"all_reduce", "p2p"}


def test_default_folder_follows_xdg(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(comm_cache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert comm_cache.cache_dir() == tmp_path / "meshplan"
