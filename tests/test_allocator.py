"""gaescale asks torch for huge pages when it is imported first, and leaves a user's choice alone."""
import os
import subprocess
import sys

import pytest

SHOW = "import os; print(os.environ.get('THP_MEM_ALLOC_ENABLE'))"


def _imported(prelude: str, env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    if env_value is not None:
        env["THP_MEM_ALLOC_ENABLE"] = env_value
    code = f"{prelude}; import gaescale; {SHOW}"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.parametrize(("prelude", "env_value", "expected"), [
    ("pass", None, "1"),  # gaescale first: asked for
    ("pass", "0", "0"),  # the user's choice kept
    ("import torch", None, "None"),  # torch first: too late, so not pretended
])
def test_huge_pages_are_asked_for_only_before_torch_and_never_over_the_user(prelude, env_value, expected):
    assert _imported(prelude, env_value) == expected


# In a fresh process: a thread that allocates while it lives, then glibc's own account of its heaps (malloc_info)
ARENAS = """
import ctypes, os, sys, tempfile, threading
{prelude}
allocated, done = threading.Event(), threading.Event()
def work():
    kept = [bytearray(1000) for _ in range(100)]  # small blocks: from the thread's arena, never mmap
    allocated.set()
    done.wait()
t = threading.Thread(target=work)
t.start()
allocated.wait()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
path = os.path.join(tempfile.mkdtemp(), "info.xml")
f = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, ctypes.c_void_p(f))
libc.fclose(ctypes.c_void_p(f))
done.set()
t.join()
print(open(path).read().count("<heap nr="))
"""


@pytest.mark.skipif(sys.platform != "linux" or os.confstr("CS_GNU_LIBC_VERSION") is None, reason="glibc's arenas")
@pytest.mark.parametrize(("prelude", "arena_max", "expected"), [
    ("pass", None, "2"),  # without gaescale a second thread gets a heap of its own (the reference)
    ("import gaescale", None, "1"),  # gaescale: one heap for every thread
    ("import gaescale", "4", "2"),  # the user's MALLOC_ARENA_MAX kept
])
def test_gaescale_makes_threads_share_one_glibc_heap_unless_the_user_chose(prelude, arena_max, expected):
    assert _output_with("MALLOC_ARENA_MAX", arena_max, ARENAS.format(prelude=prelude)) == expected


def _output_with(variable: str, value: str | None, code: str) -> str:
    """The stdout of ``code`` in a fresh interpreter with ``variable`` set to ``value`` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != variable}
    if value is not None:
        env[variable] = value
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


# In a fresh process: glibc's count of mapped blocks (malloc_info) before and after a 6 MiB allocation that follows the
# free of another one (which, left to glibc, raises its mmap threshold to 6 MiB, so the second comes from the heap)
MAPPED = """
import ctypes, os, re, tempfile
{prelude}
libc = ctypes.CDLL(None)
libc.fopen.restype, libc.malloc.restype = ctypes.c_void_p, ctypes.c_void_p
def mapped():
    path = os.path.join(tempfile.mkdtemp(), "info.xml")
    f = libc.fopen(path.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(f))
    libc.fclose(ctypes.c_void_p(f))
    return int(re.search(r'<total type="mmap" count="(\\d+)"', open(path).read()).group(1))
libc.free(ctypes.c_void_p(libc.malloc(6 << 20)))
before = mapped()
block = libc.malloc(6 << 20)
print(mapped() - before)
"""


@pytest.mark.skipif(sys.platform != "linux" or os.confstr("CS_GNU_LIBC_VERSION") is None, reason="glibc's mmap")
@pytest.mark.parametrize(("prelude", "threshold", "expected"), [
    ("pass", None, "0"),  # without gaescale the second 6 MiB block comes from the heap (the reference)
    ("import gaescale", None, "1"),  # gaescale: a mapping of its own, returned whole when freed
    ("import gaescale", str(32 << 20), "0"),  # the user's MALLOC_MMAP_THRESHOLD_ kept
])
def test_gaescale_maps_buffers_of_4_mib_and_more_unless_the_user_chose(prelude, threshold, expected):
    assert _output_with("MALLOC_MMAP_THRESHOLD_", threshold, MAPPED.format(prelude=prelude)) == expected
