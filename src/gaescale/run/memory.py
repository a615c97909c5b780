"""This process's memory as the operating system reports it: current and peak resident set size (Linux
``/proc/self/status``), and resetting the peak between the phases of a run."""
from __future__ import annotations

import resource


def proc_kib(path: str, key: str) -> int | None:
    """Bytes of the ``key:`` line (in kB) of a Linux ``/proc`` file such as ``/proc/self/status``; None
    where the file or the line does not exist."""
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def rss_bytes() -> int | None:
    """Current resident set size of this process (Linux ``VmRSS``), or None elsewhere."""
    return proc_kib("/proc/self/status", "VmRSS")


def peak_rss_bytes() -> int:
    """Peak resident set size of this process.

    Linux's ``VmHWM`` where available: ``ru_maxrss`` survives ``exec``, so a process started from a large
    parent would report the parent's size. Elsewhere ``ru_maxrss`` (kilobytes on Linux)."""
    peak = proc_kib("/proc/self/status", "VmHWM")
    return peak if peak is not None else int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def reset_peak_rss() -> bool:
    """Reset this process's peak RSS (Linux ``VmHWM``, via ``/proc/self/clear_refs``) so that
    :func:`peak_rss_bytes` then reports the peak of what follows. False where it is not possible.
    Freed heap memory is handed back to the system first (glibc's ``malloc_trim``), so that what an
    earlier phase freed but the allocator kept does not count as the next phase's."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False
