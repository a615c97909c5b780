"""Every loss kind x dense strategy against an independent dense float64 computation."""
import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import dense_adjacency, random_edges
from gaescale.errors import ParameterError
from gaescale.losses import KINDS, LOSS_NAMES, reconstruction_loss
from gaescale.sparse import PairIndex

N, D = 60, 4


def dense_reference(z, a, kind, weighting, s=None):
    """sum_ij w(a_ij) l(s_ij, a_ij) written out on the dense N x N matrix (logits ``s``, default ``z z^T``)."""
    s = z @ z.T if s is None else s
    if kind in ("bce", "weighted-bce"):
        per = torch.where(a > 0, F.binary_cross_entropy_with_logits(s, torch.ones_like(s), reduction="none"),
                          F.binary_cross_entropy_with_logits(s, torch.zeros_like(s), reduction="none"))
    elif kind == "mse":
        per = (torch.sigmoid(s) - a) ** 2
    else:
        per = (s - a) ** 2
    p, e = float(s.shape[0]) ** 2, float(a.sum())
    if weighting == "none":
        w1 = w0 = 1 / p
    elif weighting == "balanced":
        w0, w1 = 1 / p, 1 / e
    else:  # GAE paper, written as in its reference code: norm * mean(weighted BCE)
        pos_weight, norm = (p - e) / e, p / (2 * (p - e))
        w0, w1 = norm / p, norm * pos_weight / p
    return (torch.where(a > 0, w1 * per, w0 * per)).sum()


CASES = [(k, w) for k in ("bce", "mse", "linear-mse") for w in ("none", "balanced", "gae")] + [("weighted-bce", None)]


@pytest.fixture(scope="module")
def graph():
    ei = random_edges(N, 150, seed=7)
    return torch.from_numpy(ei), dense_adjacency(ei, N)


def _z(seed=0):
    return (0.5 * torch.randn(N, D, dtype=torch.float64,
                              generator=torch.Generator().manual_seed(seed))).requires_grad_()


@pytest.mark.parametrize("kind,weighting,dense", [(k, w, "exact") for k, w in CASES]
                         + [(k, w, "closed") for k, w in CASES if k == "linear-mse"])
def test_exact_and_closed_match_dense_value_and_gradient(graph, kind, weighting, dense):
    ei, a = graph
    ref_kind_weighting = "gae" if kind == "weighted-bce" else weighting
    z = _z()
    got = reconstruction_loss(z, ei, N, kind=kind, dense=dense, weighting=weighting, block_size=7)
    ref = dense_reference(z, a, kind, ref_kind_weighting)
    assert torch.allclose(got, ref, rtol=1e-10, atol=1e-12)
    g_got, = torch.autograd.grad(got, z)
    g_ref, = torch.autograd.grad(ref, z)
    assert torch.allclose(g_got, g_ref, rtol=1e-8, atol=1e-12)
    assert torch.autograd.gradcheck(
        lambda z: reconstruction_loss(z, ei, N, kind=kind, dense=dense, weighting=weighting, block_size=13), (z,))


@pytest.mark.parametrize("kind,weighting", CASES)
def test_sampled_equals_formula_on_its_own_pairs_and_gradcheck(graph, kind, weighting):
    ei, a = graph
    z, m = _z(1), 500
    got = reconstruction_loss(z, ei, N, kind=kind, dense="sampled", weighting=weighting, num_samples=m,
                              generator=torch.Generator().manual_seed(5))
    pairs = PairIndex.uniform(N, m, torch.Generator().manual_seed(5)).pairs()
    # independent: dense term from the explicit pairs, edge term from the dense matrix
    loss = KINDS["bce" if kind == "weighted-bce" else kind]
    s = z @ z.T
    w = "gae" if kind == "weighted-bce" else weighting
    full = dense_reference(z, a, kind, w)
    all_pairs_l0 = loss.l0(s).sum()
    p, e = float(N) ** 2, float(a.sum())
    w0 = {"none": 1 / p, "balanced": 1 / p, "gae": (p / (2 * (p - e))) / p}[w]
    estimate = (full - w0 * all_pairs_l0) + w0 * loss.l0(s[pairs[0], pairs[1]]).sum() * p / m
    assert torch.allclose(got, estimate, rtol=1e-10)
    assert torch.autograd.gradcheck(
        lambda z: reconstruction_loss(z, ei, N, kind=kind, weighting=weighting, num_samples=m,
                                      generator=torch.Generator().manual_seed(5)), (z,))


