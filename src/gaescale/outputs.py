"""Writing run outputs atomically: every file goes to a temporary name in its directory, then is renamed."""
from __future__ import annotations

import hashlib
import io
import json
import os
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .errors import OutputError


def _umask() -> int:
    """This process's umask now, read at each write (it may have changed since the last): Linux's
    ``/proc/self/status`` without changing it; elsewhere set and restored at once."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def check_out_dir(path, *, flag: str = "--out", what: str = "output directory") -> Path:
    """Fail early, before any work, if ``path`` cannot be an output directory (``what``, given as ``flag``).
    Creates nothing."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise OutputError(f"{p}: the {what} is an existing file; choose another {flag}.")
    parent = next((q for q in [p, *p.parents] if q.exists()), Path("."))
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{p}: cannot create files under {parent} (no write permission).")
    return p


def refused_write(directory) -> OSError | None:
    """Write and remove a small file in ``directory``: the error of a file system that refuses files (read-only,
    ``/proc``, no permission, full), found before any work rather than at the first output; None where it took it."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".gaescale-probe.", dir=directory)
        try:
            os.write(fd, b"gaescale")
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(tmp)
    except OSError as exc:
        return exc
    return None


def probe_write(directory) -> None:
    """:func:`refused_write` as an :class:`OutputError` naming ``directory``."""
    exc = refused_write(directory)
    if exc is not None:
        raise OutputError(f"{directory}: cannot write files there ({exc.strerror or exc}).")


def atomic_write(path, write: Callable[[io.BufferedWriter], None]) -> Path:
    """Write ``path`` through ``write(fh)`` on a temporary file in the same directory, then rename it. The
    temporary name holds this process's id: one that a killed process left is removed by the next write there.
    A failed write (a full disk) leaves nothing and raises :class:`OutputError`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file the mode open() would
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{path}: could not be written ({exc.strerror or exc}).") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _remove_leftovers(path: Path) -> None:
    """Temporary files of ``path`` that a killed process left (``.NAME.PID.*.tmp``, PID gone)."""
    for p in path.parent.glob(f".{path.name}.*.tmp"):
        pid = p.name[len(path.name) + 2:].split(".")[0]
        if pid.isdigit() and not owner_alive({"pid": int(pid), "host": socket.gethostname()}):
            p.unlink(missing_ok=True)


