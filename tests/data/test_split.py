import numpy as np
import pytest

from conftest import random_edges
from gaescale.data.split import split_edges
from gaescale.errors import ParameterError
from gaescale.graph import Graph


def _set(pairs):
    return set(map(tuple, pairs.T.tolist()))


def test_split_is_a_partition_and_negatives_are_non_edges():
    n = 300
    ei = random_edges(n, 2000, seed=2)
    g = Graph.from_edge_index(ei, n)
    s = split_edges(g, 0.05, 0.10, seed=1)
    train, val, test = _set(s.train), _set(s.val_pos), _set(s.test_pos)
    assert not (train & val) and not (train & test) and not (val & test)
    assert train | val | test == _set(ei)
    assert (len(val), len(test)) == (100, 200)
    vn, tn = _set(s.val_neg), _set(s.test_neg)
    assert len(vn) == 100 and len(tn) == 200 and not (vn & tn)
    assert not ((vn | tn) & _set(ei))
    assert all(u < v for u, v in vn | tn)
    # the encoder's graph holds only training edges
    assert _set(s.train_graph().edge_index()) == train


def test_split_is_reproducible_and_seed_dependent():
    g = Graph.from_edge_index(random_edges(100, 400), 100)
    a, b, c = split_edges(g, seed=3), split_edges(g, seed=3), split_edges(g, seed=4)
    assert np.array_equal(a.test_pos, b.test_pos) and np.array_equal(a.val_neg, b.val_neg)
    assert not np.array_equal(a.test_pos, c.test_pos)


def test_dense_graph_negative_sampling_terminates_exactly():
    n = 12
    full = np.array([(u, v) for u in range(n) for v in range(u + 1, n)]).T
    keep = full[:, :60]  # 60 of 66 pairs are edges: only 6 non-edges exist
    g = Graph.from_edge_index(keep, n)
    s = split_edges(g, 0.05, 0.05, seed=0)
    assert len(_set(s.val_neg) | _set(s.test_neg)) == 6


@pytest.mark.parametrize("val,test,name", [(0.6, 0.5, r"val_fraction \+ test_fraction"),
                                           (-0.1, 0.1, "val_fraction"), (1.0, 0.0, "val_fraction"),
                                           (0.1, 1.5, "test_fraction")])
def test_bad_fractions(val, test, name):
    g = Graph.from_edge_index(random_edges(20, 30), 20)
    with pytest.raises(ParameterError, match=rf"^The '{name}' parameter of split_edges must be"):
        split_edges(g, val, test)


def _fds_on(path) -> list[str]:
    """This process's open file descriptors on ``path`` (Linux's /proc/self/fd)."""
    import os
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(path)):
            fds.append(target)
    return fds


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self/fd"), reason="needs Linux's /proc/self/fd")
def test_a_failed_hashed_split_closes_and_removes_its_temporary_file(tmp_path, monkeypatch):
    import errno

    import gaescale.data.split as split_module
    from gaescale.data.split import split_hashed
    g = Graph.from_edge_index(random_edges(200, 1500, seed=3), 200)
    real, blocks = split_module._split_rows, []

    def disk_full_at_the_second_block(*args):
        *head, train_entries = args

        def entries(cols):
            train_entries(cols)  # the first block reaches the file
            blocks.append(cols.size)
            if len(blocks) == 2:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real(*head, entries)
    monkeypatch.setattr(split_module, "_split_rows", disk_full_at_the_second_block)
    out = tmp_path / "split"
    with pytest.raises(OSError, match="No space left") as failed:  # its traceback keeps split_hashed's locals
        split_hashed(g, out_dir=out, block=256)
    assert len(blocks) == 2 and list(out.iterdir()) == []  # no train_indices.tmp left behind
    assert _fds_on(out) == [], failed  # and no handle left open on it
    monkeypatch.undo()
    s = split_hashed(g, out_dir=out, block=256)
    assert [p.name for p in out.iterdir()] == ["train_indices.bin"] and s.train_graph().num_edges == s.num_train
