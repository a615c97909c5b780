import numpy as np
import pytest
import torch

from conftest import dense_adjacency, random_edges
from gaescale.encoders import GCN, SAGE, linear_encoder
from gaescale.errors import ParameterError
from gaescale.graph import Graph
from gaescale.models import GAE, VGAE
from gaescale.outputs import MappedBuffers

N = 30


@pytest.fixture
def graph():
    ei = random_edges(N, 70, seed=4)
    return Graph.from_edge_index(ei, N), ei


def dense_gcn(model, x, a_hat):
    h = x
    for i, (lin, b) in enumerate(zip(model.lins, model.biases)):
        h = a_hat @ h @ lin.weight.T.double() + b.double()
        if i < len(model.layers) - 1:
            h = torch.relu(h)
    return h


def _a_hat(ei):
    a = dense_adjacency(ei, N) + torch.eye(N, dtype=torch.float64)
    d = a.sum(1).rsqrt()
    return d[:, None] * a * d[None, :]


@pytest.mark.parametrize("dims", [[16, 16, 8], [4, 32, 2], [5]])
def test_gcn_matches_dense_reference(graph, dims):
    g, ei = graph
    torch.manual_seed(0)
    model = GCN(6, dims)
    x = torch.randn(N, 6)
    ref = dense_gcn(model, x.double(), _a_hat(ei))
    assert torch.allclose(model(x, g).double(), ref, atol=1e-5)
    # gradients flow to every parameter
    model(x, g).square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_a_hidden_layer_of_equal_widths_saves_no_activation_beyond_its_input(graph):
    # GCN 8 -> 16 -> 16 -> 8: backward needs each hidden ReLU's output (the next linear map's input, the ReLU's own
    # backward) and nothing else of width 16: A (h W) keeps no A h, which W (A h) would keep besides h
    g, _ = graph
    model = GCN(8, [16, 16, 8])
    saved = {}

    def pack(t):
        if t.dim() == 2 and t.shape == (N, 16):
            saved[t.untyped_storage().data_ptr()] = t
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        z = model(torch.randn(N, 8), g)
    assert len(saved) == 2  # the two hidden layers' outputs
    z.square().sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_featureless_gcn_is_identity_features(graph):
    g, ei = graph
    torch.manual_seed(0)
    model = GCN(None, [8, 4], num_nodes=N)
    ref = dense_gcn(model, torch.eye(N, dtype=torch.float64), _a_hat(ei))
    assert torch.allclose(model(None, g).double(), ref, atol=1e-5)


def test_cached_first_layer_follows_in_place_changes(graph):
    g, _ = graph
    model = GCN(3, [4])
    x = torch.randn(N, 3)
    before = model(x, g).detach().clone()
    x.mul_(2.0)
    after = model(x, g)
    assert torch.allclose(after - model.biases[0], 2 * (before - model.biases[0]), atol=1e-5)


def test_gae_accepts_a_user_encoder(graph):
    g, ei = graph

    class MLP(torch.nn.Module):  # ignores the graph entirely: still a valid encoder
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)

        def forward(self, x, graph):
            return self.lin(x)

    model = GAE(MLP())
    z = model(torch.randn(N, 3), g)
    loss = model.loss(z, torch.from_numpy(ei))
    loss.backward()
    assert z.shape == (N, 2) and model.encoder.lin.weight.grad is not None
    p = model.decode(z, torch.tensor([[0, 1], [2, 3]]))
    assert p.shape == (2,) and ((p > 0) & (p < 1)).all()


@pytest.mark.parametrize("args,kwargs,name", [((3, []), {}, "dims"), ((3, [0]), {}, "dims"),
                                              ((None, [4]), {}, "num_nodes"), ((0, [4]), {}, "in_dim"),
                                              ((3, [4]), {"dropout": 1.0}, "dropout")])
def test_bad_dims(args, kwargs, name):
    with pytest.raises(ParameterError, match=rf"^The '{name}' parameter of GCN must be"):
        GCN(*args, **kwargs)


def _mean_op(ei):
    a = dense_adjacency(ei, N)
    deg = a.sum(1, keepdim=True)
    return torch.where(deg > 0, a / deg.clamp(min=1), a)


def dense_sage(model, x, mean):
    h = x
    for i, ((ws, wn), b) in enumerate(zip(model.layers, model.biases)):
        h = h @ ws.weight.T.double() + mean @ h @ wn.weight.T.double() + b.double()
        if i < len(model.layers) - 1:
            h = torch.relu(h)
    return h