@pytest.mark.parametrize("kind", ["bce", "mse"])
def test_sampled_is_unbiased(graph, kind):
    ei, a = graph
    z = _z(2).detach()
    exact = reconstruction_loss(z, ei, N, kind=kind, dense="exact").item()
    gen = torch.Generator().manual_seed(11)
    draws = torch.tensor([reconstruction_loss(z, ei, N, kind=kind, num_samples=200, generator=gen).item()
                          for _ in range(2000)])
    se = draws.std().item() / math.sqrt(len(draws))
    assert abs(draws.mean().item() - exact) < 3 * se
    assert se > 0


def test_edges_ordered_equals_undirected(graph):
    ei, _ = graph
    z = _z(3)
    both = torch.cat([ei, ei.flip(0)], 1)
    a = reconstruction_loss(z, ei, N, dense="exact", edges="undirected")
    b = reconstruction_loss(z, both, N, dense="exact", edges="ordered")
    assert torch.allclose(a, b)


@pytest.mark.filterwarnings("ignore:kind='mse' without weighting")
def test_self_loops_gradient_matches_the_dense_reference():
    """The self pairs' share is read before the edge term writes its gradient over the logits (pair_sum's
    overwrite): the gradient is the dense computation's."""
    z = _z(4).requires_grad_()
    pairs = torch.tensor([[0, 3, 5, 1], [0, 3, 9, 7]])
    got = reconstruction_loss(z, pairs, N, kind="mse", dense="exact", weighting="none")
    (g,) = torch.autograd.grad(got, z)
    expected = dense_reference(z, dense_adjacency(pairs.numpy(), N), "mse", "none")
    (g_ref,) = torch.autograd.grad(expected, z)
    assert torch.allclose(got, expected) and torch.allclose(g, g_ref)


@pytest.mark.filterwarnings("ignore:kind='mse' without weighting")
def test_self_loops_count_once(graph):
    z = _z(4)
    loops = torch.tensor([[0, 3, 5], [0, 3, 9]])
    a = dense_adjacency(loops.numpy(), N)
    got = reconstruction_loss(z, loops, N, kind="mse", dense="exact", weighting="none")
    assert torch.allclose(got, dense_reference(z, a, "mse", "none"))


def test_prebuilt_pair_index_gives_same_loss(graph):
    ei, _ = graph
    z = _z(5)
    a = reconstruction_loss(z, ei, N, dense="exact")
    b = reconstruction_loss(z, PairIndex.from_pairs(ei, N), N, dense="exact")
    assert torch.allclose(a, b)


def test_bce_uses_a_stable_form_for_large_logits():
    z = torch.tensor([[30.0], [30.0], [-30.0]], requires_grad=True)
    ei = torch.tensor([[0], [2]])
    out = reconstruction_loss(z, ei, 3, dense="exact", weighting="none")
    out.backward()
    assert torch.isfinite(out) and torch.isfinite(z.grad).all()
    assert out.item() > 50  # softplus(900) ~ 900: not clipped by an epsilon inside a log


def test_unweighted_loss_on_sparse_graph_warns(graph):
    ei, _ = graph
    big = torch.cat([ei, torch.tensor([[0], [999]])], 1)
    with pytest.warns(UserWarning, match="weighting='balanced'"):
        reconstruction_loss(torch.randn(1000, 2), big, 1000, weighting="none")


