import numpy as np
import pytest

from gaescale.errors import ParameterError
from gaescale.graph import Graph
from gaescale.data.split import split_edges

from conftest import random_edges


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


@pytest.mark.parametrize("val,test", [(0.6, 0.5), (-0.1, 0.1), (1.0, 0.0)])
def test_bad_fractions(val, test):
    g = Graph.from_edge_index(random_edges(20, 30), 20)
    with pytest.raises(ParameterError):
        split_edges(g, val, test)
