"""torch's CPU allocator, configured before torch is first imported.

An epoch allocates its large buffers afresh ((N, d) activations and gradients, per-pair logits); above glibc's
32 MiB mmap threshold each is new memory, which the kernel hands over one zeroed 4 KiB page at a time. At 3M nodes
those page faults made the epoch grow 1.5-1.9x faster than the graph (BENCHMARKS.md, "Growth with the graph").
``THP_MEM_ALLOC_ENABLE=1`` makes torch align buffers of 2 MiB and more and ask the kernel for transparent huge pages
there (``madvise``): 512 times fewer faults, the same memory. torch reads the variable once, at its first
allocation, so this only takes effect when gaescale is imported before torch (the ``gaescale`` command always is).
A value the user set, 0 included, is kept.
"""
from __future__ import annotations

import os
import sys

VARIABLE = "THP_MEM_ALLOC_ENABLE"


def prefer_huge_pages() -> None:
    """Ask torch for huge pages, unless torch is imported already (too late) or the user has chosen."""
    if "torch" not in sys.modules:
        os.environ.setdefault(VARIABLE, "1")
