"""Cluster-GCN and FastGAE building blocks against brute-force references and hand-checked weights."""
import numpy as np
import pytest
import torch

import gaescale
from gaescale.graph import Graph
from gaescale.losses import reconstruction_loss
from gaescale.samplers import cluster_batches, degree_sampled_nodes, induced_subgraph, metis_parts
from gaescale.synthetic import community_graph

from conftest import random_edges


def test_induced_subgraph_matches_dense_restriction():
    n = 60
    g = Graph.from_edge_index(random_edges(n, 300, seed=1), n)
    nodes = np.random.default_rng(0).choice(n, 25, replace=False)
    sub = induced_subgraph(g, nodes)
    dense = g.adjacency().toarray()[np.ix_(nodes, nodes)]
    assert (sub.adjacency().toarray() == dense).all() and sub.node_ids.tolist() == nodes.tolist()


def test_metis_parts_and_cluster_batches_cover_every_node_once():
    d = community_graph(3000, 15000, seed=0)
    g = Graph.from_edge_index(d.edge_index, d.num_nodes)
    parts = metis_parts(g, 30, seed=0)
    assert parts.shape == (3000,) and set(parts.tolist()) == set(range(30))
    # METIS keeps communities together: far more edges inside parts than a random cut's 1/30
    ei = g.edge_index()
    assert (parts[ei[0]] == parts[ei[1]]).mean() > 0.5
    gen = torch.Generator().manual_seed(0)
    batches = list(cluster_batches(parts, 7, gen))
    assert len(batches) == 5  # ceil(30 / 7)
    seen = np.concatenate(batches)
    assert np.array_equal(np.sort(seen), np.arange(3000))  # every node exactly once per epoch


def test_degree_sampled_nodes_follow_degree_power():
    degree = np.array([0, 1, 1, 2, 4, 8, 8, 16])
    gen = torch.Generator().manual_seed(0)
    draws = np.stack([np.isin(np.arange(8), degree_sampled_nodes(degree, 3, 1.0, gen)) for _ in range(2000)])
    freq = draws.mean(0)
    assert freq[0] == 0  # isolated: weight 0
    assert freq[7] > freq[4] > freq[1] and all(draws.sum(1) == 3)  # distinct nodes, more with degree
    uniform = np.stack([np.isin(np.arange(8), degree_sampled_nodes(degree, 4, 0.0, gen)) for _ in range(2000)])
    assert np.allclose(uniform.mean(0), 0.5, atol=0.05)


def test_fastgae_subgraph_weights_by_hand():
    """Path 0-1-2-3-4, subgraph {0, 1, 2}: n_S = 3, edges 0-1, 1-2 = 4 ordered pairs of 9.
    GAE weights re-estimated on it: pos_weight = (9 - 4) / 4 = 1.25, norm = 9 / (2 * (9 - 4)) = 0.9."""
    g = Graph.from_edge_index(np.array([[0, 1, 2, 3], [1, 2, 3, 4]]), 5)
    sub = induced_subgraph(g, np.array([0, 1, 2]))
    z = torch.randn(5, 3, dtype=torch.float64)[[0, 1, 2]]
    got = reconstruction_loss(z, torch.from_numpy(sub.edge_index()), 3, kind="bce", weighting="gae", dense="exact")
    a = torch.tensor([[0, 1, 0], [1, 0, 1], [0, 1, 0]], dtype=torch.float64)
    s = z @ z.T
    per = 1.25 * a * torch.nn.functional.softplus(-s) + (1 - a) * torch.nn.functional.softplus(s)
    assert got.item() == pytest.approx(0.9 * per.mean().item(), rel=1e-10)


@pytest.mark.parametrize("encoder", [gaescale.GCN, gaescale.SAGE])
@pytest.mark.parametrize("featureless", [False, True])
def test_checkpointed_activations_give_the_same_gradients(encoder, featureless):
    d = community_graph(400, 2000, seed=1)
    g = Graph.from_edge_index(d.edge_index, d.num_nodes)
    x = None if featureless else torch.from_numpy(d.x)
    grads = []
    for ckpt in (False, True):
        torch.manual_seed(0)
        enc = encoder(None if featureless else 8, [16, 16, 8], num_nodes=400, dropout=0.3)
        enc.checkpoint_activations = ckpt
        torch.manual_seed(1)  # the same dropout masks
        enc(x, g).square().sum().backward()
        grads.append([p.grad.clone() for p in enc.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("strategy", ["cluster", "fastgae"])
def test_strategies_learn_and_resume_bit_for_bit(tmp_path, strategy):
    data = community_graph(3000, 15000, seed=1)
    kw = dict(hidden="16", dim=8, quiet=True, report=False, strategy=strategy, eval_every=2, seed=3)
    if strategy == "cluster":
        kw.update(cluster_parts=12, clusters_per_batch=3)
    ref = gaescale.train(data=data, epochs=12, **kw)
    assert ref.metrics["test_auc"] > 0.75
    if strategy == "cluster":
        assert all(h["steps"] == 4 for h in ref.metrics["history"])
    gaescale.train(data=data, out=str(tmp_path), epochs=5, checkpoint_every=5, **kw)
    resumed = gaescale.train(data=data, out=str(tmp_path), epochs=12, resume=True, **kw)
    assert np.array_equal(ref.embeddings, resumed.embeddings)


def test_flags_of_another_strategy_are_refused():
    with pytest.raises(gaescale.ParameterError, match=r"The 'cluster_parts' parameter of train must be left unset "
                                                      r"unless strategy='cluster'\. Got 10 instead\."):
        gaescale.TrainConfig(edges="e.txt", cluster_parts=10)
