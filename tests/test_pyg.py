"""PyTorch Geometric in and out (gaescale/pyg.py), against PyG itself: skipped where torch_geometric is not installed
(gaescale's own environment); the benchmark environment has it:
``PYTHONPATH=src .venv-bench/bin/python -m pytest tests/test_pyg.py -q``."""
import numpy as np
import pytest
import torch

import gaescale
from gaescale import Graph, Run, to_pyg
from gaescale.errors import ParameterError
from gaescale.losses import reconstruction_loss
from gaescale.pyg import PyGEncoder, from_pyg

pyg = pytest.importorskip("torch_geometric")
from torch_geometric.data import Data  # noqa: E402
from torch_geometric.nn import GCNConv  # noqa: E402
from torch_geometric.utils import to_undirected  # noqa: E402

FAST = dict(epochs=4, quiet=True, report=False, eval_every=2)


class GcnNet(torch.nn.Module):
    """The seed user's model: GCNConv 8 -> 16 -> 16 -> 8, ReLU between (docs/pyg.md)."""

    def __init__(self, dims=(8, 16, 16, 8)):
        super().__init__()
        self.convs = torch.nn.ModuleList(GCNConv(a, b) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, x, edge_index, edge_weight=None):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index, edge_weight)
            if i < len(self.convs) - 1:
                x = x.relu()
        return x


def _data(n=300, e=1200, seed=0):
    g = gaescale.community_graph(n, e, seed=seed)
    return g, Data(x=torch.from_numpy(g.x), edge_index=to_undirected(torch.from_numpy(g.edge_index)))


def test_from_pyg_reads_edges_features_weights_and_ids_of_a_data():
    ei = torch.tensor([[0, 1, 1, 2, 3], [1, 0, 2, 3, 0]])
    w = torch.tensor([[0.5], [0.5], [2.0], [1.0], [3.0]])  # a one-column edge_attr is the weight
    data = Data(x=torch.arange(12.0).view(4, 3), edge_index=ei, edge_attr=w)
    data.node_ids = np.array(["a", "b", "c", "d"], dtype=object)
    el = from_pyg(data)
    assert el.num_nodes == 4 and el.edge_index.dtype == np.int64
    np.testing.assert_array_equal(el.edge_index, ei.numpy())
    np.testing.assert_array_equal(el.x, data.x.numpy())
    np.testing.assert_array_equal(el.edge_weight, w[:, 0].numpy())
    assert list(el.node_ids) == ["a", "b", "c", "d"]
    data.edge_weight = torch.tensor([1.0, 1.0, 1.0, 1.0, 4.0])  # edge_weight wins over edge_attr
    np.testing.assert_array_equal(from_pyg(data).edge_weight, [1, 1, 1, 1, 4])
    assert from_pyg(Data(edge_index=ei, num_nodes=6)).num_nodes == 6  # isolated nodes kept
    with pytest.raises(ParameterError, match="multi-column edge_attr is not a weight"):
        from_pyg(Data(edge_index=ei, edge_attr=torch.ones(5, 2), num_nodes=4))


def test_to_pyg_of_a_run_and_from_pyg_back_give_the_same_graph_and_embeddings(tmp_path):
    g, data = _data()
    result = gaescale.train(data=data, out=str(tmp_path / "run"), hidden="8", dim=4, **FAST)
    assert torch.load(tmp_path / "run" / "model.pt", weights_only=True)["custom_encoder"] is None  # gaescale's GCN
    graph = Graph.from_edge_index(g.edge_index, g.num_nodes)
    for run in (result, tmp_path / "run"):  # the RunResult, and the run directory read back
        out = to_pyg(run)
        assert isinstance(out, Data) and out.num_nodes == g.num_nodes
        np.testing.assert_array_equal(out.x.numpy(), result.embeddings)
        np.testing.assert_array_equal(out.node_bias.numpy(), result.node_bias)
        np.testing.assert_array_equal(out.node_ids, np.arange(g.num_nodes))
        assert out.is_undirected() and out.edge_index.shape[1] == 2 * graph.num_edges
        back = from_pyg(out)
        again = Graph.from_edge_index(back.edge_index, back.num_nodes)
        np.testing.assert_array_equal(again.indptr, graph.indptr)
        np.testing.assert_array_equal(again.indices, graph.indices)
        np.testing.assert_array_equal(back.x, result.embeddings)


