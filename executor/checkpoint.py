"""Checkpoints with `torch.distributed.checkpoint` (DCP): atomic, and resumable on a different mesh.

Layout on disk (`--checkpoint-dir D`):
  D/step-00000010/         one complete checkpoint: DCP shards + `.metadata`, and `meshplan.json` (written last)
  D/.tmp-step-00000020/    a save in progress; ignored by `--resume`
A save writes into the temporary folder, every rank waits at a barrier, the ranks hash the files
(executor.checkpoint_manifest), then rank 0 writes `meshplan.json` (step, plan, layout, and the size and
SHA-256 of every file) and renames the folder into place. An interrupted save leaves only a `.tmp-` folder,
never replaces the last good checkpoint, and `latest_checkpoint` only considers folders that have
`meshplan.json`. A resume first checks the folder against the marker's list: a missing, truncated or
altered file is a one-line error naming the folder and the file (exit 2), never garbage or a hang.

What is saved (keys are layout-independent FQNs, so DCP reshards on load):
  model     `get_model_state_dict` of every local chunk, merged (each FQN lives on exactly one pp rank)
  optim     `get_optimizer_state_dict(..., flatten_optimizer_state_dict=True)`: keyed by parameter FQN
  trainer   step (the data position too: data of step k is fixed) and the RNG states (identical on every
            rank: all are seeded alike and nothing draws rank-dependent randomness)
Optimizer hyperparameters (lr, betas, weight decay) are part of the optimizer state, so a resumed run keeps
the checkpoint's, not the command line's. Resume builds the state dict of the *current* layout (new shard
shapes) and lets DCP fill it: dp=2,tp=2 -> dp=4, pp=2 -> pp=1 and so on. A tied model split over stages keeps two equal copies of the embedding
(executor.step.sync_tied_embeddings); resuming one saved without stages fills the head copy from the table.

Note: DCP's own `.metadata` file is a Python pickle (PyTorch's format, not ours); only load checkpoints
you trust. Everything meshplan writes beside it is JSON.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from executor import checkpoint_manifest as manifest
from executor import faults
from executor.parallelize import ParallelModel
from planner.errors import UserError

_STEP_DIR = re.compile(r"^step-(\d{8})$")
MARKER = manifest.MARKER
_OPTS = StateDictOptions(flatten_optimizer_state_dict=True)


def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def latest_checkpoint(root: Path) -> tuple[int, Path] | None:
    """Highest complete checkpoint (has the marker) under `root`, or None."""
    if not root.is_dir():
        return None
    found = []
    for child in root.iterdir():
        m = _STEP_DIR.match(child.name)
        if m and (child / MARKER).is_file():
            found.append((int(m.group(1)), child))
    return max(found) if found else None


def resume_source(path: Path) -> Path:
    """The checkpoint `--resume PATH` means: PATH itself when it is one (has the marker), else the latest
    complete checkpoint under PATH (a `--checkpoint-dir` root, written by any mesh)."""
    if (path / MARKER).is_file():
        return path
    found = latest_checkpoint(path)
    if found is None:
        what = "no such folder" if not path.exists() else f"no complete checkpoint (step-NNNNNNNN/{MARKER}) in it"
        raise UserError(what, where=str(path), fix="pass a --checkpoint-dir folder or one of its step-* folders")
    return found[1]


def _rng_state() -> dict[str, torch.Tensor]:
    state = {"cpu_rng": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda_rng"] = torch.cuda.get_rng_state()
    return state


def _state(model: ParallelModel, optimizers: list[torch.optim.Optimizer], step: int) -> dict:
    model_sd: dict = {}
    optim_sd: dict = {}
    for part, opt in zip(model.parts, optimizers, strict=True):
        model_sd.update(get_model_state_dict(part))
        optim_sd.update(get_optimizer_state_dict(part, opt, options=_OPTS))
    trainer = {"step": torch.tensor(step, dtype=torch.int64), **_rng_state()}
    return {"model": model_sd, "optim": optim_sd, "trainer": trainer}


def save(root: Path, model: ParallelModel, optimizers: list[torch.optim.Optimizer], step: int, info: dict) -> Path:
    """Write the checkpoint of `step` atomically (collective: every rank calls it)."""
    final = step_dir(root, step)
    tmp = root / f".tmp-{final.name}"
    rank = dist.get_rank()
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)  # leftovers of an interrupted save of the same step
        tmp.mkdir(parents=True)
    dist.barrier()
    # storage_writer: None (DCP's own file writer) unless MESHPLAN_FAULT kills this rank inside this save.
    dcp.save(_state(model, optimizers, step), checkpoint_id=tmp, storage_writer=faults.storage_writer(tmp, step))
    dist.barrier()
    files = manifest.compute(tmp)  # collective: every rank hashes a share
    if rank == 0:
        marker = {"step": step, "saved_at_unix_s": time.time(), **info, "files": files}
        with open(tmp / MARKER, "w", encoding="utf-8") as fh:
            json.dump(marker, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        if final.exists():  # re-saving a step (after a resume from an older one): swap, then drop the old
            old = root / f".old-{final.name}"
            shutil.rmtree(old, ignore_errors=True)
            final.rename(old)
            tmp.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(final)
    dist.barrier()
    return final


def _borrow_tied_head(state: dict, saved: Any) -> list[tuple[str, str, str]]:
    """Tied model saved with one pipeline stage, resumed with several: the last stage's LM-head copy
    (`output.weight`, its optimizer state) is absent from the checkpoint and is read from the token
    embedding's entries, which it equals. Returns (section, borrowed key, own key) to rename back."""
    renamed = []
    for section in ("model", "optim"):
        for key in list(state[section]):
            if "output.weight" not in key or f"{section}.{key}" in saved:
                continue
            borrowed = key.replace("output.weight", "tok_embeddings.weight")
            if f"{section}.{borrowed}" in saved and borrowed not in state[section]:
                state[section][borrowed] = state[section].pop(key)
                renamed.append((section, borrowed, key))
    return renamed


def load(path: Path, model: ParallelModel, optimizers: list[torch.optim.Optimizer]) -> int:
    """Fill model, optimizer and RNG from checkpoint `path` (any mesh) and return its step (collective).

    The folder is checked against its marker's file list first (UserError naming the damaged file)."""
    if not manifest.verify(path, manifest.read_marker(path)) and dist.get_rank() == 0:
        print(f"note: {path} was written without file checksums; not verified", file=sys.stderr, flush=True)
    state = _state(model, optimizers, 0)
    saved = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
    # RNG states of a device the saving run did not have (CPU run resumed on GPU) are left as they are.
    state["trainer"] = {k: v for k, v in state["trainer"].items() if f"trainer.{k}" in saved}
    renamed = _borrow_tied_head(state, saved)
    dcp.load(state, checkpoint_id=path)
    for section, borrowed, key in renamed:
        state[section][key] = state[section].pop(borrowed)
    for part, opt in zip(model.parts, optimizers, strict=True):
        set_model_state_dict(part, state["model"], options=StateDictOptions(strict=False))
        set_optimizer_state_dict(part, opt, optim_state_dict=state["optim"], options=_OPTS)
    trainer = state["trainer"]
    if "cpu_rng" in trainer:
        torch.set_rng_state(trainer["cpu_rng"])
    if "cuda_rng" in trainer and torch.cuda.is_available():
        torch.cuda.set_rng_state(trainer["cuda_rng"])
    return int(trainer["step"])
