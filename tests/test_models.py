"""The per-node bias decoder s_ij = z_i . z_j + b_i + b_j against a dense float64 computation written out
directly (not through its two-column form), for every loss kind and dense strategy; and the model that
carries it."""
import numpy as np
import pytest
import torch

from conftest import dense_adjacency, random_edges
from gaescale.encoders import GCN
from gaescale.errors import ParameterError
from gaescale.graph import Graph
from gaescale.losses import KINDS, reconstruction_loss
from gaescale.models import GAE, VGAE, HadamardMLP, bias_metric, decode, split_bias, with_bias
from gaescale.sparse import PairIndex
from test_losses import CASES, dense_reference

N, D = 50, 3


@pytest.fixture(scope="module")
def graph():
    ei = random_edges(N, 120, seed=3)
    return torch.from_numpy(ei), dense_adjacency(ei, N)


def _zb(seed=0):
    g = torch.Generator().manual_seed(seed)
    z = (0.5 * torch.randn(N, D, dtype=torch.float64, generator=g)).requires_grad_()
    b = (0.7 * torch.randn(N, dtype=torch.float64, generator=g)).requires_grad_()
    return z, b


def _biased_logits(z, b):
    return z @ z.T + b[:, None] + b[None, :]  # dense-ok: the N x N reference of a 50-node graph


def test_two_column_form_gives_the_biased_logits_and_round_trips():
    z, b = _zb()
    zb = with_bias(z, b)
    assert zb.shape == (N, D + 2)
    pairs = torch.tensor([[0, 3, 7, 7], [1, 3, 9, 2]])
    ref = _biased_logits(z, b)[pairs[0], pairs[1]]
    assert torch.allclose(decode(zb, pairs, bias_metric(D + 2, dtype=torch.float64)), ref, rtol=1e-12)
    z2, b2 = split_bias(zb)
    assert torch.allclose(z2, z) and torch.allclose(b2, b, atol=1e-12)


@pytest.mark.parametrize("kind,weighting,dense", [(k, w, d) for k, w in CASES for d in ("exact", "sampled")]
                         + [(k, w, "closed") for k, w in CASES if k == "linear-mse"])
def test_biased_loss_value_and_gradient_match_dense_reference(graph, kind, weighting, dense):
    ei, a = graph
    z, b = _zb(1)
    m = 400
    w = "gae" if kind == "weighted-bce" else weighting

    def ours(z, b):
        zb = with_bias(z, b)
        return reconstruction_loss(zb, ei, N, kind=kind, dense=dense, weighting=weighting, block_size=7,
                                   num_samples=m, generator=torch.Generator().manual_seed(4),
                                   metric=bias_metric(D + 2, dtype=torch.float64))

    s = _biased_logits(z, b)
    ref = dense_reference(z, a, kind, w, s=s)
    if dense == "sampled":  # the dense term estimated from the very pairs the loss draws
        loss = KINDS["bce" if kind == "weighted-bce" else kind]
        pairs = PairIndex.uniform(N, m, torch.Generator().manual_seed(4)).pairs()
        p, e = float(N) ** 2, float(a.sum())
        w0 = {"none": 1 / p, "balanced": 1 / p, "gae": (p / (2 * (p - e))) / p}[w]
        ref = ref - w0 * loss.l0(s).sum() + w0 * loss.l0(s[pairs[0], pairs[1]]).sum() * p / m
    got = ours(z, b)
    assert torch.allclose(got, ref, rtol=1e-10, atol=1e-12)
    for g_got, g_ref in zip(torch.autograd.grad(got, (z, b)), torch.autograd.grad(ref, (z, b))):
        assert torch.allclose(g_got, g_ref, rtol=1e-8, atol=1e-12)
    assert torch.autograd.gradcheck(ours, (z, b))


def _graph():
    return Graph.from_edge_index(random_edges(N, 120, seed=3), N)