def test_train_on_a_data_equals_train_on_the_edge_list_of_the_same_graph():
    g, data = _data(seed=1)
    a = gaescale.train(data=data, hidden="8", dim=4, **FAST)
    b = gaescale.train(data=g, hidden="8", dim=4, **FAST)
    np.testing.assert_array_equal(a.embeddings, b.embeddings)
    assert a.metrics["test_auc"] == b.metrics["test_auc"]


def test_the_adapters_gradient_equals_a_plain_pyg_forward_with_the_loss_by_hand():
    g, data = _data(60, 200, seed=2)
    torch.manual_seed(0)
    net, ref = GcnNet(), GcnNet()
    ref.load_state_dict(net.state_dict())
    graph = Graph.from_edge_index(g.edge_index, g.num_nodes)
    x = torch.from_numpy(g.x)
    z = PyGEncoder(net)(x, graph)
    reconstruction_loss(z, torch.from_numpy(g.edge_index), g.num_nodes, kind="mse", dense="exact",
                        weighting="none").backward()
    # the reference: PyG's own forward on data.edge_index, and mean over all N^2 pairs of (A - sigmoid(Z Z^T))^2
    z_ref = ref(data.x, data.edge_index)
    a = torch.zeros(g.num_nodes, g.num_nodes)
    a[data.edge_index[0], data.edge_index[1]] = 1.0
    ((a - torch.sigmoid(z_ref @ z_ref.T)) ** 2).mean().backward()
    torch.testing.assert_close(z, z_ref, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(net.named_parameters(), ref.parameters()):
        assert p.grad.abs().sum() > 0, name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-7, msg=name)


def test_the_graphs_edge_weights_reach_a_module_that_takes_them():
    g, data = _data(60, 200, seed=3)
    edges = Graph.from_edge_index(g.edge_index, g.num_nodes).edge_index()
    weight = np.random.default_rng(0).uniform(0.5, 2.0, edges.shape[1]).astype(np.float32)
    graph = Graph.from_edge_index(edges, g.num_nodes, edge_weight=weight)  # a weighted Graph
    w = graph.data  # CSR-aligned, symmetric: the weight of (u, v) is that of (v, u)
    np.testing.assert_array_equal(w, w[_transpose_order(graph)])
    torch.manual_seed(0)
    net = GcnNet()
    enc = PyGEncoder(net)
    ei, ew = enc.edges(graph)
    np.testing.assert_array_equal(ew.numpy(), w)
    torch.testing.assert_close(enc(data.x, graph), net(data.x, ei, torch.from_numpy(w)))
    assert not torch.allclose(enc(data.x, graph), net(data.x, ei))  # the weights changed the output
    assert enc.edges(graph)[0] is ei  # built once per graph

    class TwoArgs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = GCNConv(8, 4)

        def forward(self, x, edge_index):
            return self.conv(x, edge_index)
    with pytest.raises(ParameterError, match="False to ignore the graph's edge weights"):
        PyGEncoder(TwoArgs())(data.x, graph)
    PyGEncoder(TwoArgs(), edge_weight=False)(data.x, graph)


def _transpose_order(graph: Graph) -> np.ndarray:
    """For each CSR entry (u, v), the position of (v, u)."""
    rows = np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr))
    keys = rows * graph.num_nodes + graph.indices
    return np.searchsorted(keys, graph.indices.astype(np.int64) * graph.num_nodes + rows)


@pytest.mark.parametrize("strategy", ["full", "cluster", "fastgae", "neighbor"])
def test_a_pyg_encoder_trains_under_each_strategy_in_place(strategy):
    g, data = _data(1000, 5000, seed=4)
    torch.manual_seed(0)
    net = GcnNet()
    before = [p.detach().clone() for p in net.parameters()]
    extra = {"cluster": dict(cluster_parts=10, clusters_per_batch=5),
             "neighbor": dict(fanouts="5,5,5", batch_size=1024)}.get(strategy, {})
    r = gaescale.train(data=data, encoder=PyGEncoder(net), loss="mse", strategy=strategy, epochs=15, quiet=True,
                       report=False, eval_every=5, **extra)
    assert r.model.encoder.module is net and any(not torch.equal(a, b) for a, b in zip(before, net.parameters()))
    assert r.embeddings.shape == (1000, 8) and np.isfinite(r.embeddings).all()
    # measured: 0.81-0.82 after 15 epochs; the untrained net 0.77 (the features), the heuristics 0.68
    assert r.metrics["test_auc"] > 0.8 and r.metrics["beats_baselines"], r.metrics["test_auc"]


