import itertools

import pytest
import torch
import torch.nn.functional as F

from gaescale.losses import dense_term, pair_sum, resolve_kind
from gaescale.shifts import ShiftedPairs
from gaescale.sparse import PairIndex

SIZES = [(5, 7), (5, 5), (5, 3), (4, 12), (1, 3), (3, 11)]  # m = K N + R: with and without a window, K = 0, m > N^2


def _every_draw(n: int, m: int):
    """Every draw of ``m`` pairs over ``n`` nodes (all shifts and window starts) of one ShiftedPairs, in turn."""
    k, extra = divmod(m, n)
    draws = ShiftedPairs()
    draws.draw(n, m, torch.Generator().manual_seed(3))  # the node order
    for shifts in itertools.product(range(n), repeat=k + (extra > 0)):
        for start in range(n if extra else 1):
            yield draws.at(n, m, list(shifts), start)


@pytest.mark.parametrize("n, m", SIZES)
def test_every_ordered_pair_is_drawn_equally_often_over_all_shifts(n, m):
    """Unbiased: over every choice of shifts and window start, each of the N^2 ordered pairs (self pairs too) is
    drawn the same number of times, and each draw holds exactly m pairs."""
    counts = torch.zeros(n, n, dtype=torch.int64)
    draws = 0
    for d in _every_draw(n, m):
        p = d.pairs()
        assert p.shape == (2, m) and d.num_pairs == m
        counts.index_put_((p[0], p[1]), torch.ones(m, dtype=torch.int64), accumulate=True)
        draws += 1
    assert (counts == draws * m // (n * n)).all() and draws * m % (n * n) == 0


@pytest.mark.parametrize("n, m", SIZES)
def test_each_node_is_first_and_second_node_of_k_or_k_plus_one_pairs(n, m):
    k, extra = divmod(m, n)
    d = ShiftedPairs().draw(n, m, torch.Generator().manual_seed(1))
    p = d.pairs()
    for side in p:
        c = torch.bincount(side, minlength=n)
        assert int((c == k + 1).sum()) == extra and int((c == k).sum()) == n - extra


def test_the_draws_mean_estimate_is_the_exact_all_pairs_sum():
    """N^2 / m times a draw's sum of l0, averaged over every draw, is the exact dense term (signed logits)."""
    n, m = 5, 7
    z = torch.randn(n, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    metric = torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64)
    loss, _ = resolve_kind("bce", None)
    exact = dense_term(z, loss, "exact", metric=metric)
    estimates = [pair_sum(F.softplus, d.logits(z, metric)) * (n * n / m) for d in _every_draw(n, m)]
    torch.testing.assert_close(torch.stack(estimates).mean(), exact.to(torch.float64))


@pytest.mark.parametrize("n, m", [(9, 31), (9, 27), (9, 4), (3, 40)])
def test_logits_and_gradients_equal_the_gathered_pairs(n, m):
    """Plain, signed and crossed logits against the rows gathered for the drawn pairs; gradcheck through the
    permutation and the written transpose."""
    d = ShiftedPairs().draw(n, m, torch.Generator().manual_seed(n + m))
    p = d.pairs()
    gen = torch.Generator().manual_seed(0)
    z, u = (torch.randn(n, 4, dtype=torch.float64, generator=gen, requires_grad=True) for _ in range(2))
    metric = torch.tensor([1.0, 1, -1, 1], dtype=torch.float64)
    w = torch.randn(m, dtype=torch.float64, generator=gen)
    cases = [(lambda: d.logits(z), lambda: (z[p[0]] * z[p[1]]).sum(1)),
             (lambda: d.logits(z, metric, scaled=z.detach() * metric), lambda: (z[p[0]] * metric * z[p[1]]).sum(1)),
             (lambda: d.cross_logits(u, z), lambda: (u[p[0]] * z[p[1]]).sum(1))]
    for got, want in cases:
        torch.testing.assert_close(got(), want())
        a = torch.autograd.grad((got() * w).sum(), (u, z), allow_unused=True)
        b = torch.autograd.grad((want() * w).sum(), (u, z), allow_unused=True)
        for x, y in zip(a, b):
            assert (x is None) == (y is None) and (x is None or torch.allclose(x, y))
    assert torch.autograd.gradcheck(lambda z: (d.logits(z, metric) * w).sum(), (z,))


@pytest.mark.parametrize("n, m", [(9, 31), (9, 4), (11, 11)])
def test_the_written_transpose_is_the_sorted_one(n, m):
    """The transpose written down for the shifts gives the column product of the one keep_transpose sorts for."""
    index = ShiftedPairs().draw(n, m, torch.Generator().manual_seed(2)).index
    g = torch.randn(m, dtype=torch.float64)
    z = torch.randn(n, 3, dtype=torch.float64)
    dense = torch.zeros(n, n, dtype=torch.float64).index_put_((index.rows(), index.cols.long()), g, accumulate=True)
    torch.testing.assert_close(index.columns(g, z), dense.T @ z)
    sorted_one = PairIndex(index.indptr, index.cols, n).keep_transpose()
    torch.testing.assert_close(index.columns(g, z), sorted_one.columns(g, z))


def test_draws_reuse_their_arrays_and_keep_the_node_order():
    draws, gen = ShiftedPairs(), torch.Generator().manual_seed(0)
    a, b = draws.draw(50, 170, gen), draws.draw(50, 170, gen)
    assert a.index.cols.data_ptr() == b.index.cols.data_ptr() and torch.equal(a.perm, b.perm)
    assert torch.equal(a.perm[a.inverse.long()], torch.arange(50, dtype=a.perm.dtype))
    assert draws.draw(50, 90, gen).perm.data_ptr() == a.perm.data_ptr()  # other pair counts: the same order


def test_shifts_out_of_range_are_refused():
    with pytest.raises(ValueError, match="take 2 shifts"):
        ShiftedPairs().at(5, 7, [1], 0)
    with pytest.raises(ValueError, match="in \\[0, 5\\)"):
        ShiftedPairs().at(5, 7, [1, 5], 0)


def test_a_fresh_drawer_from_a_restored_generator_draws_what_the_unbroken_one_draws():
    """Resuming: the node order comes from the generator's seed, the shifts from its state, so a new ShiftedPairs
    with the generator state saved after the first draw draws the second draw of the unbroken run."""
    gen = torch.Generator().manual_seed(7)
    unbroken = ShiftedPairs()
    unbroken.draw(40, 130, gen)
    state = gen.get_state()
    second = unbroken.draw(40, 130, gen).pairs()
    restored = torch.Generator()
    restored.set_state(state)
    assert torch.equal(ShiftedPairs().draw(40, 130, restored).pairs(), second)
    other = ShiftedPairs().draw(40, 130, torch.Generator().manual_seed(8))
    assert not torch.equal(other.perm, ShiftedPairs().draw(40, 130, torch.Generator().manual_seed(7)).perm)


@pytest.mark.parametrize("n, m", [(6, 20), (3, 122), (4, 4 * 40)])  # few shifts a row, and more than MANY_SHIFTS
def test_a_draw_holds_the_pairs_of_its_shifts_and_window(n, m):
    """(sigma(t), sigma(t + r_k mod N)) for every t and full shift, and for the window's t with the last shift."""
    k, extra = divmod(m, n)
    gen = torch.Generator().manual_seed(m)
    shifts = torch.randint(0, n, (k + (extra > 0),), generator=gen).tolist()
    start = n - 1 if extra else 0  # a window that wraps around
    d = ShiftedPairs().at(n, m, shifts, start)
    sigma = d.perm.long()
    want = [(sigma[t], sigma[(t + r) % n]) for t in range(n) for r in shifts[:k]]
    want += [(sigma[t % n], sigma[(t + shifts[-1]) % n]) for t in range(start, start + extra)]
    assert sorted(map(tuple, d.pairs().T.tolist())) == sorted((int(a), int(b)) for a, b in want)


@pytest.mark.parametrize("n, m", [(9, 31), (9, 4), (11, 22)])
def test_a_draw_without_transpose_holds_the_same_pairs_and_its_shares_add_up_to_it(n, m):
    """ShiftedPairs(transpose=False) draws the pairs the default one draws, keeps no transpose, and the shares of
    consecutive ranges (a rank's share under torchrun) hold the draw's pairs and give its loss and gradient."""
    full = ShiftedPairs().draw(n, m, torch.Generator().manual_seed(3))
    drawer = ShiftedPairs(transpose=False)
    bare = drawer.draw(n, m, torch.Generator().manual_seed(3))
    assert torch.equal(bare.pairs(), full.pairs()) and bare.index.nbytes == (m + n + 1) * 4  # no transpose kept
    kept = ShiftedPairs()
    kept.draw(n, m, torch.Generator().manual_seed(3))
    assert kept.nbytes - drawer.nbytes == (2 * m + n + 1) * 4  # rows_t, order_t, indptr_t (int32)
    cuts = [0, m // 3, m // 3, m - 1, m]
    shares = [bare.share(a, b) for a, b in zip(cuts[:-1], cuts[1:])]
    assert torch.equal(torch.cat([s.pairs() for s in shares], 1), full.pairs())
    z = torch.randn(n, 4, dtype=torch.float64, requires_grad=True)
    metric = torch.tensor([1.0, 1, 1, -1], dtype=torch.float64)
    whole = F.softplus(full.logits(z, metric)).sum()
    parts = sum(F.softplus(s.logits(z, metric)).sum() for s in shares)
    torch.testing.assert_close(parts, whole)
    torch.testing.assert_close(torch.autograd.grad(parts, z)[0], torch.autograd.grad(whole, z)[0])
