"""Never lose a run (issue 33), the data layer: bad or unusual input files and in-memory graphs that gave a
traceback, a silent wrong result, a misleading message or a leftover directory.

Each row names the bad input, the command (run in-process, ``main(argv)``), what must come out and its verdict on
the code before the fix: ``traceback``, ``silent`` (a wrong result without a word), ``misleading`` (an error that
blames the wrong thing or gives the wrong advice) or ``leftover`` (a directory never cleaned). An error must be
exit code 2 with exactly one line on stderr holding the key words; an input whose correct reading is a success
is checked by what was written. Either way nothing outside the command's output directory changes.
"""
import gzip
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import gaescale
from gaescale.cli import main

FAST = ["--quiet", "--epochs", "2", "--hidden", "4", "--dim", "2", "--no-report"]
N = 30
PAIRS = [(i, (i + 1) % N) for i in range(N)] + [(i, (i + 7) % N) for i in range(N)]
RING = "".join(f"{u} {v}\n" for u, v in PAIRS)
BIG = 9223372036854775813  # 2^63 + 5: beyond int64
HUGE = 2**64 + 1  # beyond uint64 too


def _ring(zero, sep=" "):
    """RING with node 0 named ``zero``."""
    return "".join(f"{zero if u == 0 else u}{sep}{zero if v == 0 else v}\n" for u, v in PAIRS)


def _write(t, name, text):
    (t / name).write_text(text)
    return str(t / name)


def _gz(t, name, data: bytes, cut: int = 0):
    """``data`` gzip-compressed into ``name``, its last ``cut`` bytes cut off (a truncated download)."""
    blob = gzip.compress(data)
    (t / name).write_bytes(blob[:len(blob) - cut])
    return str(t / name)


def _truncated(t, name="e.txt.gz"):
    return _gz(t, name, RING.encode() * 20, cut=30)


def _npy(t, name, array):
    np.save(t / name, array)
    return str(t / name)


def _features_x(t):
    return _npy(t, "x.npy", np.eye(N, 3, dtype=np.float32) + 1)


def _fifo(t):
    os.mkfifo(t / "edges.pipe")
    return str(t / "edges.pipe")


def _pandas_features(t, index_name):
    """Features written by pandas' ``df.to_csv()``: the index (the node ids, here in reverse order) first, under
    ``index_name`` (None: an unnamed index, an empty first header field), then columns named 0..7."""
    import pandas as pd
    values = np.arange(N * 8, dtype=np.float64).reshape(N, 8) / 10
    df = pd.DataFrame(values, index=pd.Index(range(N - 1, -1, -1), name=index_name))
    df.to_csv(t / "x.csv")
    return str(t / "x.csv")


def _dead_pid():
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _staging(t, name, owner=None, age=0.0):
    """A staging directory of 'gaescale prepare --out t/o', as a killed prepare leaves it: a partial file, its
    ``owner`` record (None: none), last changed ``age`` seconds ago."""
    d = t / f".o.{name}.partial"
    d.mkdir()
    (d / "keys.bin").write_bytes(b"\0" * 64)
    if owner is not None:
        (d / "owner").write_text(json.dumps(owner))
    if age:
        past = time.time() - age
        os.utime(d, (past, past))
    return d


def _stale_and_live(t):
    """A stale staging directory of a dead process, an old one without an owner, and one of a live process."""
    import socket
    host = socket.gethostname()
    _staging(t, "dead", {"host": host, "pid": _dead_pid(), "start": None})
    _staging(t, "unowned", None, age=3600)
    _staging(t, "live", {"host": host, "pid": os.getpid(), "start": None})
    _staging(t, "other-host", {"host": host + "-elsewhere", "pid": _dead_pid(), "start": None})
    return _write(t, "e.txt", RING)


# ---------------------------------------------------------------- what a success must have written

def _nodes(t, out="o"):
    return (t / out / "nodes.tsv").read_text().splitlines()


def _has_big_ids(t):
    ids = _nodes(t)
    assert str(BIG) in ids and not any(i.startswith("-") for i in ids), ids
    assert sorted(ids) == sorted({str(BIG if u == 0 else u) for u in range(N)}), ids


def _has_huge_ids(t):
    ids = _nodes(t)
    assert str(HUGE) in ids and len(ids) == N, ids


def _has_stripped_ids(t):
    assert sorted(_nodes(t)) == sorted(f"n{i}" for i in range(N)), _nodes(t)


def _pandas_features_aligned(t):
    """x.npy row k is the CSV's row of node nodes.tsv[k] (ids in reverse order: row r holds node N-1-r)."""
    ids = [int(i) for i in _nodes(t)]
    x = np.load(t / "o" / "x.npy")
    expected = np.arange(N * 8, dtype=np.float32).reshape(N, 8)[[N - 1 - i for i in ids]] / 10
    assert x.shape == (N, 8) and np.allclose(x, expected)