@pytest.mark.parametrize("kwargs,match", [
    (dict(kind="hinge"), "'kind' parameter of reconstruction_loss must be one of"),
    (dict(dense="closed"), "'dense' parameter"),
    (dict(dense="blocks"), "'dense' parameter"),
    (dict(weighting="pos"), "'weighting' parameter"),
    (dict(kind="weighted-bce", weighting="none"), "'weighting' parameter"),
    (dict(edges="both"), "'edges' parameter"),
])
def test_bad_parameters_have_named_messages(graph, kwargs, match):
    ei, _ = graph
    with pytest.raises(ParameterError, match=match):
        reconstruction_loss(_z(), ei, N, **kwargs)


def test_bad_edge_index_shape_and_range():
    z = torch.randn(4, 2)
    with pytest.raises(ParameterError, match="shape \\(2, E\\)"):
        reconstruction_loss(z, torch.zeros(3, 5, dtype=torch.long), 4)
    with pytest.raises(ParameterError, match="node indices in \\[0, 4\\)"):
        reconstruction_loss(z, torch.tensor([[0], [4]]), 4)


def test_every_loss_name_is_tested():
    tested = {k for k, _ in CASES}
    assert tested == set(LOSS_NAMES)


MEMORY_PROBE = """
import sys, psutil, torch
from gaescale.losses import KINDS, dense_term
from gaescale.run.memory import peak_rss_bytes
torch.set_num_threads(1)
z = (0.3 * torch.randn(20_000, 4)).requires_grad_()
dense_term(z[:2000].detach().requires_grad_(), KINDS["bce"], "exact").backward()  # warm up lazy initialisation
base = psutil.Process().memory_info().rss
dense_term(z, KINDS["bce"], "exact", memory_budget=int(sys.argv[1])).backward()
print(peak_rss_bytes() - base)
"""


@pytest.mark.slow
def test_exact_dense_term_memory_stays_within_budget_at_20k_nodes():
    """Peak RSS growth (a fresh process) while computing value and gradient over 4e8 pairs: the (N, N) scores
    would take 1.6 GB, one (1024, N) block of rows 82 MB, against a budget of 32 MiB."""
    import subprocess
    import sys
    budget = 32 * 2**20
    # A fixed mmap threshold makes glibc return freed tiles to the OS at once, so RSS tracks live memory
    # (with its default, adaptive threshold the peak wanders by tens of MB between identical runs).
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="1048576", MALLOC_ARENA_MAX="1")
    out = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(budget)], capture_output=True, text=True,
                         check=True, env=env)
    extra = int(out.stdout.strip().splitlines()[-1])
    # budget for the tiles, plus the (N, d) gradient and autograd's copies of it (~1 MB each here)
    assert extra < budget + 8 * 2**20, extra


@pytest.mark.parametrize("kind", ["bce", "mse", "linear-mse"])
def test_exact_dense_shards_add_up_to_the_whole_term(kind):
    """Data parallel: K processes each compute one shard (row blocks k, k + K, ...) of the exact term."""
    from gaescale.losses import dense_term
    z = (0.3 * torch.randn(230, 5, dtype=torch.float64)).requires_grad_()
    whole = dense_term(z, KINDS[kind], "exact", block_size=32)
    g_whole, = torch.autograd.grad(whole, z)
    for k in (2, 3, 9):  # 8 row blocks: 9 shards leave one empty
        shares = [dense_term(z, KINDS[kind], "exact", block_size=32, shard=(r, k)) for r in range(k)]
        grads = [torch.autograd.grad(s, z)[0] for s in shares]
        assert torch.allclose(sum(shares), whole, rtol=1e-12)
        assert torch.allclose(sum(grads), g_whole, rtol=1e-10, atol=1e-12)
        assert (shares[-1].item() == 0.0) == (k == 9)


# ---------------------------------------------------------------- weighted graphs (--weighted)

