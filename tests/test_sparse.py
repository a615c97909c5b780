import numpy as np
import torch

from conftest import random_edges
from gaescale.graph import Graph
from gaescale.sparse import PairIndex, SparseOperator, spmm


def test_spmm_gradcheck_float64_symmetric():
    g = Graph.from_edge_index(random_edges(20, 35), 20)
    op = g.gcn_operator.to(torch.float64)
    x = torch.randn(20, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: spmm(op, x), (x,))


def test_spmm_gradcheck_non_symmetric_matches_dense():
    rng = np.random.default_rng(1)
    m = (rng.random((7, 5)) < 0.4) * rng.normal(size=(7, 5))
    import scipy.sparse as sp
    op = SparseOperator(sp.csr_matrix(m), dtype=torch.float64)
    x = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    y = op @ x
    assert torch.allclose(y, torch.from_numpy(m) @ x)
    assert torch.autograd.gradcheck(lambda x: op @ x, (x,))


def test_pair_logits_match_gather_and_gradcheck():
    n = 40
    z = torch.randn(n, 5, dtype=torch.float64, requires_grad=True)
    pairs = torch.randint(0, n, (2, 200), generator=torch.Generator().manual_seed(0))
    pidx = PairIndex.from_pairs(pairs, n)
    p = pidx.pairs()
    # same multiset of pairs as given, in CSR order
    assert sorted(map(tuple, p.T.tolist())) == sorted(map(tuple, pairs.T.tolist()))
    assert torch.allclose(pidx.logits(z), (z[p[0]] * z[p[1]]).sum(-1))
    w = torch.randn(200, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda z: (pidx.logits(z) * w).sum(), (z,))


def test_uniform_pairs_cover_all_ordered_pairs_evenly():
    n, m = 5, 200_000
    pidx = PairIndex.uniform(n, m, torch.Generator().manual_seed(0))
    p = pidx.pairs()
    counts = torch.bincount(p[0] * n + p[1], minlength=n * n).double()
    expected = m / n**2
    # chi-square over 25 cells: 99.9% quantile with 24 dof is ~51
    assert ((counts - expected) ** 2 / expected).sum() < 51


def test_both_column_terms_of_the_pair_gradient_equal_the_dense_product():
    """The accelerator's scatter and the CPU's SciPy product compute the same ``G^T z`` (repeated pairs too)."""
    from gaescale.sparse import _columns_scatter, _columns_scipy
    n = 30
    pidx = PairIndex.from_pairs(torch.randint(0, n, (2, 300), generator=torch.Generator().manual_seed(1)), n)
    g, z = torch.randn(300, dtype=torch.float64), torch.randn(n, 4, dtype=torch.float64)
    dense = torch.zeros(n, n, dtype=torch.float64).index_put_((pidx.rows(), pidx.cols), g, accumulate=True)
    for column_term in (_columns_scatter, _columns_scipy):
        assert torch.allclose(column_term(pidx, g, z), dense.T @ z)


def test_operators_move_once_and_stay_put_on_their_device():
    g = Graph.from_edge_index(random_edges(20, 35), 20)
    op = g.gcn_operator
    assert op.on(torch.device("cpu")) is op  # already there: no copy
    pidx = PairIndex.from_pairs(torch.tensor([[0, 1], [2, 3]]), 20)
    assert pidx.to("cpu") is pidx


def test_cross_logits_and_their_gradients_against_gathers():
    torch.manual_seed(7)
    n, d = 30, 4
    pairs = torch.randint(0, n, (2, 200))
    u = torch.randn(n, d, dtype=torch.float64, requires_grad=True)
    v = torch.randn(n, d, dtype=torch.float64, requires_grad=True)
    pidx = PairIndex.from_pairs(pairs, n)
    got = pidx.cross_logits(u, v)
    p = pidx.pairs()  # CSR order: the order of the logits
    want = (u[p[0]] * v[p[1]]).sum(1)
    assert torch.allclose(got, want, atol=1e-12)
    g = torch.randn(200, dtype=torch.float64)
    gu, gv = torch.autograd.grad((got * g).sum(), (u, v))
    wu, wv = torch.autograd.grad((want * g).sum(), (u, v))
    assert torch.allclose(gu, wu, atol=1e-12) and torch.allclose(gv, wv, atol=1e-12)
    assert not torch.allclose(pidx.cross_logits(v, u), got)  # not symmetric
