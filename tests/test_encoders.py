import numpy as np
import pytest
import torch

from gaescale.encoders import GCN
from gaescale.errors import ParameterError
from gaescale.graph import Graph
from gaescale.models import GAE

from conftest import dense_adjacency, random_edges

N = 30


@pytest.fixture
def graph():
    ei = random_edges(N, 70, seed=4)
    return Graph.from_edge_index(ei, N), ei


def dense_gcn(model, x, a_hat):
    h = x
    for i, (lin, b) in enumerate(zip(model.lins, model.biases)):
        h = a_hat @ h @ lin.weight.T.double() + b.double()
        if i < len(model.lins) - 1:
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


@pytest.mark.parametrize("args,kwargs", [((3, []), {}), ((3, [0]), {}), ((None, [4]), {}), ((0, [4]), {})])
def test_bad_dims(args, kwargs):
    with pytest.raises(ParameterError):
        GCN(*args, **kwargs)