def this_process() -> dict:
    """What a lock or a staging directory records of the process that writes it, for :func:`owner_alive`."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": process_start_time(os.getpid())}


def process_start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, Linux's /proc), to tell it from a later process given
    the same pid; None where that is not known."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def owner_alive(owner: dict) -> bool:
    """Whether the process of an ``owner`` record (:func:`this_process`) may still be running: yes when unsure (a
    record of another host, or one that cannot be read); no when its pid is gone or was given to a later process."""
    try:
        pid, host, start = int(owner["pid"]), owner["host"], owner.get("start")
    except (KeyError, TypeError, ValueError):
        return True
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process, or a pid this system cannot signal
        return True
    return start is None or process_start_time(pid) in (None, start)


def write_json(path, obj: Any) -> Path:
    return atomic_write(path, lambda fh: fh.write((json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()))


def write_npy(path, array: np.ndarray) -> Path:
    return atomic_write(path, lambda fh: np.save(fh, array, allow_pickle=False))


def write_npz(path, **arrays: np.ndarray) -> Path:
    return atomic_write(path, lambda fh: np.savez(fh, **arrays))


def write_ids(path, ids: np.ndarray) -> Path:
    """One original node id per line, in row order (row i of embeddings.npy is line i + 1)."""
    def write(fh):
        for start in range(0, len(ids), 1_000_000):
            chunk = ids[start:start + 1_000_000]
            fh.write(("\n".join(map(str, chunk)) + "\n").encode())
    return atomic_write(path, write)


def read_ids(path) -> np.ndarray:
    """``(N,)`` the ids of a file of :func:`write_ids`: int64 when every line is an integer written canonically (so
    ``007`` stays text), else str objects. Integer ids are parsed by pandas' C reader and checked by length (the
    canonical form of an integer is its shortest text), never held as N Python strings: 8 bytes per node."""
    ids = _canonical_integers(Path(path))
    if ids is not None:
        return ids
    text = Path(path).read_text()
    return np.array(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"), dtype=object)


def _canonical_integers(path: Path) -> np.ndarray | None:
    """The int64 ids of ``path`` when each line is one written as ``str(int)`` does, else None: only digits, minus
    signs and line breaks (no ``1e3``, ``+5`` or spaces, which pandas would read as integers), and no longer in all
    than the ids' canonical texts (no ``007``)."""
    import pandas as pd
    size = path.stat().st_size
    if size == 0:
        return None
    allowed = np.zeros(256, bool)
    allowed[list(b"0123456789-\n")] = True
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            if not allowed[np.frombuffer(chunk, np.uint8)].all():
                return None
    try:
        frame = pd.read_csv(path, header=None, dtype=np.int64, na_filter=False, skip_blank_lines=False,
                            quoting=3, sep="\t", engine="c")
    except (ValueError, OverflowError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return None
    if frame.shape[1] != 1:
        return None
    ids = frame.iloc[:, 0].to_numpy()
    magnitude = np.abs(ids).view(np.uint64)  # |int64 min| wraps to itself: as uint64, 2**63
    digits = np.ones(ids.size, np.int8)
    for power in range(1, 20):
        digits += magnitude >= np.uint64(10 ** power)
    chars = int(digits.sum(dtype=np.int64)) + int((ids < 0).sum()) + ids.size  # + one line break each
    return ids if size in (chars, chars - 1) else None  # the last line break may be missing


def rows_of_ids(ids: np.ndarray, wanted) -> list[int | None]:
    """The row of each of ``wanted`` in ``ids`` (as :func:`read_ids` returns them; compared as text), None where
    absent. Int64 ids are matched as numbers, without a dictionary of every id."""
    wanted = [str(v) for v in wanted]
    if ids.dtype != object:
        numbers = np.array([int(s) for s in wanted if _is_canonical_int(s)], np.int64)
        hits = np.flatnonzero(np.isin(ids, numbers))
        row_of = {str(v): int(r) for v, r in zip(ids[hits].tolist(), hits.tolist())}
    else:
        wanted_set = set(wanted)
        row_of = {str(s): r for r, s in enumerate(ids.tolist()) if str(s) in wanted_set}
    return [row_of.get(s) for s in wanted]


def _is_canonical_int(s: str) -> bool:
    try:
        return str(int(s)) == s and -2**63 <= int(s) < 2**63
    except ValueError:
        return False


def write_torch(path, obj: Any) -> str:
    """``torch.save(obj)`` to ``path`` atomically; returns the SHA-256 of the bytes written (hashed as they go)."""
    digest = hashlib.sha256()

    class Hashing:
        def __init__(self, fh):
            self.fh = fh

        def write(self, b) -> int:
            digest.update(b)
            return self.fh.write(b)

        def flush(self) -> None:
            self.fh.flush()

    atomic_write(path, lambda fh: torch.save(obj, Hashing(fh)))
    return digest.hexdigest()


def sha256_of(path, block: int = 1 << 24) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(block):
            digest.update(chunk)
    return digest.hexdigest()


MAPPED_MIN_BYTES = 1 << 30  # MappedBuffers: smaller arrays stay anonymous memory


class MappedBuffers:
    """``buffers(shape) -> Tensor``: float32 CPU tensors whose pages are a file's in ``directory``, for arrays over
    every node of a graph larger than memory (layer-wise inference, :meth:`gaescale.encoders.GCN.layerwise`): the
    kernel writes them back and drops them under pressure instead of the process holding them. Each file is unlinked
    as soon as it is mapped, so nothing is left behind, even by a killed process; its space returns when the tensor
    is freed. Arrays under ``min_bytes`` are ordinary tensors (a file's pages cost more to fault in: 4.5x the time of
    layer-wise inference at 1,000,000 nodes)."""

    def __init__(self, directory, min_bytes: int = MAPPED_MIN_BYTES):
        self.directory, self.min_bytes = Path(directory), int(min_bytes)

    def __call__(self, shape: tuple[int, ...]) -> torch.Tensor:
        count = int(np.prod(shape))
        if 4 * count < self.min_bytes:
            return torch.empty(shape)
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".layer-", suffix=".f32", dir=self.directory)
        try:
            os.ftruncate(fd, max(1, count) * 4)
            array = np.memmap(name, np.float32, "r+", shape=tuple(shape)) if count else np.empty(shape, np.float32)
        except OSError as exc:
            raise OutputError(f"{self.directory}: cannot map a {tuple(shape)} float32 array there ({exc}).") from None
        finally:
            os.close(fd)
            os.unlink(name)
        return torch.from_numpy(array)
