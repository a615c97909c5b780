"""A run directory as a unit: one process writes it at a time, and a killed or failed run leaves the old complete
run or the new complete one, never a mix.

:meth:`RunWriter.open` checks ``OUT`` before any work (a probe write; another run there is refused unless
``--overwrite`` or ``--resume``; no input of the run inside what it writes), takes ``OUT/.lock`` (a lock of a dead
process on this host is taken over) and gives the run ``OUT/.staging/``, where everything it writes goes: its
checkpoints while it trains, then its outputs. :meth:`RunWriter.commit` writes ``manifest.json`` (each file's size)
into the staging directory, renames that directory to ``OUT/.commit`` (one atomic rename: from here on the new run
wins) and moves its files into ``OUT``; :func:`finish_commit` completes a commit that a kill interrupted, and every
reader (:meth:`gaescale.run.rundir.RunDir.open`) and writer calls it first. A killed run's ``.staging`` keeps its
checkpoints for ``--resume``.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from .._version import __version__
from ..errors import OutputError
from ..outputs import check_out_dir, owner_alive, probe_write, this_process, write_json

STAGING, COMMIT, LOCK, MANIFEST = ".staging", ".commit", ".lock", "manifest.json"
# What a run of an earlier version (no manifest.json) wrote: the names a commit replaces there. Not OUT/prepared:
# under torchrun the run's own prepared copy of its edge list is a cache of the input kept there, outside the unit
# (every host's ranks find it at that path; gaescale/parallel/reading.py), replaced only when the input changes.
LEGACY = ("embeddings.npy", "node_bias.npy", "nodes.tsv", "graph.npz", "graph.json", "heldout.npz", "metrics.json",
          "config.json", "model.pt", "checkpoints", "report", "split")
KEPT_ON_RESUME = ("checkpoints",)  # what an interrupted run's staging keeps for --resume


class RunWriter:
    """This process's hold on the run directory ``out``: its lock and its staging directory (``staging``), where
    the run writes everything until :meth:`commit`. Made by :meth:`open`; :meth:`close` lets go."""

    def __init__(self, out: Path, created: list[Path]):
        self.out, self.staging, self._created = out, out / STAGING, created

    @classmethod
    def open(cls, out, *, overwrite: bool = False, resume: bool = False, inputs=(), log=None) -> RunWriter:
        """Check ``out`` and take it, before any work (see the module's docstring). ``inputs``: the run's input
        paths, none of which may lie where the run writes. Raises :class:`OutputError` naming what to do."""
        log = log or (lambda m: None)
        out = check_out_dir(out)
        created = [p for p in [out, *out.parents] if not p.exists()]
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"{out}: cannot create the output directory ({exc.strerror or exc}).") from None
        probe_write(out)
        writer = cls(out, created)
        try:
            writer._lock(log)
            finish_commit(out)
            writer._refuse(overwrite=overwrite, resume=resume, inputs=inputs)
            writer._prepare_staging(resume, log)
        except BaseException:
            writer.close()
            raise
        return writer

    def _lock(self, log) -> None:
        lock = self.out / LOCK
        me = {**this_process(), "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
        for _ in range(2):
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = _read_json(lock)
                # an unreadable lock, or one without a pid, is taken over as one of a process that is gone
                if holder is not None and str(holder.get("pid", "")).isdigit() and owner_alive(holder):
                    raise OutputError(f"{self.out}: another gaescale process (pid {holder.get('pid')} on "
                                      f"{holder.get('host')}, since {holder.get('started')}) is writing this run; "
                                      "wait for it, or choose another --out.") from None
                log(f"{lock}: taking over the lock of a process that is gone "
                    f"(pid {(holder or {}).get('pid', '?')})")
                lock.unlink(missing_ok=True)
                continue
            self._locked = True
            try:
                with os.fdopen(fd, "w") as fh:
                    json.dump(me, fh)
            except OSError as exc:  # a full disk: the probe had room for a few bytes, not this
                raise OutputError(f"{lock}: could not be written ({exc.strerror or exc}).") from None
            return
        raise OutputError(f"{lock}: could not take the lock of the run directory; remove it if no gaescale process "
                          "is writing there.")

    def _refuse(self, *, overwrite: bool, resume: bool, inputs) -> None:
        out = self.out.resolve()
        written = set(_manifest_names(self.out)) | set(LEGACY) | {MANIFEST, STAGING, COMMIT}
        for p in inputs:
            p = Path(p).resolve()
            if p == out or out in p.parents and p.relative_to(out).parts[0] in written:
                raise OutputError(f"{p}: is an input of this run and lies where it writes ({self.out}); choose "
                                  "another --out.")
        if overwrite or resume:
            return
        if is_finished(self.out):
            raise OutputError(f"{self.out}: holds a finished run; pass --overwrite to replace it (it stays whole until "
                              "the new run is complete), --resume to continue it, or choose another --out.")
        epoch = unfinished_epoch(self.out)
        if epoch is not None:
            raise OutputError(f"{self.out}: holds the checkpoints of an unfinished run (epoch {epoch}); pass --resume "
                              "to continue it, --overwrite to start afresh, or choose another --out.")
        foreign = sorted(n for n in LEGACY if (self.out / n).exists())
        if foreign:
            raise OutputError(f"{self.out / foreign[0]}: exists and is not part of a gaescale run; the run would "
                              "replace it: pass --overwrite, or choose another --out.")

    def _prepare_staging(self, resume: bool, log) -> None:
        """An empty staging directory, or with ``resume`` one that keeps an interrupted run's checkpoints and
        nothing else."""
        if self.staging.exists():
            keep = KEPT_ON_RESUME if resume else ()
            gone = [p for p in self.staging.iterdir() if p.name not in keep]
            for p in gone:
                _remove(p)
            if not resume and gone:
                log(f"{self.staging}: removed the files of an interrupted run")
        self.staging.mkdir(exist_ok=True)

    @property
    def checkpoint_dirs(self) -> list[Path]:
        """Where ``--resume`` looks for checkpoints, newest first: this run's (an interrupted run's), the finished
        run's."""
        return [self.staging / "checkpoints", self.out / "checkpoints"]

    def check_space(self, nbytes: int, what: str) -> None:
        """Refuse, before training, a disk without ``nbytes`` free for the run's outputs (``what``)."""
        free = shutil.disk_usage(self.staging).free
        if nbytes > free:
            raise OutputError(f"{self.out}: needs about {_gib(nbytes)} for {what}, and the disk holds "
                              f"{_gib(free)} free; free some space or choose another --out.")

    def commit(self) -> None:
        """Make the staged run the run in ``out`` (see the module's docstring)."""
        files = {p.name: (p.stat().st_size if p.is_file() else None) for p in self.staging.iterdir()
                 if not p.name.startswith(".")}
        write_json(self.staging / MANIFEST, {"files": files, "gaescale_version": __version__,
                                             "finished": time.strftime("%Y-%m-%dT%H:%M:%S")})
        os.rename(self.staging, self.out / COMMIT)
        finish_commit(self.out)

    def close(self) -> None:
        """Let go of ``out``: the lock; after a failure, the staging directory but what ``--resume`` needs (its
        checkpoints, if any), and what :meth:`open` created if it is empty."""
        if self.staging.exists():
            resumable = any(_checkpoints(self.staging / "checkpoints"))
            for p in self.staging.iterdir():
                if not (resumable and p.name in KEPT_ON_RESUME):
                    _remove(p)
            if not resumable:
                self.staging.rmdir()
        if getattr(self, "_locked", False):
            (self.out / LOCK).unlink(missing_ok=True)
            self._locked = False
        for p in self._created:
            try:
                p.rmdir()  # only an empty directory: a run that wrote nothing leaves nothing
            except OSError:
                break