def _stale_removed(t, err):
    assert (t / "o" / "graph.json").is_file()
    left = sorted(p.name for p in t.iterdir() if p.name.endswith(".partial"))
    assert left == [".o.live.partial", ".o.other-host.partial"], left
    removed = [line for line in err if line.startswith("removed ")]
    assert len(removed) == 2 and all("left by an unfinished 'gaescale prepare'" in line for line in removed), err
    assert any(f"{t}/.o.dead.partial" in line for line in removed)
    assert any(f"{t}/.o.unowned.partial" in line for line in removed)


# ---------------------------------------------------------------- the table

# name: (argv of t, expected, verdict). expected: key words of the one-line error, or a check of what was written
# (check(t), or check(t, stderr_lines)), and then the paths besides the output 'o' that the command may change.
CASES = {
    # 1. integer ids beyond int64 wrapped to negative numbers; beyond uint64 an OverflowError
    "1 ids beyond int64, train": (
        lambda t: ["train", _write(t, "e.txt", _ring(BIG)), "--out", str(t / "o")] + FAST, _has_big_ids, "silent"),
    "1 ids beyond int64, prepare": (
        lambda t: ["prepare", _write(t, "e.txt", _ring(BIG)), "--out", str(t / "o"), "--chunk", "16"], _has_big_ids,
        "silent"),
    "1 ids beyond int64 after prepare's first chunk": (
        lambda t: ["prepare", _write(t, "e.txt", RING + f"1 {BIG}\n"), "--out", str(t / "o"), "--chunk", "16"],
        [f"e.txt, line {len(PAIRS) + 1}, field 'target'", "within 64 bits", f"Got '{BIG}'", "--ids str"], "silent"),
    "1 ids beyond int64 with --ids int": (
        lambda t: ["train", _write(t, "e.txt", f"{BIG} 1\n1 2\n"), "--ids", "int", "--out", str(t / "o")] + FAST,
        ["e.txt, line 1, field 'source'", "within 64 bits", f"Got '{BIG}'", "--ids str"], "silent"),
    "1 ids beyond int64 with --ids int, prepare": (
        lambda t: ["prepare", _write(t, "e.txt", f"1 2\n2 {BIG}\n"), "--ids", "int", "--out", str(t / "o")],
        ["e.txt, line 2, field 'target'", "within 64 bits", f"Got '{BIG}'"], "silent"),
    "1 ids beyond uint64 in a CSV": (
        lambda t: ["train", _write(t, "e.csv", "src,dst\n" + _ring(HUGE, ",")), "--out", str(t / "o")] + FAST,
        _has_huge_ids, "traceback"),
    # 2. ' a ' and 'a' were two nodes
    "2 whitespace around string ids, train": (
        lambda t: ["train", _write(t, "e.csv", "".join(f"n{u}, n{v} \n" if u % 2 else f" n{u} ,n{v}\n"
                                                        for u, v in PAIRS)), "--out", str(t / "o")] + FAST,
        _has_stripped_ids, "silent"),
    "2 whitespace around string ids, prepare": (
        lambda t: ["prepare", _write(t, "e.csv", "".join(f"n{u}, n{v} \n" if u % 2 else f" n{u} ,n{v}\n"
                                                          for u, v in PAIRS)), "--out", str(t / "o")],
        _has_stripped_ids, "silent"),
    # 4. a truncated or non-gzip .gz: a traceback wherever it was read
    "4 truncated .gz, train": (
        lambda t: ["train", _truncated(t), "--out", str(t / "o")] + FAST,
        ["e.txt.gz: truncated gzip file"], "traceback"),
    "4 truncated .gz, plan": (lambda t: ["plan", _truncated(t)], ["e.txt.gz: truncated gzip file"], "traceback"),
    "4 truncated .gz, prepare": (lambda t: ["prepare", _truncated(t), "--out", str(t / "o")],
                                 ["e.txt.gz: truncated gzip file"], "traceback"),
    "4 truncated .gz, tune": (lambda t: ["tune", _truncated(t), "--out", str(t / "o"), "--trials", "1", "--quiet",
                                         "--epochs", "2"], ["e.txt.gz: truncated gzip file"], "traceback"),
    "4 truncated .gz, embed": (lambda t: ["embed", "XRUN", _truncated(t), "--features", _features_x(t), "--out",
                                          str(t / "z.npy")], ["e.txt.gz: truncated gzip file"], "traceback"),
    "4 truncated features .gz": (
        lambda t: ["train", _write(t, "e.txt", RING), "--features", _gz(
            t, "x.csv.gz", ("id,f\n" + "".join(f"{i},{i / 10}\n" for i in range(N))).encode() * 5, cut=30),
                   "--out", str(t / "o")] + FAST, ["x.csv.gz: truncated gzip file"], "traceback"),
    "4 not gzip at all": (
        lambda t: ["train", _write(t, "e.txt.gz", RING), "--out", str(t / "o")] + FAST,
        ["e.txt.gz: not a valid gzip file", "rename it without .gz"], "traceback"),
    "4 not gzip at all, prepare": (
        lambda t: ["prepare", _write(t, "e.txt.gz", RING), "--out", str(t / "o")],
        ["e.txt.gz: not a valid gzip file"], "traceback"),
    # 5. indices of 2^62 in an .npy: 'array is too big'
    "5 .npy index 2^62": (
        lambda t: ["train", _npy(t, "e.npy", np.array([[0, 1], [2**62, 2]])), "--out", str(t / "o")] + FAST,
        ["e.npy: node indices up to 4611686018427387904", "indices 0..N-1", "write the edges as text"],
        "traceback"),
    "5 .npy index 2^62, prepare": (
        lambda t: ["prepare", _npy(t, "e.npy", np.array([[0, 1], [2**62, 2]])), "--out", str(t / "o")],
        ["e.npy: node indices up to 4611686018427387904", "write the edges as text"], "traceback"),
    "5 .npy sparse ids": (
        lambda t: ["plan", _npy(t, "e.npy", np.array([[0, 1], [2**30, 2]]))],
        ["e.npy: node indices up to 1073741824", "most of them without an edge", "write the edges as text"],
        "traceback"),
    # 6. a pandas-written features CSV was refused with the advice '--ids str'
    "6 pandas features CSV, index named id": (
        lambda t: ["prepare", _write(t, "e.txt", RING), "--features", _pandas_features(t, "id"), "--out",
                   str(t / "o")], _pandas_features_aligned, "misleading"),
    "6 pandas features CSV, unnamed index": (
        lambda t: ["prepare", _write(t, "e.txt", RING), "--features", _pandas_features(t, None), "--out",
                   str(t / "o")], _pandas_features_aligned, "misleading"),
    # 7. a pipe was 'empty'
    "7 a pipe as the edge list": (
        lambda t: ["train", _fifo(t), "--out", str(t / "o")] + FAST,
        ["edges.pipe: is a pipe", "write it to a file first"], "misleading"),
    "7 a pipe as the edge list, prepare": (
        lambda t: ["prepare", _fifo(t), "--out", str(t / "o")], ["edges.pipe: is a pipe"], "misleading"),
    # 8. prepare --chunk 0: a pandas ValueError
    "8 prepare --chunk 0": (
        lambda t: ["prepare", _write(t, "e.txt", RING), "--out", str(t / "o"), "--chunk", "0"],
        ["The 'chunk' parameter of prepare must be an int >= 1. Got 0 instead."], "traceback"),
    # 9. an .npz's features with too few rows were blamed on edge_index
    "9 .npz features with too few rows": (
        lambda t: ["train", _npz_x_rows(t), "--out", str(t / "o")] + FAST,
        ["g.npz, field 'x': expected one feature row per node: at least 12 rows", "Got 10 rows."], "misleading"),
    "9 .npz features with too few rows, prepare": (
        lambda t: ["prepare", _npz_x_rows(t), "--out", str(t / "o")],
        ["g.npz, field 'x'", "at least 12 rows", "Got 10 rows."], "misleading"),
    # 12. a killed prepare's staging directory was never removed
    "12 staging directories of killed prepares": (
        lambda t: ["prepare", _stale_and_live(t), "--out", str(t / "o")], _stale_removed, "leftover",
        [".o.dead.partial", ".o.unowned.partial"]),
}


