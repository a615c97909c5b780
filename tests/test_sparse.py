import numpy as np
import pytest
import torch

from conftest import random_edges
from gaescale.graph import Graph
from gaescale.sparse import PairIndex, SparseOperator, csr_mm, ordered_pair_logits, spmm, to_torch_csr


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


def test_csr_mm_overwrites_its_new_buffer_even_where_rows_are_empty():
    # csr_mm writes into an uninitialised buffer with beta=0: memory the allocator hands back (here just freed,
    # full of NaN) must not show through, on empty rows and on a matrix with no entries at all
    import scipy.sparse as sp
    dense = np.zeros((6, 5), np.float32)
    dense[0, 1], dense[2, 4], dense[2, 0], dense[5, 3] = 1.5, -2.0, 0.5, 3.0  # rows 1, 3 and 4 empty
    x = torch.randn(5, 4)
    for m in (dense, np.zeros((6, 5), np.float32)):
        for index in (torch.int32, torch.int64):
            csr = to_torch_csr(sp.csr_matrix(m), torch.float32)
            csr = torch.sparse_csr_tensor(csr.crow_indices().to(index), csr.col_indices().to(index), csr.values(),
                                          csr.shape, check_invariants=False)
            torch.full((6, 4), float("nan"))  # freed at once: the block the next buffer may reuse
            assert torch.allclose(csr_mm(csr, x), torch.from_numpy(m) @ x, rtol=0, atol=1e-6)


def test_pair_logits_match_gather_and_gradcheck():
    n = 40
    z = torch.randn(n, 5, dtype=torch.float64, requires_grad=True)
    pairs = torch.randint(0, n, (2, 200), generator=torch.Generator().manual_seed(0))
    pidx = PairIndex.from_pairs(pairs, n)
    p = pidx.pairs()
    # same multiset of pairs as given, in CSR order
    assert sorted(map(tuple, p.T.tolist())) == sorted(map(tuple, pairs.T.tolist()))
    # the logits are written over an uninitialised buffer: memory just freed full of NaN must not show through
    torch.full((200,), float("nan"), dtype=torch.float64)
    assert torch.allclose(pidx.logits(z), (z[p[0]] * z[p[1]]).sum(-1))
    w = torch.randn(200, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda z: (pidx.logits(z) * w).sum(), (z,))


@pytest.mark.parametrize("n,m", [(40, 200), (3, 10), (3, 40)])  # 10 and 40 pairs: more than the 3 x 3 pattern holds
def test_pairs_in_any_order_have_the_gathered_logits_and_gradients(n, m):
    gen = torch.Generator().manual_seed(n + m)
    z = torch.randn(n, 5, dtype=torch.float64, requires_grad=True)
    pairs = torch.randint(0, n, (2, m), generator=gen)
    metric = torch.tensor([1.0, 1, 1, 1, -1], dtype=torch.float64)
    w = torch.randn(m, dtype=torch.float64)
    for sign in (None, metric):
        got = ordered_pair_logits(z, pairs, sign)
        want = (z[pairs[0]] * (1 if sign is None else sign) * z[pairs[1]]).sum(-1)  # in the given order
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(torch.autograd.grad((got * w).sum(), z)[0],
                                   torch.autograd.grad((want * w).sum(), z)[0])


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
    from gaescale.sparse import columns_scatter, columns_scipy
    n = 30
    pidx = PairIndex.from_pairs(torch.randint(0, n, (2, 300), generator=torch.Generator().manual_seed(1)), n)
    g, z = torch.randn(300, dtype=torch.float64), torch.randn(n, 4, dtype=torch.float64)
    dense = torch.zeros(n, n, dtype=torch.float64).index_put_((pidx.rows(), pidx.cols), g, accumulate=True)
    for column_term in (columns_scatter, columns_scipy):
        assert torch.allclose(column_term(pidx, g, z), dense.T @ z)


def test_the_column_term_cut_into_row_ranges_adds_up_to_the_dense_product():
    """SciPy's product run on row ranges in threads: every cut (more parts than rows, empty rows) gives ``G^T z``."""
    from gaescale.sparse import columns_scipy
    n, m = 50, 300_000  # enough pairs that the product is cut (64Ki pairs per part at least)
    pairs = torch.randint(0, n, (2, m), generator=torch.Generator().manual_seed(2))
    pairs[0][pairs[0] == 7] = 8  # row 7 empty
    pidx = PairIndex.from_pairs(pairs, n)
    g, z = torch.randn(m, dtype=torch.float64), torch.randn(n, 4, dtype=torch.float64)
    dense = torch.zeros(n, n, dtype=torch.float64).index_put_((pidx.rows(), pidx.cols), g, accumulate=True)
    for parts in (1, 2, 3, 4):
        assert torch.allclose(columns_scipy(pidx, g, z, parts), dense.T @ z)