def weighted_dense_reference(z, wmat, kind, weighting):
    """The weighted loss on the dense N x N matrix: an edge (w_ij > 0) of weight w has the target w for the MSE
    kinds and the BCE term w * l1; the pair weights (w0, w1) count the edges, not their weights."""
    s = z @ z.T
    a = (wmat > 0).double()
    if kind == "bce":
        per = torch.where(a > 0, wmat * F.softplus(-s), F.softplus(s))
    elif kind == "mse":
        per = (torch.sigmoid(s) - wmat) ** 2
    else:
        per = (s - wmat) ** 2
    p, e = float(s.shape[0]) ** 2, float(a.sum())
    w0, w1 = {"none": (1 / p, 1 / p), "balanced": (1 / p, 1 / e),
              "gae": (p / (2 * (p - e)) / p, p / (2 * (p - e)) * (p - e) / e / p)}[weighting]
    return torch.where(a > 0, w1 * per, w0 * per).sum()


@pytest.fixture(scope="module")
def weighted_graph(graph):
    ei, _ = graph
    w = torch.from_numpy(np.random.default_rng(3).uniform(0.1, 3.0, ei.shape[1]))
    wmat = torch.zeros(N, N, dtype=torch.float64)
    wmat[ei[0], ei[1]] = w.double()
    wmat[ei[1], ei[0]] = w.double()
    return ei, w, wmat


@pytest.mark.parametrize("kind,weighting", [(k, w) for k in ("bce", "mse", "linear-mse") for w in ("none", "balanced",
                                                                                                     "gae")])
