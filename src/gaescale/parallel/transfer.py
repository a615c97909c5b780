"""What rank 0 alone reads or makes and then sends the other ranks of a torch.distributed group: an object
(the checkpoint to resume), named arrays (an edge list's graph, METIS's parts), or a directory, to the
hosts that do not see it (the run's prepared copy of an edge list, a directory of ``gaescale prepare``).
The others wait on the group of collectives that may wait long (:func:`gaescale.parallel.runtime.from_torchrun`),
and an error in rank 0's work stops every rank instead of leaving them waiting.

Arrays and files go in messages of at most 64 MiB. A receiver pays for touching its new memory once; the
files go through one buffer on each side (bench/bench_send.py measures both against a loopback socket).
"""
from __future__ import annotations

import io
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from ..errors import DistributedError

_CHUNK = 1 << 26  # bytes per message of the arrays and files rank 0 sends


def object_from_main(rt, make: Callable[[], object], what: str):
    """What ``make()`` returns on rank 0 of the runtime ``rt`` (a :class:`~gaescale.parallel.runtime.Torchrun`; a
    picklable object: a checkpoint's state), on every rank; the others
    wait for it. An error in ``make`` stops every rank: rank 0 raises it, the others a
    :class:`DistributedError` naming ``what``."""
    box = [None]

    def run():
        box[0] = make()

    _each_once(rt, rt.is_main, run, what)
    rt.collective(dist.broadcast_object_list, box, 0, waiting=True)
    return box[0]


def arrays_from_main(rt, make: Callable[[], dict[str, np.ndarray]], what: str) -> dict[str, np.ndarray]:
    """The arrays that ``make()`` returns on rank 0 (by name: a graph's CSR, its features, METIS parts), on every
    rank, with their dtypes and shapes; the others wait for rank 0 to make them, and receive them in pieces of
    at most 64 MiB. An error in ``make`` stops every rank: rank 0 raises it, the others a
    :class:`DistributedError` naming ``what``."""
    main = rt.is_main
    arrays: dict[str, np.ndarray] = {}
    _each_once(rt, main, lambda: arrays.update(make()), what)
    listing = [[(k, a.dtype.str, a.shape) for k, a in arrays.items()] if main else None]
    rt.collective(dist.broadcast_object_list, listing, 0, waiting=True)
    out = {}
    for name, dtype, shape in listing[0]:
        a = arrays[name] if main else np.empty(shape, dtype)
        if not (a.flags.c_contiguous and a.flags.writeable):  # a map, or a view: torch wants its own buffer
            a = np.array(a, order="C")
        flat = torch.from_numpy(a.reshape(-1))
        step = max(1, _CHUNK // max(1, a.itemsize))
        for start in range(0, flat.numel(), step):
            rt.collective(dist.broadcast, flat[start:start + step], 0, waiting=True)
        out[name] = a
    return out


def once_per_filesystem(group, path: Path, make: Callable[[], None], seen: Callable[[], bool],
                        clear: Callable[[], None], what: str, *, source: Path | None = None,
                        overrides: dict[str, bytes] | None = None) -> list[int]:
    """Have rank 0 ``make`` the directory ``path`` (a path every rank names alike), and every host that does
    not then ``seen`` it (its own disk) receive a copy from rank 0: its first process (local rank 0)
    ``clear``s the path and writes the files it is sent, while the host's other processes wait. Rank 0 sends
    the files of ``source`` (default ``path``), with the contents of ``overrides`` in place of those files'.
    Returns the ranks that received a copy. An error in ``make``, ``clear`` or the writing stops every rank:
    the rank that failed raises it, the others a :class:`DistributedError` naming ``what``."""
    _each_once(group, group.is_main, make, what)
    receivers = [r for r, n in enumerate(group.gather(group.local_rank == 0 and not seen(), waiting=True)) if n]
    if receivers:
        send = lambda: _send_directory(group, source or path, receivers, overrides or {})  # noqa: E731
        _each_once(group, group.is_main or group.rank in receivers,
                   send if group.is_main else lambda: _receive_directory(group, path, clear), what)
    if not seen():
        raise DistributedError(f"rank {group.rank} does not see {what} that its host's first process (local "
                               "rank 0) received; give every process of a host the same working directory and paths.")
    return receivers


def _send_directory(rt, path: Path, receivers: list[int], overrides: dict[str, bytes]) -> None:
    """Send the files of the directory ``path`` (those named in ``overrides`` with its contents) to
    ``receivers`` (see :func:`_receive_directory`)."""
    names = sorted(p.name for p in path.iterdir() if p.is_file())
    listing = [(n, len(overrides[n]) if n in overrides else (path / n).stat().st_size) for n in names]
    for r in receivers:
        rt.collective(dist.send_object_list, [listing], r, waiting=True)
    buf = _buffer(listing)  # one buffer, read into and sent from: no copy, and its pages touched once
    view = memoryview(buf.numpy())
    for name, size in listing:
        with io.BytesIO(overrides[name]) if name in overrides else open(path / name, "rb") as fh:
            while size:
                n, got = min(_CHUNK, size), 0
                while got < n:
                    read = fh.readinto(view[got:n])
                    if not read:
                        raise DistributedError(f"{path / name} got shorter while rank 0 sent it; run again.")
                    got += read
                for r in receivers:
                    rt.collective(dist.send, buf[:n], r, waiting=True)
                size -= n


def _buffer(listing: list[tuple[str, int]]) -> torch.Tensor:
    """The one buffer through which the files of ``listing`` (names and sizes) are sent or received."""
    return torch.empty(min(_CHUNK, max((size for _, size in listing), default=0)), dtype=torch.uint8)


def _receive_directory(rt, path: Path, clear: Callable[[], None]) -> None:
    """Receive rank 0's directory into ``path`` (written beside it, then renamed). After an error, the rest is
    still received, so that rank 0 is not left sending, and then the error is raised."""
    listing: list = [None]
    rt.collective(dist.recv_object_list, listing, 0, waiting=True)
    error, work = None, None
    try:
        clear()
        path.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent))
    except Exception as exc:
        error = exc
    buf = _buffer(listing[0])
    view = memoryview(buf.numpy())
    for name, size in listing[0]:
        fh = None
        try:
            fh = open(work / name, "wb") if error is None else None
        except OSError as exc:
            error = exc
        while size:
            n = min(_CHUNK, size)
            rt.collective(dist.recv, buf[:n], 0, waiting=True)
            size -= n
            try:
                if fh is not None and error is None:
                    fh.write(view[:n])
            except OSError as exc:
                error = exc
        try:
            if fh is not None:
                fh.close()
        except OSError as exc:
            error = error or exc
    if error is None:
        try:
            os.replace(work, path)
        except OSError as exc:
            error = exc
    if error is not None:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
        raise error


def _each_once(rt, mine: bool, make: Callable[[], None], what: str) -> None:
    """Run ``make`` on the ranks where ``mine``, the others waiting; if it failed on one, every rank stops:
    that rank raises its error, the others a :class:`DistributedError` naming it and ``what``."""
    error = None
    if mine:
        try:
            make()
        except Exception as exc:  # raised below, once the others know to stop
            error = exc
    failed = rt.gather(error is not None, waiting=True)
    if error is not None:
        raise error
    if any(failed):
        raise DistributedError(f"rank {failed.index(True)} failed to make {what} (its error says more).")