def test_a_kept_transpose_gives_the_dense_column_product_and_the_same_gradients():
    """``G^T z`` over the kept transpose (repeated pairs, self pairs, an empty row and an empty column) against the
    dense product; the logits' gradients through it pass gradcheck, plain, signed and crossed."""
    n, m = 30, 400
    pairs = torch.randint(0, n, (2, m), generator=torch.Generator().manual_seed(4))
    pairs[0][pairs[0] == 3] = 4  # row 3 empty
    pairs[1][pairs[1] == 9] = 10  # column 9 empty
    pairs[:, :5] = torch.tensor([[1, 2, 5, 5, 5], [1, 2, 6, 6, 6]])  # self pairs, a repeated pair
    pidx = PairIndex.from_pairs(pairs, n)
    kept = PairIndex.from_pairs(pairs, n).keep_transpose()
    assert kept.keep_transpose() is kept
    g, z = torch.randn(m, dtype=torch.float64), torch.randn(n, 4, dtype=torch.float64)
    dense = torch.zeros(n, n, dtype=torch.float64).index_put_((pidx.rows(), pidx.cols), g, accumulate=True)
    torch.testing.assert_close(kept.columns(g, z), dense.T @ z)
    w = torch.randn(m, dtype=torch.float64)
    metric = torch.tensor([1.0, 1, 1, -1], dtype=torch.float64)
    z.requires_grad_(True)
    u = torch.randn(n, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda z: (kept.logits(z) * w).sum(), (z,))
    assert torch.autograd.gradcheck(lambda z: (kept.logits(z, metric) * w).sum(), (z,))
    assert torch.autograd.gradcheck(lambda u, z: (kept.cross_logits(u, z) * w).sum(), (u, z))
    for f in (lambda p: p.logits(z, metric), lambda p: p.cross_logits(u, z)):
        want = torch.autograd.grad((f(pidx) * w).sum(), (u, z), allow_unused=True)
        got = torch.autograd.grad((f(kept) * w).sum(), (u, z), allow_unused=True)
        for a, b in zip(got, want):
            assert (a is None and b is None) or torch.allclose(a, b)


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


def test_pair_indices_are_int32_where_they_fit_and_give_the_int64_numbers():
    """int32 patterns (half the bytes) compute what int64 ones do; the index dtype only changes past 2^31 - 1."""
    from gaescale.sparse import index_dtype
    assert index_dtype(2**31 - 2, 10) == torch.int32 and index_dtype(2**31 - 1, 10) == torch.int64
    assert index_dtype(10, 2**31) == torch.int64
    n, m = 1000, 50_000
    gen = torch.Generator().manual_seed(3)
    pidx = PairIndex.from_pairs(torch.randint(0, n, (2, m), generator=gen), n)
    assert pidx.indptr.dtype == pidx.cols.dtype == torch.int32 and pidx.pairs().dtype == torch.int64
    wide = PairIndex(pidx.indptr, pidx.cols, n)
    wide.indptr, wide.cols = pidx.indptr.long(), pidx.cols.long()  # what a graph past 2^31 - 1 pairs would hold
    z = torch.randn(n, 6, requires_grad=True)
    w = torch.randn(m)
    got = [(p.logits(z) * w).sum() for p in (pidx, wide)]
    torch.testing.assert_close(got[0], got[1])
    torch.testing.assert_close(*(torch.autograd.grad(s, z)[0] for s in got))


def test_uniform_pairs_are_the_draws_of_two_int64_randint_calls():
    """Drawn in int32, the pairs are the same as drawn in int64 from the same generator (runs stay reproducible)."""
    n, m = 1000, 20_000
    pidx = PairIndex.uniform(n, m, torch.Generator().manual_seed(4))
    gen = torch.Generator().manual_seed(4)
    i, j = torch.randint(0, n, (m,), generator=gen), torch.randint(0, n, (m,), generator=gen)
    assert pidx.cols.dtype == torch.int32 and torch.equal(pidx.cols.long(), j)
    assert torch.equal(pidx.indptr.diff().long(), torch.bincount(i, minlength=n))


