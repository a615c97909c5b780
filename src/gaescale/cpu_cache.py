"""A pool of the memory large CPU buffers freed, for the next epoch's: torch's CPU allocator, compiled on first use.

**Why.** An epoch allocates its large buffers afresh: ``(N, d)`` activations and gradients, per-pair logits. gaescale
has glibc map each buffer of 4 MiB or more on its own and unmap it when freed (:mod:`gaescale._allocator`), so the
process holds only what it uses; but every such buffer is then memory the kernel hands over anew, zeroed, page by
page. On a virtual machine whose balloon reports free pages to the host (free page reporting, as on the machines
these benchmarks ran on) the host takes those pages back within seconds, and a first write to them again costs
several times a write to memory kept (``bench/bench_fresh_memory.py``: 1.6-2.9 GB/s a second or more after freeing,
25 GB/s kept). A 770k epoch reuses memory before the host takes it; a 3M or 10M epoch does not, and its system time
grew 1.5x and 4.8x faster than the graph (BENCHMARKS.md, "Fresh memory on this virtual machine").

**What.** :func:`install` makes this module's allocator torch's CPU allocator. Buffers below ``threshold`` bytes
go to the allocator that was there (torch's own). A larger buffer is a mapping of its own, rounded up to 2 MiB and
aligned to it (huge pages where ``THP_MEM_ALLOC_ENABLE=1``, as gaescale sets it). When it is freed, its pages stay in
the process, in a pool; a later buffer is made of pooled pages: a pooled range of its very size, else pooled ranges
moved into a new mapping with ``mremap`` (page tables move; no byte is copied and no page faulted in), and only what
the pool lacks is new memory. The bound follows: buffers in use and pool together never exceed the most the buffers
in use have been at once since the last :func:`empty` (their peak without the pool), so the process never holds more
large-buffer memory than it did without the pool; kept whole (``keep=1``), the pool would serve an epoch that
repeats the last one with no new memory at all. :data:`KEEP` (0.9) cuts it back: when a buffer is freed, the oldest
pooled ranges go back to the kernel until buffers in use and pool are within 0.9 of that peak. The process's other
memory (NumPy's, glibc's heap) peaks at other moments than torch's large buffers do, and would otherwise add to a
pool held at the full peak (the demo's validation: 1.03 against 0.99 GiB); so a tenth of the peak is new memory each
epoch. :func:`cached_epochs` installs it for a block of training and :func:`empty` returns it.

**Building.** ``cpu_cache.cpp`` beside this file is compiled with the C++ compiler (``$CXX``, else ``c++``) against
torch's headers and ``libc10`` into ``$XDG_CACHE_HOME/gaescale`` (default ``~/.cache/gaescale``), once per source,
torch version and compiler (about a second), written under a temporary name and renamed, so that processes building
it at once do not clash. Where there is no compiler, the build fails, torch has another allocator installed, or the
platform is not Linux, nothing changes and :func:`install` returns the reason.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from .errors import ParameterError

SOURCE = Path(__file__).with_name("cpu_cache.cpp")
HUGE_PAGES = "THP_MEM_ALLOC_ENABLE"  # torch's setting, which gaescale turns on (gaescale._allocator); 1: huge pages
KEEP = 0.9  # buffers in use and pool are kept within this share of the peak of buffers in use (BENCHMARKS.md)
THRESHOLD = 4 << 20  # bytes: buffers of this size and more are pooled (glibc maps them on its own, _allocator)
_STATS = ("live_bytes", "pooled_bytes", "limit_bytes", "peak_bytes", "whole_bytes", "moved_bytes", "fresh_bytes",
          "released_bytes", "moves", "threshold_bytes")
_lib: ctypes.CDLL | None = None
_failed: str | None = None  # why the library could not be built or loaded, once known


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gaescale"


def _build() -> Path:
    """The compiled library's path, compiling it first where it is not there yet; raises OSError or
    subprocess.CalledProcessError where it cannot."""
    compiler = shutil.which(os.environ.get("CXX", "c++"))
    if compiler is None:
        raise OSError(f"no C++ compiler ({os.environ.get('CXX', 'c++')}) on PATH")
    torch_dir = Path(torch.__file__).parent
    key = hashlib.sha256(SOURCE.read_bytes() + torch.__version__.encode() + compiler.encode()).hexdigest()[:16]
    target = _cache_dir() / f"cpu_cache-{key}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        subprocess.run([compiler, "-O2", "-std=c++17", "-shared", "-fPIC", "-D_GLIBCXX_USE_CXX11_ABI="
                        f"{int(torch.compiled_with_cxx11_abi())}", f"-I{torch_dir / 'include'}", str(SOURCE),
                        f"-L{torch_dir / 'lib'}", "-lc10", f"-Wl,-rpath,{torch_dir / 'lib'}", "-o", tmp],
                       check=True, capture_output=True, text=True, timeout=300)
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return target


def _library() -> ctypes.CDLL | None:
    """The loaded library, or None (the reason in ``_failed``)."""
    global _lib, _failed
    if _lib is not None or _failed is not None:
        return _lib
    if platform.system() != "Linux":
        _failed = f"only built on Linux (this is {platform.system()})"
        return None
    try:
        lib = ctypes.CDLL(str(_build()))
    except subprocess.CalledProcessError as e:
        lines = (e.stderr or "").strip().splitlines()
        _failed = f"the build failed: {lines[-1] if lines else e}"
        return None
    except (OSError, subprocess.SubprocessError) as e:
        _failed = f"could not build or load it: {e}"
        return None
    lib.gaescale_cache_install.argtypes = [ctypes.c_int64, ctypes.c_double, ctypes.c_int]
    lib.gaescale_cache_install.restype = ctypes.c_int
    lib.gaescale_cache_installed.restype = ctypes.c_int
    lib.gaescale_cache_stats.argtypes = [ctypes.POINTER(ctypes.c_int64)]
    _lib = lib
    return lib


def install(threshold: int | None = None, keep: float | None = None) -> str | None:
    """Make the pool torch's CPU allocator: buffers of ``threshold`` bytes and more are pooled, and buffers in use and
    pool together kept within ``keep`` times the most the buffers in use have been (None: the values in force,
    :data:`THRESHOLD` and :data:`KEEP` at first). Returns None where it is installed, else why not (nothing changed
    then)."""
    if threshold is not None and (not isinstance(threshold, int) or threshold < 1):
        raise ParameterError("threshold", "cpu_cache.install", "an int >= 1 (bytes) or None", threshold)
    if keep is not None and not (isinstance(keep, (int, float)) and 0 < keep <= 1):
        raise ParameterError("keep", "cpu_cache.install", "a float in (0, 1] or None", keep)
    lib = _library()
    if lib is None:
        return _failed
    first = stats()["threshold_bytes"] == 0  # before the first install every figure is 0
    code = lib.gaescale_cache_install(threshold or (THRESHOLD if first else 0), keep or (KEEP if first else 0.0),
                                      os.environ.get(HUGE_PAGES) == "1")
    if code == 1:
        return "torch's CPU allocator is not its default one (another was installed); left as it is"
    if code == 2:
        return "torch's CPU allocator cannot free raw pointers; left as it is"
    return None


def installed() -> bool:
    """Whether the pool is torch's CPU allocator now."""
    return _lib is not None and bool(_lib.gaescale_cache_installed())


