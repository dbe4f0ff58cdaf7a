"""Checkpoint integrity (executor.checkpoint_manifest) on one process: what the marker records, and every way
a folder can be damaged detected with one line naming the folder, the file and the fault."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from executor import checkpoint_manifest as manifest
from executor.checkpoint import resume_source
from planner.errors import UserError

ABC_SHA256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
"""SHA-256 of b"abc" (FIPS 180-2, appendix B.1)."""


def _folder(tmp_path: Path) -> tuple[Path, dict]:
    folder = tmp_path / "ck" / "step-00000004"
    folder.mkdir(parents=True)
    (folder / "__0_0.distcp").write_bytes(b"abc")
    (folder / "__1_0.distcp").write_bytes(bytes(range(256)) * 8)
    (folder / ".metadata").write_bytes(b"meta")
    files = manifest.compute(folder)
    marker = {"step": 4, "files": files}
    (folder / manifest.MARKER).write_text(json.dumps(marker))
    return folder, marker


def test_compute_records_size_and_sha256_of_every_file_but_the_marker(tmp_path) -> None:
    folder, marker = _folder(tmp_path)
    assert sorted(marker["files"]) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert marker["files"]["__0_0.distcp"] == {"bytes": 3, "sha256": ABC_SHA256}
    assert marker["files"]["__1_0.distcp"]["bytes"] == 2048
    assert manifest.verify(folder, manifest.read_marker(folder)) is True


def _error(folder: Path) -> str:
    with pytest.raises(UserError) as info:
        manifest.verify(folder, manifest.read_marker(folder))
    msg = str(info.value)
    assert msg.startswith(f"{folder}: checkpoint is damaged: ") and "\n" not in msg and "fix: " in msg, msg
    return msg


def test_truncated_shard(tmp_path) -> None:
    folder, _ = _folder(tmp_path)
    with open(folder / "__1_0.distcp", "r+b") as fh:
        fh.truncate(1000)
    assert "__1_0.distcp has 1000 bytes, the marker recorded 2048" in _error(folder)


def test_deleted_shard_and_metadata(tmp_path) -> None:
    folder, _ = _folder(tmp_path)
    (folder / ".metadata").unlink()
    assert ".metadata is missing" in _error(folder)
    (folder / "__0_0.distcp").unlink()
    assert ".metadata is missing (and 1 more damaged file)" in _error(folder)


def test_altered_byte_of_same_size(tmp_path) -> None:
    folder, _ = _folder(tmp_path)
    (folder / "__0_0.distcp").write_bytes(b"abd")
    assert "__0_0.distcp has the recorded size but a different SHA-256" in _error(folder)


def test_marker_damage(tmp_path) -> None:
    folder, marker = _folder(tmp_path)
    (folder / manifest.MARKER).write_text('{"step": 4, "files": {')
    with pytest.raises(UserError, match="completion marker meshplan.json is unreadable"):
        manifest.read_marker(folder)
    (folder / manifest.MARKER).write_text(json.dumps({"step": 4, "files": {"__0_0.distcp": {"bytes": "3"}}}))
    with pytest.raises(UserError, match='"files" entry of meshplan.json is malformed'):
        manifest.verify(folder, manifest.read_marker(folder))
    # A checkpoint written before markers listed files: not verified, not refused.
    assert manifest.verify(folder, {"step": 4}) is False


def test_hashing_is_shared_between_ranks(tmp_path) -> None:
    """Rank r hashes files r, r + world, ...: with 2 ranks, rank 0 checks only file 0 and rank 1 file 1
    (the all-reduce in `verify` combines them); sizes and presence are checked by every rank."""
    folder, marker = _folder(tmp_path)
    (folder / "__0_0.distcp").write_bytes(b"abd")  # sorted: .metadata, __0_0.distcp, __1_0.distcp
    files = marker["files"]
    by_rank = [manifest.verdicts(folder, files, rank, 2) for rank in (0, 1)]
    assert [v for _, v, _ in by_rank[0]] == [0, 0, 0]
    assert [v for _, v, _ in by_rank[1]] == [0, manifest.DIGEST, 0]


def test_resume_source(tmp_path) -> None:
    folder, _ = _folder(tmp_path)
    assert resume_source(folder) == folder  # one checkpoint
    assert resume_source(folder.parent) == folder  # a root: its latest complete one
    with pytest.raises(UserError, match="no such folder"):
        resume_source(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no complete checkpoint"):
        resume_source(tmp_path / "empty")