def test_weighted_loss_matches_dense_sum_over_all_pairs(weighted_graph, kind, weighting):
    ei, w, wmat = weighted_graph
    z = _z(1)
    got = reconstruction_loss(z, ei, N, kind=kind, dense="exact", weighting=weighting, block_size=7, edge_weight=w)
    ref = weighted_dense_reference(z, wmat, kind, weighting)
    assert torch.allclose(got, ref, rtol=1e-6, atol=1e-9)  # the weights are float32
    g_got, = torch.autograd.grad(got, z)
    g_ref, = torch.autograd.grad(ref, z)
    assert torch.allclose(g_got, g_ref, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("kind", ["bce", "mse", "linear-mse"])
@pytest.mark.parametrize("dense", ["exact", "sampled"])
def test_weights_of_one_give_the_unweighted_loss(graph, kind, dense):
    ei, _ = graph
    z = _z(2)
    ones = torch.ones(ei.shape[1])
    plain = reconstruction_loss(z, ei, N, kind=kind, dense=dense, generator=torch.Generator().manual_seed(5))
    weighted = reconstruction_loss(z, PairIndex.from_pairs(ei, N, ones), N, kind=kind, dense=dense,
                                   generator=torch.Generator().manual_seed(5))
    assert torch.allclose(plain, weighted, rtol=1e-12, atol=0)


def test_weights_change_the_loss_and_the_index_keeps_them_with_their_pairs(weighted_graph):
    ei, w, wmat = weighted_graph
    z = _z(3)
    shuffled = torch.randperm(ei.shape[1], generator=torch.Generator().manual_seed(0))
    a = reconstruction_loss(z, ei, N, kind="mse", dense="exact", edge_weight=w)
    b = reconstruction_loss(z, ei[:, shuffled], N, kind="mse", dense="exact", edge_weight=w[shuffled])
    plain = reconstruction_loss(z, ei, N, kind="mse", dense="exact")
    assert torch.allclose(a, b, rtol=1e-12) and not torch.allclose(a, plain, rtol=1e-3)


@pytest.mark.parametrize("weights,match", [(torch.ones(3), r"must be a \(150,\) tensor"),
                                           (torch.full((150,), -1.0), "must be finite weights >= 0")])
def test_bad_edge_weights_are_named(graph, weights, match):
    with pytest.raises(ParameterError, match=match):
        reconstruction_loss(_z(), graph[0], N, dense="exact", edge_weight=weights)


@pytest.mark.parametrize("kind", ["bce", "mse", "linear-mse"])
def test_pair_sum_in_chunks_gives_the_value_and_gradient_of_the_plain_sum(kind, monkeypatch):
    """pair_sum runs its elementwise loss over chunks (7 pairs here, so 1,000 pairs make 143 of them, the last
    short) and keeps only df/ds: its value and gradient are those of autograd through ``f(s, w).sum()``."""
    from gaescale import losses
    monkeypatch.setattr(losses, "PAIR_CHUNK", 7)
    pl = losses.KINDS[kind]
    s = (3 * torch.randn(1000, dtype=torch.float64)).requires_grad_()
    w = torch.rand(1000, dtype=torch.float64)

    def f(s, w):
        return 0.3 * pl.l1w(s, w) - 1.7 * pl.l0(s)

    value = losses.pair_sum(f, s, (w,))
    (grad,) = torch.autograd.grad(value, s)
    expected = f(s, w).sum()
    (expected_grad,) = torch.autograd.grad(expected, s)
    assert torch.allclose(value, expected, rtol=1e-12) and torch.allclose(grad, expected_grad, rtol=1e-12)
    with torch.no_grad():
        assert torch.allclose(losses.pair_sum(pl.l0, s), pl.l0(s).sum(), rtol=1e-12)


def test_pair_sum_overwrite_writes_the_gradient_over_the_logits(monkeypatch):
    """With overwrite=True the logits' own buffer holds df/ds after the forward (no second (m,) buffer), and the value
    and gradient are the plain sum's; without it the logits are left as they were."""
    from gaescale import losses
    monkeypatch.setattr(losses, "PAIR_CHUNK", 7)
    pl = losses.KINDS["bce"]
    base = 3 * torch.randn(100, dtype=torch.float64)
    leaf = base.clone().requires_grad_()
    s = leaf * 1.0  # a fresh buffer that nothing else reads, as the logits of PairIndex.logits
    value = losses.pair_sum(pl.l0, s, overwrite=True)
    assert torch.allclose(s.detach(), torch.sigmoid(base), rtol=1e-12)  # d softplus / ds, over s itself
    (grad,) = torch.autograd.grad(value, leaf)
    assert torch.allclose(value, pl.l0(base).sum(), rtol=1e-12) and torch.allclose(grad, torch.sigmoid(base))
    kept = base.clone().requires_grad_()
    losses.pair_sum(pl.l0, kept)
    assert torch.equal(kept.detach(), base)


def test_pair_sum_of_two_inputs_gives_both_gradients_and_overwrites_only_the_one_it_may(monkeypatch):
    """offset_term, sum w (l0(e + g) - l0(e)), in chunks of 7: its value and the gradients in e and g are autograd's
    through the plain expression; with overwrite=(True, False), e's buffer holds its gradient and g is left alone."""
    from gaescale import losses
    monkeypatch.setattr(losses, "PAIR_CHUNK", 7)
    pl = losses.KINDS["bce"]
    gen = torch.Generator().manual_seed(3)
    e0 = 3 * torch.randn(100, generator=gen, dtype=torch.float64)
    g0 = torch.rand(100, generator=gen, dtype=torch.float64)
    w = torch.rand(100, generator=gen, dtype=torch.float64)
    e_leaf, g_leaf = e0.clone().requires_grad_(), g0.clone().requires_grad_()
    e, g = e_leaf * 1.0, g_leaf * 1.0
    value = losses.offset_term(pl, e, g, w, overwrite=(True, False))
    assert torch.equal(g.detach(), g0)
    de_expected = w * (torch.sigmoid(e0 + g0) - torch.sigmoid(e0))
    assert torch.allclose(e.detach(), de_expected, rtol=1e-12)
    ge, gg = torch.autograd.grad(value, (e_leaf, g_leaf))
    ref = (w * (pl.l0(e0 + g0) - pl.l0(e0))).sum()
    assert torch.allclose(value, ref, rtol=1e-12)
    assert torch.allclose(ge, de_expected, rtol=1e-12) and torch.allclose(gg, w * torch.sigmoid(e0 + g0), rtol=1e-12)