def test_signed_logits_gradcheck_and_keep_only_z_for_backward():
    """The bias decoder's logits ``z_i^T M z_j`` (signs ``M``): the gradient ``M (G z + G^T z)`` passes gradcheck,
    with and without the caller's ``z M``, and backward keeps ``z`` and not ``z M`` (one ``(N, d)`` storage saved)."""
    n, m = 30, 400
    gen = torch.Generator().manual_seed(5)
    z = torch.randn(n, 6, dtype=torch.float64, requires_grad=True)
    metric = torch.tensor([1.0, 1, 1, 1, 1, -1], dtype=torch.float64)
    pidx = PairIndex.from_pairs(torch.randint(0, n, (2, m), generator=gen), n)
    w = torch.randn(m, dtype=torch.float64)
    p = pidx.pairs()
    torch.testing.assert_close(pidx.logits(z, metric), (z[p[0]] * metric * z[p[1]]).sum(-1))
    assert torch.autograd.gradcheck(lambda z: (pidx.logits(z, metric) * w).sum(), (z,))
    assert torch.autograd.gradcheck(lambda z: (pidx.logits(z, metric, scaled=(z * metric).detach()) * w).sum(), (z,))
    saved = {}

    def pack(t):
        if t.dim() == 2:
            saved[t.untyped_storage().data_ptr()] = tuple(t.shape)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        s = pidx.logits(z, metric)
    assert list(saved.values()) == [(n, 6)] and z.untyped_storage().data_ptr() in saved
    torch.testing.assert_close(torch.autograd.grad((s * w).sum(), z)[0],
                               torch.autograd.grad(((z[p[0]] * metric * z[p[1]]).sum(-1) * w).sum(), z)[0])


def test_uniform_pairs_drawn_into_kept_arrays_are_the_same_draws(monkeypatch):
    """UniformPairs draws what PairIndex.uniform draws from the same generator, counting the first nodes a chunk at a
    time (chunks of 1,000 here, the last one short), and draws again into the same arrays."""
    import gaescale.sparse as sparse
    from gaescale.sparse import UniformPairs
    monkeypatch.setattr(sparse, "DRAW_CHUNK", 1000)
    n, m = 300, 4500
    gen = torch.Generator().manual_seed(6)
    i, j = torch.randint(0, n, (m,), generator=gen), torch.randint(0, n, (m,), generator=gen)
    second = (torch.randint(0, n, (m,), generator=gen), torch.randint(0, n, (m,), generator=gen))
    draws = UniformPairs()
    gen = torch.Generator().manual_seed(6)
    first = draws.draw(n, m, gen)
    assert torch.equal(first.cols.long(), j) and torch.equal(first.indptr.diff().long(), torch.bincount(i, minlength=n))
    cols, indptr = first.cols.data_ptr(), first.indptr.data_ptr()
    again = draws.draw(n, m, gen)
    assert again.cols.data_ptr() == cols and again.indptr.data_ptr() == indptr  # the same arrays, overwritten
    assert torch.equal(again.cols.long(), second[1])
    assert torch.equal(again.indptr.diff().long(), torch.bincount(second[0], minlength=n))
    assert draws.draw(n, m + 1, gen).num_pairs == m + 1  # another size: new arrays
    assert PairIndex.uniform(n, 0, gen).num_pairs == 0 and draws.draw(n, 0, gen).indptr.tolist() == [0] * (n + 1)


def test_a_slice_of_a_pair_index_holds_its_pairs_and_weights_in_that_range():
    pairs = torch.tensor([[0, 0, 1, 3, 3, 3, 4], [2, 4, 0, 1, 3, 4, 0]])
    weights = torch.arange(7, dtype=torch.float32)
    idx = PairIndex.from_pairs(pairs, 5, weights)
    for a, b in [(0, 7), (1, 4), (2, 3), (5, 5), (6, 7)]:
        part = idx.slice(a, b)
        assert torch.equal(part.pairs(), pairs[:, a:b]) and torch.equal(part.weights, weights[a:b])
        assert part.indptr.shape == (6,) and part.num_nodes == 5
    for a, b in [(-1, 3), (4, 3), (0, 8)]:
        with pytest.raises(ValueError, match="start <= stop"):
            idx.slice(a, b)