def _npz_x_rows(t):
    ei = np.array([list(range(12)), [(i + 1) % 12 for i in range(12)]])
    np.savez(t / "g.npz", edge_index=ei, x=np.ones((10, 2), np.float32))
    return str(t / "g.npz")


@pytest.fixture(scope="module")
def xrun(tmp_path_factory):
    """A finished run trained with features (what embed needs)."""
    d = tmp_path_factory.mktemp("xrun")
    (d / "e.txt").write_text(RING)
    np.save(d / "x.npy", np.eye(N, 3, dtype=np.float32) + 1)
    assert main(["train", str(d / "e.txt"), "--features", str(d / "x.npy"), "--out", str(d / "run")] + FAST) == 0
    return d / "run"


def _tree(root):
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")}


def _outside(paths, allowed):
    """The paths that are not under the output directory 'o' (or z.npy) nor under one of ``allowed``."""
    keep = ("o", "z.npy", *allowed)
    return sorted(p for p in paths if p.split("/")[0] not in keep)


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input(tmp_path, capsys, request, case):
    make, expected, verdict, *allowed = CASES[case]
    assert verdict in ("traceback", "silent", "misleading", "leftover")
    argv = make(tmp_path)
    if "XRUN" in argv:
        argv[argv.index("XRUN")] = str(request.getfixturevalue("xrun"))
    before = _tree(tmp_path)
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    after = _tree(tmp_path)
    if callable(expected):
        assert code == 0, err
        assert not any("Traceback" in line for line in err), err
        expected(tmp_path, err) if expected.__code__.co_argcount == 2 else expected(tmp_path)
    else:
        assert code == 2 and len(err) == 1 and err[0].startswith("gaescale: error: "), err
        for words in expected:
            assert words in err[0], (words, err[0])
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    assert _outside(changed, allowed[0] if allowed else ()) == [], changed  # nothing else written or removed