def staging_dir(out, writer: RunWriter | None) -> Path | None:
    """Where this process writes the run until it is committed: the writer's staging directory (rank 0), ``out``
    itself for the other ranks of a torchrun group (their scratch, removed as they go: rank 0 alone writes the run),
    or None without an output directory."""
    if writer is not None:
        return writer.staging
    return None if out is None else Path(out)


def output_bytes(num_nodes: int, num_edges: int, *, dim: int, model, weighted: bool, prepared: bool,
                 checkpoints: bool) -> int:
    """The bytes a run writes, about: embeddings (``dim`` wide) and ids, graph.npz (none for a prepared graph), the
    model, and with ``checkpoints`` the two kept (the model and Adam's two moments each)."""
    params = sum(p.numel() for p in model.parameters()) * 4
    graph = 0 if prepared else 8 * (num_nodes + 1) + (8 if weighted else 4) * 2 * num_edges
    return num_nodes * (4 * dim + 4 + 12) + graph + params + (2 * 3 * params if checkpoints else 0)


def finish_commit(out: Path) -> None:
    """Complete the commit of a run into ``out`` that was interrupted after its atomic rename (``out/.commit``):
    remove the old run's files that the new run does not have, move the new run's in, the manifest last."""
    pending = out / COMMIT
    if not (pending / MANIFEST).is_file():
        if pending.exists():  # renamed, then emptied up to the manifest: only that step was left
            shutil.rmtree(pending, ignore_errors=True)
        return
    new = json.loads((pending / MANIFEST).read_text())["files"]
    for name in _manifest_names(out):
        if name not in new and name != MANIFEST:
            _remove(out / name)
    for name in new:
        src = pending / name
        if src.exists():
            if src.is_dir() and (out / name).exists():
                _remove(out / name)
            os.replace(src, out / name)
    os.replace(pending / MANIFEST, out / MANIFEST)
    shutil.rmtree(pending, ignore_errors=True)