@pytest.mark.parametrize("dims", [[16, 4], [3, 12, 2]])
def test_sage_matches_dense_reference_and_gradcheck(graph, dims):
    g, ei = graph
    g = Graph.from_edge_index(np.concatenate([ei, [[0], [N - 1]]], 1), N + 2)  # two isolated nodes at the end
    torch.manual_seed(1)
    model = SAGE(5, dims)
    x = torch.randn(N + 2, 5)
    mean = torch.from_numpy(g.mean_operator.scipy().toarray()).double()
    assert torch.allclose(model(x, g).double(), dense_sage(model, x.double(), mean), atol=1e-5)
    xd = x.double().requires_grad_()
    model = model.double()
    assert torch.autograd.gradcheck(lambda x: model(x, g), (xd,))


def test_featureless_sage_is_identity_features(graph):
    g, ei = graph
    torch.manual_seed(2)
    model = SAGE(None, [6, 3], num_nodes=N)
    ref = dense_sage(model, torch.eye(N, dtype=torch.float64), _mean_op(ei))
    assert torch.allclose(model(None, g).double(), ref, atol=1e-5)


def test_linear_encoder_is_one_propagation(graph):
    g, ei = graph
    enc = linear_encoder(4, 3)
    x = torch.randn(N, 4)
    ref = _a_hat(ei) @ x.double() @ enc.lins[0].weight.T.double() + enc.biases[0].double()
    assert torch.allclose(enc(x, g).double(), ref, atol=1e-5)


def test_vgae_samples_in_training_returns_mean_in_eval_and_adds_kl(graph):
    g, ei = graph
    torch.manual_seed(3)
    model = VGAE(GCN(4, [8, 6]))  # d = 3: mean and log std
    x = torch.randn(N, 4)
    model.eval()
    mu = model(x, g)
    out = model.encoder(x, g)
    assert torch.equal(mu, out[:, :3])
    model.train()
    z1, z2 = model(x, g), model(x, g)
    assert not torch.equal(z1, z2) and z1.shape == (N, 3)
    # KL per node against the closed form for diagonal Gaussians, by hand
    mu_, logstd = model.mu.double(), model.logstd.double()
    var = torch.exp(2 * logstd)
    kl_hand = (0.5 * (var + mu_ ** 2 - 1 - torch.log(var))).sum(1).mean()
    assert torch.allclose(model.kl().double(), kl_hand, atol=1e-6)
    edges = torch.from_numpy(ei)
    gen = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    base = GAE.loss(model, z2, edges, generator=gen())
    assert torch.allclose(model.loss(z2, edges, generator=gen()), base + model.kl() / N)


@pytest.mark.parametrize("encoder", [GCN, SAGE])
@pytest.mark.parametrize("featureless", [False, True])
@pytest.mark.parametrize("model_cls", [GAE, VGAE])
def test_layerwise_inference_equals_the_full_forward(encoder, featureless, model_cls, monkeypatch):
    n = 200
    g = Graph.from_edge_index(random_edges(n, 600, seed=5), n)
    x = None if featureless else torch.randn(n, 6, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(1)
    model = model_cls(encoder(None if featureless else 6, [12, 5, 8], num_nodes=n))
    model.train()
    expected = model.embed(x, g)  # one forward in eval mode
    # the block path reads the CSR in row blocks and never builds the whole graph's operator
    monkeypatch.setattr(Graph, "gcn_operator", property(lambda self: pytest.fail("built the full operator")))
    monkeypatch.setattr(Graph, "mean_operator", property(lambda self: pytest.fail("built the full operator")))
    got = model.embed(x, g, block=37)
    assert model.training  # restored
    assert got.shape == (n, 4 if model_cls is VGAE else 8)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("encoder", [GCN, SAGE])
@pytest.mark.parametrize("featureless", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_layerwise_inference_into_mapped_buffers_gives_the_same_numbers(encoder, featureless, bias, tmp_path):
    """Every (N, width) array of layer-wise inference a file's pages (a graph larger than memory): the same output,
    bit for bit, as with ordinary tensors, and nothing left in the directory."""
    n = 300
    g = Graph.from_edge_index(random_edges(n, 900, seed=7), n)
    x = None if featureless else torch.randn(n, 6, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(2)
    model = GAE(encoder(None if featureless else 6, [12, 5, 8], num_nodes=n),  # 12 -> 5 narrows: lin(h) mapped too
                node_bias=n if bias else None)
    if bias:  # the per-node bias decoder's columns are written into a mapped (N, d + 2) array too
        model.node_bias.data = torch.randn(n, generator=torch.Generator().manual_seed(3))
    made = []

    def buffers(shape):
        made.append(tuple(shape))
        return MappedBuffers(tmp_path, min_bytes=0)(shape)

    expected = model.embed(x, g, block=41)
    got = model.embed(x, g, block=41, buffers=buffers)
    assert torch.equal(got, expected)
    assert (n, 12) in made and (n, 5) in made and (n, 8) in made  # each layer's output went there
    assert ((n, 10) in made) == bias and got.shape == (n, 10 if bias else 8)
    assert list(tmp_path.iterdir()) == []  # unlinked as soon as mapped
