"""Checkpoints: everything needed to continue a run exactly where it stopped.

A checkpoint holds the model, the optimizer, every random generator state (Python, NumPy, torch's
global one and the trainer's sampling generator), the epoch, the training history and early-stopping
state, a hash of the configuration and a fingerprint of the graph. Files are
``OUT/checkpoints/epoch-000010.pt``, written atomically (temporary file, then rename); the last two
are kept. Loading uses ``torch.load(..., weights_only=True)``: plain tensors, numbers and strings only.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import tagged
from ..errors import CheckpointError
from ..outputs import atomic_write, sha256_of, write_torch

# Fields that change neither the data nor the trajectory of training (the device: float rounding only): a run
# may resume with other values (the fields marked resumable in gaescale.config).
RESUMABLE_CHANGES = tagged("resumable")
_NAME = re.compile(r"^epoch-(\d+)\.pt$")


def hashed_config(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a config (``TrainConfig.to_dict()``) a checkpoint must agree with."""
    return {k: v for k, v in sorted(config.items()) if k not in RESUMABLE_CHANGES}


def config_hash(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(hashed_config(config), sort_keys=True).encode()).hexdigest()[:16]


def rng_state(generator: torch.Generator) -> dict[str, Any]:
    """Every random state training reads, as tensors and numbers (loadable with ``weights_only=True``)."""
    version, internal, gauss = random.getstate()
    _, keys, pos, has_gauss, cached = np.random.get_state()
    return {"python": {"version": version, "state": torch.tensor(internal, dtype=torch.int64), "gauss": gauss},
            "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos), "has_gauss": int(has_gauss),
                      "cached": float(cached)},
            "torch": torch.get_rng_state(), "generator": generator.get_state(),
            **({"cuda": torch.cuda.get_rng_state_all()} if torch.cuda.is_initialized() else {})}


def set_rng_state(state: dict[str, Any], generator: torch.Generator) -> None:
    py = state["python"]
    random.setstate((py["version"], tuple(int(v) for v in py["state"].tolist()), py["gauss"]))
    nps = state["numpy"]
    np.random.set_state(("MT19937", nps["keys"].numpy().astype(np.uint32), nps["pos"], nps["has_gauss"], nps["cached"]))
    torch.set_rng_state(state["torch"])
    generator.set_state(state["generator"])
    if state.get("cuda") and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])  # VGAE noise and dropout on the GPU


def list_checkpoints(directory) -> list[tuple[int, Path]]:
    """``(epoch, path)`` of the checkpoints in ``directory``, oldest first."""
    d = Path(directory)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := _NAME.match(p.name))]
    return sorted(found)