def refuse_run_file(path, *, inputs=(), own: str | None = None) -> None:
    """Refuse, before any work, an output ``path`` of a command (``topk``, ``score``, ``embed``, ``index``,
    ``report``) that is one of its ``inputs`` or lies where a run keeps its files (``RUN/embeddings.npy``,
    ``RUN/checkpoints/...``): no command writes over a run or its own inputs. ``own``: the one name of a run that
    the command writes (``report``: ``RUN/report``)."""
    p = Path(path).absolute()
    for i in inputs:
        if i is not None and str(i) != "-" and Path(i).absolute().resolve() == p.resolve():
            raise OutputError(f"{path}: is an input of this command; write the output to another --out.")
    for d in p.parents:
        if is_finished(d) or (d / STAGING).is_dir():
            first = p.relative_to(d).parts[0]
            if first != own and first in {*_manifest_names(d), STAGING, COMMIT, LOCK}:
                raise OutputError(f"{path}: would replace a file of the run in {d}; write the output to another "
                                  "--out.")


def is_finished(out: Path) -> bool:
    """Whether ``out`` holds a finished run (its manifest, or an earlier version's embeddings and ids)."""
    return (out / MANIFEST).is_file() or ((out / "embeddings.npy").is_file() and (out / "nodes.tsv").is_file())


def unfinished_epoch(out: Path) -> int | None:
    """The epoch of the newest checkpoint of an unfinished run in ``out`` (its staging directory's, or an earlier
    version's ``checkpoints/`` without outputs), else None."""
    found = [e for e, _ in _checkpoints(out / STAGING / "checkpoints")]
    if not is_finished(out):
        found += [e for e, _ in _checkpoints(out / "checkpoints")]
    return max(found) if found else None


def manifest_sizes(out: Path) -> dict[str, int | None] | None:
    """``{name: size in bytes (None: a directory)}`` of the finished run in ``out``, None for a run without a
    manifest (an earlier version's)."""
    m = _read_json(out / MANIFEST)
    return None if m is None else dict(m.get("files", {}))


def _manifest_names(out: Path) -> list[str]:
    sizes = manifest_sizes(out)
    return list(LEGACY) if sizes is None else [*sizes, MANIFEST]


def _checkpoints(directory: Path):
    from ..training.checkpoint import list_checkpoints
    return list_checkpoints(directory)


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    else:
        p.unlink(missing_ok=True)


def _read_json(path: Path) -> dict | None:
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n:,} bytes"
