"""Atomic writes: importing gaescale leaves the process's umask alone, and a written file gets the mode
open() would give it under the umask in effect when it is written."""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

SCRIPT = textwrap.dedent("""
    import json, os, stat, sys
    os.umask(0o027)
    calls, real = [], os.umask
    os.umask = lambda mask: (calls.append(mask), real(mask))[1]  # every call to os.umask from here on
    import gaescale, gaescale.cli, gaescale.outputs  # the package and what the CLI imports
    at_import = list(calls)
    out = sys.argv[1]
    mode = lambda name: stat.S_IMODE(os.stat(os.path.join(out, name)).st_mode)
    gaescale.outputs.write_json(os.path.join(out, "a.json"), {"a": 1})
    real(0o077)  # the process changes its umask between two writes
    gaescale.outputs.write_npy(os.path.join(out, "b.npy"), __import__("numpy").zeros(3))
    with open(os.path.join(out, "c.txt"), "w"):
        pass
    current = real(0o077)
    print(json.dumps({"at_import": at_import, "calls": calls, "umask": current, "a": mode("a.json"),
                      "b": mode("b.npy"), "c": mode("c.txt")}))
""")


@pytest.fixture(scope="module")
def umask_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("umask")
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def test_importing_gaescale_does_not_call_os_umask(umask_run):
    assert umask_run["at_import"] == []
    assert umask_run["umask"] == 0o077  # still the one the script set last


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux reads the umask from /proc, never sets it")
def test_writing_does_not_change_the_umask_on_linux(umask_run):
    assert umask_run["calls"] == []  # read from /proc/self/status: no set-and-restore another thread could see


def test_atomically_written_files_get_the_mode_open_gives_under_the_current_umask(umask_run):
    assert umask_run["a"] == 0o666 & ~0o027 == 0o640
    assert umask_run["b"] == umask_run["c"] == 0o666 & ~0o077 == 0o600  # the umask of the moment, not the first


def test_mapped_buffers_are_file_pages_that_leave_nothing_behind(tmp_path):
    import torch

    from gaescale.outputs import MappedBuffers
    small = MappedBuffers(tmp_path / "scratch", min_bytes=1 << 20)((10, 4))
    assert not (tmp_path / "scratch").exists()  # under min_bytes: an ordinary tensor, no file
    t = MappedBuffers(tmp_path / "scratch", min_bytes=0)((1000, 3))
    assert t.shape == (1000, 3) and t.dtype == torch.float32 and small.shape == (10, 4)
    t[:] = 2.5
    assert float(t.sum()) == 7500.0
    with open("/proc/self/maps") as fh:  # mapped from a file of the directory, already unlinked
        assert any(str(tmp_path / "scratch") in line and "(deleted)" in line for line in fh)
    assert list((tmp_path / "scratch").iterdir()) == []


@pytest.mark.parametrize("ids, integer", [
    (np.array([5, -3, 0, 2**63 - 1, -2**63, 10, 99, 100], np.int64), True),
    (np.array(["007", "1", "2"], dtype=object), False),  # a leading zero: text, as written
    (np.array(["1e3", "2"], dtype=object), False),  # pandas would read 1000
    (np.array(["+5", "-0", "3"], dtype=object), False),
    (np.array(["a", "b c"], dtype=object), False),
])
def test_read_ids_gives_int64_only_for_canonical_integers(tmp_path, ids, integer):
    """``read_ids`` of ``write_ids``: the same ids; int64 exactly when every line is ``str(int)`` of its value."""
    from gaescale.outputs import read_ids, rows_of_ids, write_ids
    write_ids(tmp_path / "nodes.tsv", ids)
    got = read_ids(tmp_path / "nodes.tsv")
    assert (got.dtype == np.int64) == integer
    assert [str(v) for v in got.tolist()] == [str(v) for v in ids.tolist()]
    wanted = [ids[-1], "missing", ids[0], "-0" if integer else "7"]
    assert rows_of_ids(got, wanted) == [len(ids) - 1, None, 0, None]
    if integer:  # an int given for a text id matches as text too
        assert rows_of_ids(got, [int(ids[1])]) == [1]
