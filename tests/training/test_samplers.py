"""Neighbour sampling, Cluster-GCN and FastGAE building blocks against brute-force references and hand-checked
weights."""
import numpy as np
import pytest
import torch

import gaescale
from conftest import random_edges
from gaescale.data.synthetic import community_graph
from gaescale.graph import Graph
from gaescale.losses import minibatch_loss, reconstruction_loss
from gaescale.training.samplers import (
    cluster_batches,
    degree_sampled_nodes,
    induced_subgraph,
    metis_parts,
    neighbor_subgraph,
    sample_edges,
    sample_neighbors,
)


def test_induced_subgraph_matches_dense_restriction():
    n = 60
    g = Graph.from_edge_index(random_edges(n, 300, seed=1), n)
    nodes = np.random.default_rng(0).choice(n, 25, replace=False)
    sub = induced_subgraph(g, nodes)
    dense = g.adjacency().toarray()[np.ix_(nodes, nodes)]
    assert (sub.adjacency().toarray() == dense).all() and sub.node_ids.tolist() == nodes.tolist()
    # keeping only some edges (here those of a hashed split's training graph): the training graph's restriction
    from gaescale.data.split import hashed_is_train, split_hashed
    train = split_hashed(g, 0.2, 0.2, seed=5).train_graph()
    kept = induced_subgraph(g, nodes, edges=lambda u, v: hashed_is_train(u, v, n, 0.2, 0.2, seed=5))
    restricted = train.adjacency().toarray()[np.ix_(nodes, nodes)]
    assert (kept.adjacency().toarray() == restricted).all() and 0 < restricted.sum() < dense.sum()


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