def test_gae_with_node_bias_returns_two_more_columns_and_subgraph_rows_carry_their_own_bias():
    torch.manual_seed(0)
    model = GAE(GCN(None, [4], num_nodes=N), node_bias=N)
    with torch.no_grad():
        model.node_bias.copy_(torch.arange(N, dtype=torch.float32) / N)
    g = _graph()
    zb = model(None, g)
    assert zb.shape == (N, 6) and model.metric(zb).tolist() == [1, 1, 1, 1, 1, -1]
    z, b = split_bias(zb)
    assert torch.allclose(b, model.node_bias, atol=1e-6)
    rows = np.array([5, 17, 2])
    sub = model.add_bias(z[rows].detach(), rows)
    assert torch.allclose(split_bias(sub)[1], model.node_bias[rows], atol=1e-6)
    p = model.decode(zb, torch.tensor([[0, 1], [2, 3]]))
    ref = torch.sigmoid((z[[0, 1]] * z[[2, 3]]).sum(1) + b[[0, 1]] + b[[2, 3]])
    assert torch.allclose(p, ref, atol=1e-6)
    loss = model.loss(zb, torch.from_numpy(g.edge_index()), generator=torch.Generator().manual_seed(0))
    loss.backward()
    assert model.node_bias.grad is not None and model.node_bias.grad.abs().sum() > 0


def test_without_node_bias_the_model_is_the_plain_inner_product():
    model = GAE(GCN(None, [4], num_nodes=N))
    z = model(None, _graph())
    assert z.shape == (N, 4) and model.metric(z) is None and model.add_bias(z) is z


def test_vgae_evaluation_output_is_the_mean_with_its_bias():
    torch.manual_seed(0)
    model = VGAE(GCN(None, [8], num_nodes=N), node_bias=N)
    model.eval()
    zb = model(None, _graph())
    assert zb.shape == (N, 6) and torch.allclose(zb[:, :4], model.mu)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_bad_node_bias_has_a_named_message(bad):
    with pytest.raises(ValueError, match="The 'node_bias' parameter of GAE must be"):
        GAE(GCN(None, [4], num_nodes=N), node_bias=bad)


def test_hadamard_decoder_loss_value_and_gradient_match_dense_reference(graph):
    """The sampled loss through the MLP decoder equals the dense formula with the MLP's N x N logits, its dense
    term replaced by the estimate from the very pairs drawn; gradcheck in float64 for z and the MLP's weights."""
    ei, a = graph
    torch.manual_seed(0)
    mlp = HadamardMLP(D, 5).double()
    z, _ = _zb(2)
    m = 300

    def ours(z):
        return reconstruction_loss(z, ei, N, kind="bce", dense="sampled", num_samples=m, decoder=mlp,
                                   generator=torch.Generator().manual_seed(6))

    s = mlp(z[:, None, :].expand(N, N, D), z[None, :, :].expand(N, N, D))  # dense-ok: a 50-node reference
    loss = KINDS["bce"]
    pairs = PairIndex.uniform(N, m, torch.Generator().manual_seed(6)).pairs()
    p = float(N) ** 2
    ref = (dense_reference(z, a, "bce", "balanced", s=s) - loss.l0(s).sum() / p
           + loss.l0(s[pairs[0], pairs[1]]).sum() / m)
    got = ours(z)
    assert torch.allclose(got, ref, rtol=1e-10)
    params = (z, *mlp.parameters())
    for g_got, g_ref in zip(torch.autograd.grad(got, params), torch.autograd.grad(ref, params)):
        assert torch.allclose(g_got, g_ref, rtol=1e-8, atol=1e-12)
    assert torch.autograd.gradcheck(ours, (z,))
    with pytest.raises(ParameterError, match="'sampled' with a pair decoder"):
        reconstruction_loss(z, ei, N, dense="exact", decoder=mlp)


def test_hadamard_filtered_ranking_matches_brute_force():
    from conftest import brute_force_ranks
    from gaescale.training.evaluate import filtered_ranking
    torch.manual_seed(1)
    n = 60
    mlp = HadamardMLP(4, 8)
    z = torch.randn(n, 4)
    edges = random_edges(n, 140, seed=4)
    train, held = Graph.from_edge_index(edges[:, :110], n), edges[:, 110:]
    got = filtered_ranking(z, held, [train, held], block=7, batch=6, ks=(1, 10), decoder=mlp)
    with torch.no_grad():
        s = mlp(z[:, None, :].expand(n, n, 4), z[None].expand(n, n, 4)).double().numpy()  # dense-ok: 60 nodes
    ranks = brute_force_ranks(s, held, dense_adjacency(edges, n).numpy())
    assert got["filtered_mrr"] == pytest.approx(np.mean(1 / ranks))
    assert got["filtered_hits@10"] == pytest.approx(np.mean(ranks <= 10))