def test_a_featureless_graph_trains_through_the_learnt_input_table_and_model_pt_names_the_encoder(tmp_path):
    g, _ = _data(300, 1200, seed=5)
    data = Data(edge_index=torch.from_numpy(g.edge_index), num_nodes=g.num_nodes)
    torch.manual_seed(0)
    enc = PyGEncoder(GcnNet((16, 16, 8)), num_nodes=g.num_nodes, in_dim=16)
    r = gaescale.train(data=data, encoder=enc, out=str(tmp_path / "run"), **FAST)
    assert r.embeddings.shape == (300, 8) and np.isfinite(r.embeddings).all()
    saved = torch.load(tmp_path / "run" / "model.pt", weights_only=True)
    assert saved["custom_encoder"] == "gaescale.pyg.PyGEncoder" and "encoder.table" in saved["state_dict"]
    np.testing.assert_array_equal(np.load(tmp_path / "run" / "embeddings.npy"), r.embeddings)
    with pytest.raises(ParameterError, match="node features, or a PyGEncoder"):
        PyGEncoder(GcnNet())(None, Graph.from_edge_index(g.edge_index, g.num_nodes))


def test_what_a_pyg_encoder_cannot_do_is_refused_before_training(tmp_path):
    _, data = _data()
    enc = PyGEncoder(GcnNet())
    cases = [(dict(strategy="auto"), "The 'strategy' parameter of train must be 'full', 'cluster', 'fastgae' or "
                                     "'neighbor' with a custom encoder"),
             (dict(strategy="neighbor"), "The 'fanouts' parameter of train must be given with strategy='neighbor'"),
             (dict(checkpoint_activations=True), "The 'checkpoint_activations' parameter of train must be False"),
             (dict(hidden="16"), "The 'hidden' parameter of train must be left unset with a custom encoder"),
             (dict(decoder="hadamard"), "The 'dim' parameter of train must be given with a custom encoder if and "
                                        "only if decoder='hadamard'"),
             (dict(encoder=GcnNet()), "The 'encoder' parameter of train must be a gaescale encoder, forward(x, graph): "
                                      "wrap a PyG module as gaescale.pyg.PyGEncoder(module). Got GcnNet instead.")]
    for options, message in cases:
        with pytest.raises(ParameterError) as info:
            gaescale.train(data=data, **{"encoder": enc, **options}, **FAST)
        assert str(info.value).startswith(message), str(info.value)
    with pytest.raises(ParameterError, match="one of gaescale's own encoders"):
        gaescale.GAE(enc).embed(data.x, Graph.from_edge_index(data.edge_index.numpy(), 300), block=64)
    ei = data.edge_index.numpy()
    from gaescale.data.prepare import prepare
    np.savetxt(tmp_path / "e.txt", ei.T, fmt="%d")
    prepare(str(tmp_path / "e.txt"), str(tmp_path / "prep"))
    with pytest.raises(ParameterError, match="for a prepared graph"):
        gaescale.train(edges=str(tmp_path / "prep"), encoder=enc, **FAST)