def test_cluster_ranks_train_on_disjoint_partitions_each_reading_only_its_own_nodes():
    from gaescale.training.strategies import ClusterGCN
    d = community_graph(3000, 15000, seed=0)
    g = Graph.from_edge_index(d.edge_index, d.num_nodes)
    parts = metis_parts(g, 8, seed=0)
    x = torch.arange(3000, dtype=torch.float32)[:, None]
    seen = []
    for rank in range(2):
        s = ClusterGCN(parts, 3, rank=rank, world_size=2, num_parts=8)
        part, local = s.partition(g)
        own = np.flatnonzero(parts // 4 == rank)  # parts 0-3 on rank 0, 4-7 on rank 1
        assert part.node_ids.tolist() == own.tolist() and (local == parts[own] - 4 * rank).all()
        assert (part.adjacency().toarray() == g.adjacency()[own][:, own].toarray()).all()  # the induced subgraph
        steps = []

        class Recorder:  # what the strategy hands the model: the batch's graph and its features
            def __call__(self, x_batch, sub, steps=steps):
                assert (x_batch[:, 0].numpy() == sub.node_ids).all()  # features of the right nodes
                dense = g.adjacency()[sub.node_ids][:, sub.node_ids].toarray()
                assert (sub.adjacency().toarray() == dense).all()  # in the graph's own indices
                steps.append(sub.node_ids)
                return torch.zeros((sub.num_nodes, 2), requires_grad=True)

            def loss(self, z, pairs, **kw):
                return z.sum()

        list(s.steps(Recorder(), x, g, None, torch.Generator().manual_seed(rank), {}))
        assert len(steps) == 2  # ceil(4 parts / 3 per batch), as on the other rank
        assert np.array_equal(np.sort(np.concatenate(steps)), own)
        seen.append(own)
    assert np.array_equal(np.sort(np.concatenate(seen)), np.arange(3000))
    with pytest.raises(gaescale.ParameterError, match="multiple of world_size=3"):
        ClusterGCN(parts, 3, rank=0, world_size=3)
    with pytest.raises(gaescale.ParameterError, match="'train_edges' parameter of ClusterGCN must be None"):
        ClusterGCN(parts, 3, train_edges=lambda u, v: u < v)  # one process trains on the graph it is given


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


@pytest.mark.parametrize("strategy", ["cluster", "fastgae", "neighbor"])
def test_strategies_learn_and_resume_bit_for_bit(tmp_path, strategy):
    data = community_graph(3000, 15000, seed=1)
    kw = dict(hidden="16", dim=8, quiet=True, report=False, strategy=strategy, eval_every=2, seed=3)
    if strategy == "cluster":
        kw.update(cluster_parts=12, clusters_per_batch=3)
    if strategy == "neighbor":
        kw.update(batch_size=4096, fanouts="5,5")
    ref = gaescale.train(data=data, epochs=12, **kw)
    assert ref.metrics["test_auc"] > 0.75
    if strategy in ("cluster", "neighbor"):  # 12 parts / 3; ceil(12,750 training edges / 4,096)
        assert all(h["steps"] == 4 for h in ref.metrics["history"])
    gaescale.train(data=data, out=str(tmp_path), epochs=5, checkpoint_every=5, **kw)
    resumed = gaescale.train(data=data, out=str(tmp_path), epochs=12, resume=True, **kw)
    assert np.array_equal(ref.embeddings, resumed.embeddings)


def test_flags_of_another_strategy_are_refused():
    with pytest.raises(gaescale.ParameterError, match=r"The 'cluster_parts' parameter of train must be left unset "
                                                      r"unless strategy is 'cluster' or 'auto'\. Got 10 instead\."):
        gaescale.TrainConfig(edges="e.txt", cluster_parts=10)


def test_sampled_neighbours_are_real_distinct_and_respect_the_fanout():
    n = 300
    g = Graph.from_edge_index(random_edges(n, 2500, seed=4), n)
    adj = g.adjacency().toarray() > 0
    nodes = np.random.default_rng(0).permutation(n)[:200]
    rows, cols = sample_neighbors(g, nodes, 7, torch.Generator().manual_seed(0))
    assert adj[nodes[rows], cols].all()  # only real edges
    counts = np.bincount(rows, minlength=nodes.size)
    assert np.array_equal(counts, np.minimum(g.degree[nodes], 7))  # min(degree, fan-out) each
    pairs = rows * n + cols
    assert np.unique(pairs).size == pairs.size  # without replacement


def test_sampled_neighbours_are_uniform_subsets():
    """A node of degree 10, fan-out 3: each neighbour is drawn with probability 3/10, each pair of them
    together with probability (3 * 2) / (10 * 9), as for a uniform 3-subset."""
    g = Graph.from_edge_index(np.stack([np.zeros(10, np.int64), np.arange(1, 11)]), 11)
    gen = torch.Generator().manual_seed(0)
    draws = 20000
    rows, cols = sample_neighbors(g, np.zeros(draws, np.int64), 3, gen)
    chosen = np.zeros((draws, 11), bool)
    chosen[rows, cols] = True
    se = np.sqrt(0.3 * 0.7 / draws)
    assert np.abs(chosen[:, 1:].mean(0) - 0.3).max() < 5 * se
    both = (chosen[:, 1] & chosen[:, 2]).mean(), (chosen[:, 9] & chosen[:, 10]).mean()
    assert np.allclose(both, 6 / 90, atol=5 * np.sqrt(6 / 90 / draws))


def test_neighbor_subgraph_hops_and_exact_sage_with_full_fanouts():
    d = community_graph(500, 2500, seed=2)
    g = Graph.from_edge_index(d.edge_index, d.num_nodes)
    adj = g.adjacency().toarray() > 0
    seeds = np.array([7, 3, 250, 499])
    sub, hops = neighbor_subgraph(g, seeds, [4, 2], torch.Generator().manual_seed(1))
    ids = sub.node_ids
    assert ids[:4].tolist() == seeds.tolist() and np.unique(ids).size == ids.size
    sub_adj = sub.adjacency().toarray() > 0
    assert (sub_adj == sub_adj.T).all() and not sub_adj.diagonal().any()  # undirected, no self loops
    assert all((np.diff(sub.indices[a:b]) > 0).all() for a, b in zip(sub.indptr[:-1], sub.indptr[1:]))
    assert adj[np.ix_(ids, ids)][sub_adj].all()  # every edge of the sample is a real edge
    assert set(hops["targets"][0].tolist()) <= set(seeds.tolist())
    assert np.bincount(np.searchsorted(np.sort(seeds), hops["targets"][0])).max() <= 4
    assert not set(hops["targets"][1].tolist()) & set(seeds.tolist())  # hop 2 expands only new nodes
    # fan-outs that cover every neighbour: a 2-layer GraphSAGE on the sample equals the full graph at the seeds
    full, _ = neighbor_subgraph(g, seeds, [10**6, 10**6], torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    enc = gaescale.SAGE(8, [16, 8])
    x = torch.from_numpy(d.x)
    with torch.no_grad():
        torch.testing.assert_close(enc(x[torch.from_numpy(full.node_ids)], full)[:4], enc(x, g)[seeds])


@pytest.mark.parametrize("kind,weighting", [("bce", "balanced"), ("bce", "gae"), ("mse", "none"),
                                            ("linear-mse", "balanced")])
def test_minibatch_loss_with_every_edge_and_pair_is_the_exact_loss(kind, weighting):
    """One batch of all the edges (fraction 1) and all N^2 pairs once each: the estimate is the exact loss."""
    n = 40
    edges = torch.from_numpy(random_edges(n, 120, seed=5))
    edges = torch.cat([edges, torch.tensor([[3], [3]])], dim=1)  # one self pair, counted once
    z = torch.randn(n, 4, dtype=torch.float64)
    exact = reconstruction_loss(z, edges, n, kind=kind, weighting=weighting, dense="exact")
    all_pairs = torch.cartesian_prod(torch.arange(n), torch.arange(n)).T
    s_pos, s_neg = (z[edges[0]] * z[edges[1]]).sum(1), (z[all_pairs[0]] * z[all_pairs[1]]).sum(1)
    got = minibatch_loss(s_pos, s_neg, num_nodes=n, num_edge_pairs=2 * 120 + 1, edge_fraction=1.0, kind=kind,
                         weighting=weighting, pos_loops=edges[0] == edges[1])
    assert got.item() == pytest.approx(exact.item(), rel=1e-12)


def test_minibatch_loss_is_unbiased():
    n, e, b, m = 50, 200, 20, 30
    edges = torch.from_numpy(random_edges(n, e, seed=6))
    z = torch.randn(n, 3, dtype=torch.float64)
    exact = reconstruction_loss(z, edges, n, kind="bce", dense="exact").item()
    gen = torch.Generator().manual_seed(0)
    draws = []
    for _ in range(4000):
        pos = edges[:, torch.randperm(e, generator=gen)[:b]]
        neg = torch.randint(0, n, (2, m), generator=gen)
        draws.append(minibatch_loss((z[pos[0]] * z[pos[1]]).sum(1), (z[neg[0]] * z[neg[1]]).sum(1), num_nodes=n,
                                    num_edge_pairs=2 * e, edge_fraction=b / e).item())
    draws = np.array(draws)
    assert abs(draws.mean() - exact) < 3 * draws.std() / np.sqrt(draws.size)


def test_neighbor_strategy_needs_a_sampled_dense_term_and_one_fanout_per_layer():
    with pytest.raises(gaescale.ParameterError, match=r"The 'dense' parameter of train must be 'sampled' with "
                                                      r"strategy='neighbor'"):
        gaescale.TrainConfig(edges="e.txt", strategy="neighbor", dense="exact")
    with pytest.raises(gaescale.ParameterError, match=r"The 'fanouts' parameter of train must be one fan-out per "
                                                      r"encoder layer \(2 here\)\. Got '10' instead\."):
        gaescale.TrainConfig(edges="e.txt", strategy="neighbor", hidden="16", fanouts="10")


def test_time_limit_stops_within_an_epoch_and_evaluates_the_last_weights():
    data = community_graph(3000, 15000, seed=1)
    r = gaescale.train(data=data, epochs=50, quiet=True, report=False, strategy="neighbor", batch_size=1024,
                       hidden="16", eval_every=10, time_limit=1e-6)
    (h,) = r.metrics["history"]  # one epoch, cut after its first of 13 steps, then evaluated
    assert h["steps"] == 1 and "val_auc" in h and r.metrics["stopped_early"]


@pytest.mark.parametrize("self_loops", [False, True])
def test_sample_edges_draws_every_edge_and_loop_uniformly(self_loops):
    g = Graph.from_edge_index(random_edges(12, 20, seed=6), 12)
    draws = 60_000
    pairs, loops = sample_edges(g, draws, torch.Generator().manual_seed(0), self_loops=self_loops)
    assert np.array_equal(loops, pairs[0] == pairs[1])
    dense = g.adjacency().toarray() > 0
    assert dense[pairs[0][~loops], pairs[1][~loops]].all()  # only real edges (either direction)
    keys = np.minimum(*pairs) * 12 + np.maximum(*pairs)
    items = 20 + (12 if self_loops else 0)
    counts = np.bincount(np.unique(keys, return_inverse=True)[1])
    assert counts.size == items
    expected = draws / items  # every item within 5 standard deviations of a uniform draw
    assert np.abs(counts - expected).max() < 5 * np.sqrt(expected)


def _kl_by_hand(mu: torch.Tensor, logstd: torch.Tensor) -> float:
    """Mean over nodes of KL(N(mu, sigma^2) || N(0, I)) = 1/2 sum_d (mu^2 + sigma^2 - 1 - ln sigma^2)."""
    mu, var = mu.double(), (2 * logstd.double()).exp()
    return float((0.5 * (mu ** 2 + var - 1 - var.log()).sum(1)).mean())


@pytest.mark.parametrize("name", ["full", "fastgae", "cluster", "neighbor"])
def test_every_strategy_weighs_the_vgae_kl_per_node_of_the_whole_graph(name):
    """Full batch adds KL / N (the VGAE paper's weight, KL averaged over nodes); a strategy whose loss sees a
    subgraph adds its nodes' mean KL / N too, N being the whole graph's nodes (not the subgraph's)."""
    from gaescale.sparse import PairIndex
    from gaescale.training.strategies import ClusterGCN, FastGAE, FullBatch, NeighborLinks
    data = community_graph(600, 3000, seed=2)
    g, x, n = Graph.from_edge_index(data.edge_index, data.num_nodes), torch.from_numpy(data.x), data.num_nodes
    strategy = {"full": FullBatch(), "fastgae": FastGAE(100, 1.0),
                "cluster": ClusterGCN(metis_parts(g, 6), 2), "neighbor": NeighborLinks([5, 5], 256)}[name]
    pairs = PairIndex.from_pairs(torch.from_numpy(g.edge_index()), n)
    torch.manual_seed(0)
    model = gaescale.VGAE(gaescale.GCN(8, [8, 2 * 4])).eval()  # eval: z = mu, no noise; the same draws twice

    def first_step():
        with torch.no_grad():
            return next(strategy.steps(model, x, g, pairs, torch.Generator().manual_seed(5), {})).item()

    with_kl = first_step()
    kl = _kl_by_hand(model.mu, model.logstd)  # over the nodes the encoder embedded in that step
    # full batch and FastGAE embed the whole graph; Cluster-GCN its batch, neighbour sampling the sampled nodes
    assert (model.mu.shape[0] == n) is (name in ("full", "fastgae")) and kl > 0.1
    model.kl = lambda: torch.zeros(())  # the same step without its KL term: the reconstruction alone
    assert with_kl - first_step() == pytest.approx(kl / n, rel=1e-4)


def test_neighbor_subgraph_and_weights_of_keep_a_weighted_graphs_weights():
    n = 60
    ei = random_edges(n, 200, seed=9)
    w = np.random.default_rng(9).uniform(0.1, 3.0, 200).astype(np.float32)
    wmat = np.zeros((n, n), np.float32)
    wmat[ei[0], ei[1]] = w
    wmat[ei[1], ei[0]] = w
    g = Graph.from_edge_index(ei, n, edge_weight=w)
    u, v = np.random.default_rng(0).integers(0, n, (2, 500))
    assert np.array_equal(g.weights_of(u, v), wmat[u, v])  # 0 for a non-edge
    sub, _ = neighbor_subgraph(g, np.array([3, 17, 40]), [4, 3], torch.Generator().manual_seed(1))
    dense = sub.weighted_adjacency().toarray()
    ids = sub.node_ids
    assert sub.num_edges > 10 and np.array_equal(dense, np.where(dense > 0, wmat[np.ix_(ids, ids)], 0))


@pytest.mark.parametrize("kind", ["bce", "mse", "linear-mse"])
def test_minibatch_loss_weights_its_edges_as_the_full_loss_does(kind):
    # the dense terms cancel: (weighted - unweighted) of a batch of every edge = the same difference of the full loss
    n = 50
    ei = torch.from_numpy(random_edges(n, 120, seed=2))
    w = torch.from_numpy(np.random.default_rng(2).uniform(0.1, 3.0, 120))
    z = torch.randn(n, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    s_pos, none = (z[ei[0]] * z[ei[1]]).sum(1), z.new_zeros(0)
    batch = dict(num_nodes=n, num_edge_pairs=240, edge_fraction=1.0, kind=kind)
    got = minibatch_loss(s_pos, none, pos_weight=w, **batch) - minibatch_loss(s_pos, none, **batch)
    full = (reconstruction_loss(z, ei, n, kind=kind, dense="exact", edge_weight=w)
            - reconstruction_loss(z, ei, n, kind=kind, dense="exact"))
    assert torch.allclose(got, full, rtol=1e-6, atol=1e-10)


def test_full_batch_reads_its_fixed_pairs_columns_from_their_kept_transpose(monkeypatch):
    """The training edges (every epoch's), the two-hop pool and the uniform pairs (shifts, whose transpose is written
    down) go through kept transposes, none through SciPy's column product; the step's gradient is the one without
    the training edges' kept transpose."""
    from gaescale import sparse
    from gaescale.sparse import PairIndex
    from gaescale.structure import TwoHop
    from gaescale.training.strategies import FullBatch
    data = community_graph(600, 3000, seed=2)
    g, x, n = Graph.from_edge_index(data.edge_index, data.num_nodes), torch.from_numpy(data.x), data.num_nodes
    scipy_columns, seen = sparse.columns_scipy, []
    monkeypatch.setattr(sparse, "columns_scipy", lambda pidx, *a, **k: seen.append(pidx) or scipy_columns(pidx, *a,
                                                                                                           **k))

    def gradient(pairs):
        torch.manual_seed(0)
        model = gaescale.GAE(gaescale.GCN(8, [8, 4]))
        loss = next(FullBatch().steps(model, x, g, pairs, torch.Generator().manual_seed(5), {}))
        return torch.autograd.grad(loss, list(model.parameters()))

    pairs = PairIndex.from_pairs(torch.from_numpy(g.edge_index()), n)
    kept = gradient(pairs)
    assert not seen
    keep = PairIndex.keep_transpose
    monkeypatch.setattr(PairIndex, "keep_transpose", lambda self: self)
    for a, b in zip(kept, gradient(PairIndex.from_pairs(torch.from_numpy(g.edge_index()), n))):
        torch.testing.assert_close(a, b)
    monkeypatch.setattr(PairIndex, "keep_transpose", keep)
    pool, seen[:] = TwoHop(g, pool_size=500, seed=0).pool, []
    z = torch.randn(n, 4, requires_grad=True)
    pool.logits(z).sum().backward()
    assert pool.num_pairs == 500 and not seen and z.grad.abs().sum() > 0
