"""The source/target model: the asymmetric exact dense term and loss against dense references on small graphs,
the encoder against its dense formula, and the decoder's direction."""
import numpy as np
import pytest
import torch

from gaescale.directed.graph import DiGraph
from gaescale.directed.model import DirectedGAE, SourceTarget, SourceTargetEncoder, directed_dense_term, directed_loss
from gaescale.losses import KINDS, pair_weights


@pytest.mark.parametrize("kind", ["bce", "mse", "linear-mse"])
def test_exact_dense_term_against_dense_reference(kind):
    torch.manual_seed(0)
    n, h = 37, 3
    z = torch.randn(n, 2 * h, dtype=torch.float64, requires_grad=True)
    loss = KINDS[kind]
    value = directed_dense_term(z, loss, "exact", block_size=8)  # 8 does not divide 37
    (grad,) = torch.autograd.grad(value, z)
    zr = z.detach().clone().requires_grad_(True)
    ref = loss.l0(zr[:, :h] @ zr[:, h:].T).sum()  # the N x N reference, small on purpose
    (ref_grad,) = torch.autograd.grad(ref, zr)
    assert float(value.detach()) == pytest.approx(float(ref.detach()), rel=1e-10)
    assert torch.allclose(grad, ref_grad, atol=1e-10)
    sym = loss.l0(zr[:, :h] @ zr[:, :h].T).sum()  # the symmetric product would differ
    assert abs(float(sym.detach()) - float(ref.detach())) > 1e-3
    if loss.polynomial_l0:
        closed = directed_dense_term(z.detach(), loss, "closed")
        assert float(closed) == pytest.approx(float(ref.detach()), rel=1e-10)


def test_sampled_dense_term_is_unbiased():
    torch.manual_seed(1)
    n = 20
    z = torch.randn(n, 4, dtype=torch.float64)
    exact = float(directed_dense_term(z, KINDS["bce"], "exact"))
    gen = torch.Generator().manual_seed(0)
    est = np.mean([float(directed_dense_term(z, KINDS["bce"], "sampled", num_samples=400, generator=gen))
                   for _ in range(200)])
    assert est == pytest.approx(exact, rel=0.02)


@pytest.mark.parametrize("weighting", ["balanced", "gae", "none"])
def test_loss_against_dense_reference(weighting):
    torch.manual_seed(2)
    n, h = 12, 2
    edges = torch.tensor([[0, 1, 2, 3, 5, 7, 9, 9], [1, 0, 4, 2, 6, 8, 1, 3]])
    z = torch.randn(n, 2 * h, dtype=torch.float64)
    a = torch.zeros(n, n, dtype=torch.float64)
    a[edges[0], edges[1]] = 1
    s = z[:, :h] @ z[:, h:].T
    w0, w1 = pair_weights(weighting, n, edges.shape[1])
    loss = KINDS["bce"]
    ref = (a * w1 * loss.l1(s) + (1 - a) * w0 * loss.l0(s)).sum()
    got = directed_loss(z, edges, kind="bce", dense="exact", weighting=weighting)
    assert float(got) == pytest.approx(float(ref), rel=1e-10)
    flipped = directed_loss(z, edges.flip(0), kind="bce", dense="exact", weighting=weighting)
    assert abs(float(flipped) - float(ref)) > 1e-6  # direction matters


def test_encoder_against_its_dense_formula():
    torch.manual_seed(3)
    n, f = 9, 5
    ei = np.array([[0, 1, 2, 3, 4, 5, 6, 7, 0], [1, 2, 3, 4, 5, 6, 7, 8, 5]])
    g = DiGraph.from_edge_index(ei, n)
    a_hat = g.operator.csr.to_dense()
    x = torch.randn(n, f)
    enc = SourceTargetEncoder(f, [4, 3], num_nodes=n)
    for lin in [*enc.source, *enc.target]:
        torch.nn.init.normal_(lin.bias)
    out = enc(x, g)
    s1 = a_hat @ x @ enc.source[0].weight.T + enc.source[0].bias
    t1 = a_hat.T @ x @ enc.target[0].weight.T + enc.target[0].bias
    s2 = a_hat @ t1.relu() @ enc.source[1].weight.T + enc.source[1].bias
    t2 = a_hat.T @ s1.relu() @ enc.target[1].weight.T + enc.target[1].bias
    assert out.shape == (n, 6)
    assert torch.allclose(out, torch.cat([s2, t2], 1), atol=1e-5)