class Checkpointer:
    """Writes a checkpoint every ``every`` epochs into ``directory`` and keeps the last ``keep``, each with its
    SHA-256 beside it (``epoch-000010.pt.sha256``). ``also``: more directories that :meth:`load_latest` searches
    (a finished run's checkpoints, which a resumed run replaces).

    With ``fresh``, checkpoints of an earlier run in the same directory are removed on the first save.
    """

    def __init__(self, directory, every: int, config: dict[str, Any], data_hash: str, *, keep: int = 2,
                 fresh: bool = True, also=()):
        self.directory, self.every, self.keep, self.fresh = Path(directory), int(every), keep, fresh
        self.also = [Path(d) for d in also]
        self.meta = {"config_hash": config_hash(config), "config": hashed_config(config), "data_hash": data_hash}
        existing = list_checkpoints(self.directory)
        self.last: Path | None = None if fresh or not existing else existing[-1][1]

    def due(self, epoch: int) -> bool:
        return self.every > 0 and epoch % self.every == 0

    def save(self, epoch: int, state: dict[str, Any]) -> Path:
        path = self.directory / f"epoch-{epoch:06d}.pt"
        digest = write_torch(path, {**state, **self.meta, "epoch": epoch})
        atomic_write(_sidecar(path), lambda fh: fh.write(f"{digest}  {path.name}\n".encode()))
        found = list_checkpoints(self.directory)
        if self.fresh:  # files of an earlier run in this directory: not ours to keep or resume from
            stale, self.fresh = [p for _, p in found if p != path], False
        else:
            stale = [p for _, p in found[:-self.keep]]
        for p in stale:
            p.unlink(missing_ok=True)
            _sidecar(p).unlink(missing_ok=True)
        self.last = path
        return path

    def load_latest(self, log=None) -> dict[str, Any]:
        """The newest readable checkpoint, checked against this run's configuration and graph. An unreadable one
        (empty, truncated, not the bytes its checksum names) is reported through ``log`` and the one before it
        used; only when none is usable is this an error, naming each."""
        found = sorted({p.name: (e, p) for d in [*reversed(self.also), self.directory]
                        for e, p in list_checkpoints(d)}.values())  # a name in ``directory`` wins over ``also``'s
        named = (self.also or [self.directory])[-1]
        if not found:
            raise CheckpointError(f"{named}: no checkpoint to resume from; run without --resume "
                                  "to start afresh.")
        failed = []
        for _, path in reversed(found):
            try:
                state = self.load(path)
            except UnreadableCheckpoint as exc:
                failed.append(str(exc))
                if log is not None:
                    log(f"{exc}: trying the checkpoint before it")
                continue
            if path.parent != self.directory:  # the run's checkpoints start from the one it resumed
                self.last = _adopt(path, self.directory)
            return state
        raise CheckpointError(f"no readable checkpoint to resume from: {'; '.join(failed)}; run without --resume "
                              "(or with --overwrite) to start afresh.")

    def load(self, path) -> dict[str, Any]:
        path = Path(path)
        check_sum(path)
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises many types for truncated or foreign files
            reason = (str(exc).splitlines() or [""])[0][:200]
            raise UnreadableCheckpoint(f"{path}: not a readable gaescale checkpoint ({type(exc).__name__}: "
                                       f"{reason})") from None
        if not isinstance(state, dict) or "config_hash" not in state or "epoch" not in state:
            raise CheckpointError(f"{path}: not a gaescale checkpoint (no config hash or epoch).")
        if state["config_hash"] != self.meta["config_hash"]:
            old, new = state.get("config", {}), self.meta["config"]
            changed = [f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new))
                       if old.get(k) != new.get(k)]
            raise CheckpointError(f"{path}: the checkpoint was written with a different configuration "
                                  f"(changed: {', '.join(changed) or 'unknown'}); resume with the same settings, "
                                  "or train without --resume into another --out.")
        if state["data_hash"] != self.meta["data_hash"]:
            raise CheckpointError(f"{path}: the checkpoint was trained on a different graph or features; resume "
                                  "with the same input files, or train without --resume into another --out.")
        self.last = path
        return state


class UnreadableCheckpoint(CheckpointError):
    """A checkpoint file that cannot be read (empty, truncated, damaged): ``--resume`` falls back to the one before."""


def _adopt(path: Path, directory: Path) -> Path:
    """``path`` (and its checksum) in ``directory`` too: a hard link where the file system allows, else a copy."""
    import shutil
    directory.mkdir(parents=True, exist_ok=True)
    for src in (path, _sidecar(path)):
        if src.is_file() and not (directory / src.name).exists():
            try:
                os.link(src, directory / src.name)
            except OSError:
                shutil.copy2(src, directory / src.name)
    return directory / path.name


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def check_sum(path: Path) -> None:
    """Refuse a checkpoint whose bytes are not those its ``.sha256`` names (a checkpoint without one, of an earlier
    version or of a run killed between the two writes, is taken as it is)."""
    side = _sidecar(path)
    if not side.is_file():
        return
    expected = side.read_text().split()[:1]
    if expected and sha256_of(path) != expected[0]:
        raise UnreadableCheckpoint(f"{path}: its bytes do not match its checksum ({side.name}): the file was damaged")
