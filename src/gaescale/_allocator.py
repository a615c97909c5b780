"""The process's allocators, configured when gaescale is imported.

**torch's huge pages.** An epoch allocates its large buffers afresh ((N, d) activations and gradients, per-pair
logits); above glibc's 32 MiB mmap threshold each is new memory, which the kernel hands over one zeroed 4 KiB page at
a time. At 3M nodes those page faults made the epoch grow 1.5-1.9x faster than the graph (BENCHMARKS.md, "Growth with
the graph"). ``THP_MEM_ALLOC_ENABLE=1`` makes torch align buffers of 2 MiB and more and ask the kernel for transparent
huge pages there (``madvise``): 512 times fewer faults, the same memory. torch reads the variable once, at its first
allocation, so this only takes effect when gaescale is imported before torch (the ``gaescale`` command always is).
A value the user set, 0 included, is kept.

**One glibc arena.** glibc gives each thread that allocates its own heap ("arena"), and memory freed there serves only
that arena. The pair gradient's column product runs in worker threads (:func:`gaescale.sparse.columns_scipy`), whose
``(N, d)`` results then sat in arenas of their own between epochs: 120 MiB of the 770k demo's 1.37 GiB peak
(BENCHMARKS.md, "One malloc arena"). ``mallopt(M_ARENA_MAX, 1)`` makes every thread allocate from the main heap,
as ``MALLOC_ARENA_MAX=1`` would; threads that exist already keep their arenas. Where the user set
``MALLOC_ARENA_MAX`` (glibc read it at start), or glibc is not the C library, nothing is changed.

**Large buffers from the kernel, and back to it.** glibc serves a request below its mmap threshold from the heap,
and that threshold grows with the buffers freed, up to 32 MiB: after the first epoch every buffer of a few to 32 MiB
(the 770k demo's ``(N, 8)`` and ``(N, 10)`` activations and gradients, its per-pair logits) came from the heap, whose
free pieces between live ones stay resident. The demo's epoch peaked 80-200 MiB above what was live (1,110-1,220
against 1,010-1,030 MiB; BENCHMARKS.md, "Large buffers from the kernel"). ``mallopt(M_MMAP_THRESHOLD, 4 MiB)`` makes
every buffer of 4 MiB or more a mapping of its own, returned whole when freed, as ``MALLOC_MMAP_THRESHOLD_=4194304``
would: the process holds what it uses. Each such buffer is new pages (huge pages for torch's, above), which cost the
demo's epoch 0-6 %, and more on a virtual machine whose host takes freed memory back; during training
:mod:`gaescale.cpu_cache` keeps torch's large buffers' pages in a pool instead. Where the user set
``MALLOC_MMAP_THRESHOLD_``, it is kept.
"""
from __future__ import annotations

import ctypes
import os
import platform
import sys

VARIABLE = "THP_MEM_ALLOC_ENABLE"
ARENA_VARIABLE = "MALLOC_ARENA_MAX"
THRESHOLD_VARIABLE = "MALLOC_MMAP_THRESHOLD_"
M_ARENA_MAX = -8  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 4 << 20  # bytes: buffers of this size and more are mappings of their own


def prefer_huge_pages() -> None:
    """Ask torch for huge pages, unless torch is imported already (too late) or the user has chosen."""
    if "torch" not in sys.modules:
        os.environ.setdefault(VARIABLE, "1")


def _mallopt(variable: str, option: int, value: int) -> bool:
    """glibc's ``mallopt(option, value)``, unless the user set ``variable`` (glibc's own name for it) or the C library
    is not glibc; True where set."""
    if variable in os.environ or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(option, value) == 1


def one_arena() -> bool:
    """Make glibc serve every thread's allocations from one arena, unless the user chose a number; True where set."""
    return _mallopt(ARENA_VARIABLE, M_ARENA_MAX, 1)


def large_buffers_mapped() -> bool:
    """Make glibc map every buffer of :data:`MMAP_THRESHOLD` bytes or more on its own and unmap it when freed, unless
    the user chose a threshold; True where set."""
    return _mallopt(THRESHOLD_VARIABLE, M_MMAP_THRESHOLD, MMAP_THRESHOLD)