def test_symmetric_part_against_its_dense_formula_and_in_the_logits():
    torch.manual_seed(5)
    n, f = 9, 5
    ei = np.array([[0, 1, 2, 3, 4, 5, 6, 7, 0, 5], [1, 2, 3, 4, 5, 6, 7, 8, 5, 0]])  # 0 -> 5 and 5 -> 0
    g = DiGraph.from_edge_index(ei, n)
    a = np.zeros((n, n), np.float32)
    a[ei[0], ei[1]] = 1
    a_sym = np.maximum(a, a.T) + np.eye(n, dtype=np.float32)  # the undirected graph and its self loops
    d = a_sym.sum(1) ** -0.5
    a_sym = torch.from_numpy(d[:, None] * a_sym * d[None, :])
    x = torch.randn(n, f)
    enc = SourceTargetEncoder(f, [4, 3], num_nodes=n, symmetric=True)
    for lin in [*enc.source, *enc.target, *enc.shared]:
        torch.nn.init.normal_(lin.bias)
    plain = SourceTargetEncoder(f, [4, 3], num_nodes=n)
    plain.load_state_dict({k: v for k, v in enc.state_dict().items() if not k.startswith("shared.")})
    u1 = a_sym @ x @ enc.shared[0].weight.T + enc.shared[0].bias
    u2 = a_sym @ u1.relu() @ enc.shared[1].weight.T + enc.shared[1].bias
    out, st = enc(x, g), plain(x, g)
    assert out.shape == (n, 12)  # [z_s, z_u | z_t, z_u]
    want = torch.cat([st[:, :3], u2, st[:, 3:], u2], 1)
    assert torch.allclose(out, want, atol=1e-5)
    # the logit: z_s_u . z_t_v + z_u . z_v (+ biases); the symmetric part alike both ways
    model = DirectedGAE(enc, num_nodes=n)
    with torch.no_grad():
        model.source_bias.normal_()
        model.target_bias.normal_()
    z = model(x, g)
    pairs = torch.tensor([[0, 5, 2, 8], [5, 0, 7, 1]])
    ref = ((st[pairs[0], :3] * st[pairs[1], 3:]).sum(1) + (u2[pairs[0]] * u2[pairs[1]]).sum(1)
           + model.source_bias[pairs[0]] + model.target_bias[pairs[1]])
    assert torch.allclose(model.logits(z, pairs), ref, atol=1e-4)
    assert not torch.allclose(model.logits(z, pairs), model.logits(z, pairs.flip(0)))
    # featureless: a third (N, h1) table for the symmetric part
    enc0 = SourceTargetEncoder(None, [4], num_nodes=n, symmetric=True)
    assert enc0.shared[0].weight.shape == (4, n)
    u = a_sym @ enc0.shared[0].weight.T + enc0.shared[0].bias
    assert torch.allclose(enc0(None, g)[:, 4:8], u, atol=1e-5)


def test_featureless_model_with_biases_decodes_asymmetrically():
    torch.manual_seed(4)
    n = 6
    g = DiGraph.from_edge_index(np.array([[0, 1, 2], [1, 2, 3]]), n)
    model = DirectedGAE(SourceTargetEncoder(None, [3], num_nodes=n), num_nodes=n)
    with torch.no_grad():
        model.source_bias.copy_(torch.arange(n, dtype=torch.float32))
        model.target_bias.copy_(-torch.arange(n, dtype=torch.float32) * 10)
    z = model.embed(None, g)
    assert z.shape == (n, 2 * (3 + 2))
    zs, zt = z[:, :3], z[:, 5:8]
    pairs = torch.tensor([[0, 1, 4], [1, 0, 2]])
    want = (zs[pairs[0]] * zt[pairs[1]]).sum(1) + model.source_bias[pairs[0]] + model.target_bias[pairs[1]]
    assert torch.allclose(model.logits(z, pairs), want, atol=1e-5)
    assert torch.allclose(SourceTarget()(z[pairs[0]], z[pairs[1]]), want, atol=1e-5)
    assert not torch.allclose(model.logits(z, pairs), model.logits(z, pairs.flip(0)))