def test_to_pyg_of_a_weighted_run_passes_its_edge_weights_and_from_pyg_reads_them_back(tmp_path):
    g, _ = _data(200, 800, seed=6)
    edges = Graph.from_edge_index(g.edge_index, g.num_nodes).edge_index()
    weight = np.random.default_rng(1).uniform(0.2, 3.0, edges.shape[1]).astype(np.float32)
    data = Data(x=torch.from_numpy(g.x), edge_index=torch.from_numpy(edges), edge_weight=torch.from_numpy(weight))
    result = gaescale.train(data=data, weighted=True, out=str(tmp_path / "run"), hidden="8", dim=4, **FAST)
    graph = Graph.from_edge_index(edges, g.num_nodes, edge_weight=weight)  # the reference: built here
    for run in (result, tmp_path / "run"):
        out = to_pyg(run)
        assert out.edge_weight.dtype == torch.float32 and out.edge_weight.shape == (2 * graph.num_edges,)
        # each column (u, v) of edge_index carries the weight given for the edge {u, v}
        u, v = out.edge_index.numpy()
        np.testing.assert_array_equal(out.edge_weight.numpy(), graph.weights_of(u, v))
        back = from_pyg(out)
        again = Graph.from_edge_index(back.edge_index, back.num_nodes, edge_weight=back.edge_weight)
        np.testing.assert_array_equal(again.indices, graph.indices)
        np.testing.assert_allclose(again.data, graph.data, rtol=1e-6)  # both directions, one weight: kept
    _, plain = _data(100, 300, seed=7)
    plain_run = gaescale.train(data=plain, hidden="8", dim=4, **FAST)
    assert getattr(to_pyg(plain_run), "edge_weight", None) is None  # an unweighted run: no weights made up


def test_embed_of_a_pyg_encoder_run_is_refused_saying_how_and_the_recipe_it_gives_works(tmp_path):
    g, data = _data(200, 800, seed=8)
    torch.manual_seed(0)
    r = gaescale.train(data=data, encoder=PyGEncoder(GcnNet()), decoder="inner", out=str(tmp_path / "run"),
                       **FAST)
    np.savetxt(tmp_path / "e.txt", g.edge_index.T, fmt="%d")
    np.save(tmp_path / "x.npy", g.x)
    with pytest.raises(ParameterError) as info:
        Run.open(tmp_path / "run").embed(tmp_path / "e.txt", tmp_path / "x.npy", out=tmp_path / "z.npy")
    msg = str(info.value)
    assert msg.startswith("The 'run' parameter of embed must be a run of one of gaescale's own encoders: this "
                          "run's, gaescale.pyg.PyGEncoder, was given to train(encoder=...)") and "\n" not in msg
    assert "call the module in Python" in msg and not (tmp_path / "z.npy").exists()
    from gaescale.cli import main
    assert main(["embed", str(tmp_path / "run"), str(tmp_path / "e.txt"), "--features", str(tmp_path / "x.npy"),
                 "--out", str(tmp_path / "z.npy")]) == 2
    # the recipe of the message: model.pt's 'encoder.' entries into a fresh PyGEncoder, called in eval mode
    state = torch.load(tmp_path / "run" / "model.pt", weights_only=True)["state_dict"]
    enc = PyGEncoder(GcnNet())
    enc.load_state_dict({k[len("encoder."):]: v for k, v in state.items() if k.startswith("encoder.")})
    run = Run.open(tmp_path / "run")  # embeddings.npy: of the training graph, graph.npz less held-out
    ei = run.graph().edge_index()
    held = np.sort(np.concatenate([run.heldout()["val_pos"], run.heldout()["test_pos"]], axis=1), axis=0)
    train = ei[:, ~np.isin(ei[0].astype(np.int64) * 200 + ei[1], held[0] * 200 + held[1])]
    with torch.no_grad():
        z = enc.eval()(torch.from_numpy(g.x), Graph.from_edge_index(train, g.num_nodes))
    np.testing.assert_allclose(z.numpy(), r.embeddings, rtol=1e-4, atol=1e-5)


def test_to_pyg_of_a_directed_run_gives_each_directed_edge_once(tmp_path):
    rng = np.random.default_rng(3)
    ei = np.unique(rng.integers(0, 60, (2, 300)), axis=1)
    ei = ei[:, ei[0] != ei[1]]
    data = gaescale.EdgeList(ei, 60, None, source="directed")
    result = gaescale.train(data=data, directed=True, strategy="full", out=str(tmp_path / "run"), dim=4, **FAST)
    for run in (result, tmp_path / "run"):
        out = to_pyg(run)
        got = out.edge_index.numpy()
        assert got.shape == ei.shape  # (u, v) once, never its reversal made up
        assert set(zip(*got.tolist())) == set(zip(*ei.tolist()))
        np.testing.assert_array_equal(out.x.numpy(), result.embeddings)