# ---------------------------------------------------------------- in-memory graphs (the Python API)

def _edges(*columns, n=4, **fields):
    return gaescale.EdgeList(np.array(columns).T, n, None, **fields)


API = {
    # 3. an EdgeList index >= num_nodes, or a fractional one, was dropped or truncated without a word
    "3 EdgeList index past num_nodes": (
        lambda: gaescale.train(data=_edges((0, 1), (1, 2), (2, 3), (3, 5)), quiet=True),
        "The 'data.edge_index' parameter of train must be node indices in [0, num_nodes=4). Got indices from 0 to "
        "5 instead.", "silent"),
    "3 EdgeList fractional index": (
        lambda: gaescale.train(data=_edges((0, 1.0), (1, 2.0), (2, 3.0), (3, 1.5)), quiet=True),
        "The 'data.edge_index' parameter of train must be whole-number node indices. Got 1.5 at column 3 instead.",
        "silent"),
    "3 EdgeList negative index": (
        lambda: gaescale.train(data=_edges((0, 1), (1, -2)), quiet=True),
        "The 'data.edge_index' parameter of train must be node indices in [0, num_nodes=4). Got indices from -2 to "
        "1 instead.", "silent"),
    "3 EdgeList features rows": (
        lambda: gaescale.train(data=_edges((0, 1), (1, 2), x=np.ones((3, 2))), quiet=True),
        "The 'data.x' parameter of train must be (num_nodes=4, F) numeric features, one row per node. Got shape "
        "(3, 2), dtype float64 instead.", "traceback"),
    "3 from_pyg features too few rows": (
        lambda: gaescale.from_pyg(_Data(edge_index=np.array([[0, 1], [1, 5]]), x=np.ones((3, 2)))),
        "The 'data.x' parameter of from_pyg must be (N, F) features, one row per node: at least 6 rows (edge_index "
        "holds node indices up to 5). Got shape (3, 2) instead.", "misleading"),
    # 10. a Python list as features printed all of it (84 KB)
    "10 a list as features": (
        lambda: gaescale.train(edges="e.txt", features=list(range(10_000)), quiet=True),
        "The 'features' parameter of train must be a non-empty path. Got a list of 10,000 items instead.",
        "misleading"),
    # 11. data=object() or a dict: AttributeError
    "11 data=object()": (
        lambda: gaescale.train(data=object(), quiet=True),
        "The 'data' parameter of train must be an EdgeList (e.g. gaescale.community_graph(...)) or a "
        "torch_geometric Data. Got object instead.", "traceback"),
    "11 data=a dict": (
        lambda: gaescale.train(data={"edge_index": [[0, 1], [1, 2]]}, quiet=True),
        "The 'data' parameter of train must be an EdgeList (e.g. gaescale.community_graph(...)) or a "
        "torch_geometric Data. Got dict instead.", "traceback"),
}


class _Data:
    def __init__(self, **fields):
        self.__dict__.update(fields)


@pytest.mark.parametrize("case", sorted(API))
def test_bad_in_memory_input(tmp_path, monkeypatch, case):
    call, message, verdict = API[case]
    assert verdict in ("traceback", "silent", "misleading", "leftover")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(gaescale.ParameterError) as info:
        call()
    assert str(info.value) == message
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_edge_list_of_whole_floats_trains():
    """Case 3's other side: an EdgeList of integral floats (1.0) is read as the indices they hold."""
    el = _edges(*[(float(u), float(v)) for u, v in PAIRS], n=N)
    result = gaescale.train(data=el, epochs=2, hidden="4", dim=2, quiet=True, report=False)
    assert result.embeddings.shape == (N, 2)