def test_gravity_decoder_and_its_sampled_loss():
    from gaescale.directed.model import Gravity
    from gaescale.errors import ParameterError
    zu = torch.tensor([[0.0, 0.0, 5.0], [1.0, 1.0, -1.0]])
    zv = torch.tensor([[3.0, 4.0, 2.0], [1.0, 1.0, 0.5]])
    got = Gravity(lam=2.0, eps=0.0)(zu[:1], zv[:1])
    assert float(got) == pytest.approx(2.0 - 2.0 * np.log(25.0))  # the target's mass, less lam log distance^2
    assert float(Gravity(lam=1.0, eps=0.0)(zv[:1], zu[:1])) == pytest.approx(5.0 - np.log(25.0))  # asymmetric
    torch.manual_seed(5)
    n = 10
    z = torch.randn(n, 3, dtype=torch.float64)
    edges = torch.tensor([[0, 1, 2], [1, 2, 3]])
    dec = Gravity()
    s = dec(z[:, None, :], z[None, :, :])  # (n, n): a small dense reference
    a = torch.zeros(n, n, dtype=torch.float64)
    a[edges[0], edges[1]] = 1
    off = 1 - torch.eye(n, dtype=torch.float64)
    w0, w1 = pair_weights("balanced", n, 3)
    ref = (a * w1 * KINDS["bce"].l1(s) + (1 - a) * off * w0 * KINDS["bce"].l0(s)).sum()
    gen = torch.Generator().manual_seed(0)
    est = np.mean([float(directed_loss(z, edges, dense="sampled", num_samples=200, generator=gen, decoder=dec))
                   for _ in range(200)])
    assert est == pytest.approx(float(ref), rel=0.03)
    with pytest.raises(ParameterError, match="'dense' parameter of directed_loss must be 'sampled'"):
        directed_loss(z, edges, dense="exact", decoder=dec)


def test_filtered_ranking_of_z_s_against_z_t_equals_scoring_every_candidate():
    from gaescale.directed.model import halves
    from gaescale.training.evaluate import filtered_ranking
    torch.manual_seed(6)
    n = 50
    z = torch.randn(n, 8)
    rng = np.random.default_rng(0)
    g = DiGraph.from_edge_index(rng.integers(0, n, (2, 200)), n)
    pos = g.edge_index()[:, ::5]
    zs, zt = halves(z)
    scan = filtered_ranking(zs, pos, [g.out], targets=zt, block=8)
    every = filtered_ranking(z, pos, [g.out], decoder=SourceTarget())
    assert scan.keys() == every.keys()
    for k in scan:
        assert scan[k] == pytest.approx(every[k])
    assert scan != filtered_ranking(zt, pos[::-1].copy(), [g.inn], targets=zs, block=8)  # direction matters


@pytest.mark.parametrize("kind", ["bce", "mse"])
def test_weighted_loss_against_dense_reference(kind):
    from gaescale.sparse import PairIndex
    torch.manual_seed(6)
    n, h = 10, 3
    edges = torch.tensor([[0, 1, 2, 3, 5, 7, 9], [1, 0, 4, 2, 6, 8, 1]])
    w = torch.tensor([0.5, 2.0, 1.0, 3.0, 0.25, 1.5, 0.75], dtype=torch.float64)
    z = torch.randn(n, 2 * h, dtype=torch.float64, requires_grad=True)
    s = z[:, :h] @ z[:, h:].T
    a = torch.zeros(n, n, dtype=torch.float64)
    a[edges[0], edges[1]] = w
    edge = torch.zeros(n, n, dtype=torch.bool)
    edge[edges[0], edges[1]] = True
    w0, w1 = pair_weights("balanced", n, edges.shape[1])
    if kind == "mse":  # the target of an edge is its weight
        per_pair = torch.where(edge, w1 * (torch.sigmoid(s) - a) ** 2, w0 * torch.sigmoid(s) ** 2)
    else:  # BCE weighs the edge's term by its weight
        per_pair = torch.where(edge, -w1 * a * torch.nn.functional.logsigmoid(s),
                               -w0 * torch.nn.functional.logsigmoid(-s))
    ref = per_pair.sum()
    got = directed_loss(z, PairIndex.from_pairs(edges, n, w), kind=kind, dense="exact", weighting="balanced")
    assert float(got.detach()) == pytest.approx(float(ref.detach()), rel=1e-9)
    (g_got,), (g_ref,) = torch.autograd.grad(got, z), torch.autograd.grad(ref, z)
    assert torch.allclose(g_got, g_ref, atol=1e-9)
    ones = directed_loss(z, PairIndex.from_pairs(edges, n, torch.ones(7, dtype=torch.float64)), kind=kind,
                         dense="exact", weighting="balanced")
    plain = directed_loss(z, edges, kind=kind, dense="exact", weighting="balanced")
    assert float(ones.detach()) == pytest.approx(float(plain.detach()), rel=1e-12)