def uninstall() -> None:
    """Put back the allocator :func:`install` replaced and return the pool to the kernel; buffers allocated through
    the pool are still freed through it, straight back to the kernel."""
    if _lib is not None:
        _lib.gaescale_cache_uninstall()


def empty() -> None:
    """Return the pool to the kernel and restart the peaks (the bound) from the buffers in use now."""
    if _lib is not None:
        _lib.gaescale_cache_empty()


def stats() -> dict[str, int]:
    """The pool's figures, all zero before the first :func:`install`: ``live_bytes`` (large buffers in use),
    ``pooled_bytes``, ``limit_bytes`` and ``peak_bytes`` (the most that buffers in use and pool, and buffers in use,
    have been since :func:`empty`); over the whole process, the bytes of large buffers served ``whole_bytes`` (a
    pooled range of their size), ``moved_bytes`` (pooled pages moved into them) and ``fresh_bytes`` (new memory),
    ``released_bytes`` (returned to the kernel by the :data:`KEEP` rule), ``moves`` (mremap calls); and
    ``threshold_bytes``."""
    out = (ctypes.c_int64 * len(_STATS))()
    if _lib is not None:
        _lib.gaescale_cache_stats(out)
    return dict(zip(_STATS, out))


class Epochs:
    """What :func:`cached_epochs` yields: ``off``, why the pool is not in use (None where it is), and
    :meth:`report`, the pool's figures (:func:`stats`) or ``off``."""

    def __init__(self, off: str | None):
        self.off = off

    def report(self) -> dict[str, int] | str:
        return stats() if self.off is None else self.off


@contextlib.contextmanager
def cached_epochs(enabled: bool = True):
    """Install the pool for the block (where ``enabled`` and possible; :class:`Epochs` says), empty it when the block
    ends, and put back the previous allocator where this block installed it."""
    if not enabled:
        yield Epochs("off")
        return
    was = installed()
    off = install()
    if off is None:
        empty()  # the bound starts from training, not from what setup held
    try:
        yield Epochs(off)
    finally:
        if off is None:
            empty() if was else uninstall()
