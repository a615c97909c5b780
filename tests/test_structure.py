"""The structural part of the logit (gaescale.structure): pair features, the loss and the rankings, each against a
dense float64 reference on small graphs."""
import numpy as np
import pytest
import torch

from conftest import brute_force_ranks, dense_adjacency, dense_features, dense_structure, random_edges
from gaescale.graph import Graph
from gaescale.losses import KINDS, reconstruction_loss
from gaescale.models import GAE, bias_metric, with_bias
from gaescale.run.scan import top_k, with_two_hop
from gaescale.sparse import PairIndex
from gaescale.structure import (
    PairFeatures,
    SampledTwoHop,
    StructuralPart,
    StructuralScores,
    TwoHop,
    calibrate,
    two_hop_pool,
)
from gaescale.training.evaluate import filtered_ranking, pair_scores


def _graph(n=40, e=120, seed=0):
    edges = random_edges(n, e, seed)
    return edges, Graph.from_edge_index(edges, n, canonical=True)


def test_pair_features_match_the_dense_products():
    edges, g = _graph()
    ref = dense_features(edges, g.num_nodes)
    rng = np.random.default_rng(1)
    u, v = rng.integers(0, g.num_nodes, (2, 300))
    got = PairFeatures(g).raw(u, v)
    np.testing.assert_allclose(got, ref[u, v], rtol=1e-12)
    phi = PairFeatures(g).pairs(u, v).numpy()
    expect = np.log1p(ref[u, v])
    expect[u == v] = 0.0
    np.testing.assert_allclose(phi, expect, rtol=1e-6)
    assert (u == v).any()  # a self pair's 0 is checked too
    chunked = PairFeatures(g).pairs(u, v, remember=False, chunk=7).numpy()  # 7 pairs at a time, not remembered
    np.testing.assert_allclose(chunked, expect, rtol=1e-6)


def test_pair_features_are_column_major_and_the_part_reads_them_as_row_major_values():
    """Every phi the loss reads is stored feature by feature (stride 1 down a column); ``w . phi`` and its gradient
    in ``w`` are those of the same values laid out by rows."""
    edges, g = _graph()
    u, v = np.random.default_rng(2).integers(0, g.num_nodes, (2, 200))
    f = PairFeatures(g)
    pool = TwoHop(g, pool_size=50, seed=0)
    drawn = SampledTwoHop(g).draw(60, torch.Generator().manual_seed(0))[1]
    kept = [f.pairs(u, v), f.pairs(u, v, remember=False, chunk=7), pool.pool_phi, drawn]
    for phi in kept:
        assert phi.shape[1] == 3 and phi.stride() == (1, phi.shape[0])
    part = StructuralPart(init=0.5)
    part.theta.data = torch.tensor([0.3, -1.0, 2.0])
    for phi in kept:
        rows = phi.contiguous()
        assert rows.stride() == (3, 1)
        got, expect = part(phi), part(rows)
        torch.testing.assert_close(got, expect)
        g_out = torch.rand(phi.shape[0])
        grad_got = torch.autograd.grad(got, part.theta, g_out)[0]
        grad_expect = torch.autograd.grad(expect, part.theta, g_out)[0]
        torch.testing.assert_close(grad_got, grad_expect)


def test_candidates_are_the_two_hop_nodes_and_batches_cover_the_queries():
    edges, g = _graph()
    a = dense_adjacency(edges, g.num_nodes).numpy()
    two_hop = (a @ a) > 0
    np.fill_diagonal(two_hop, False)
    q = np.array([5, 0, 17, 5])
    rows, nodes = PairFeatures(g).candidates(q)
    for r, u in enumerate(q):
        assert sorted(nodes[rows == r]) == list(np.flatnonzero(two_hop[u]))
    f = PairFeatures(g)
    queries = np.arange(g.num_nodes)
    parts = list(f.query_batches(queries, budget=30))
    assert np.array_equal(np.concatenate([queries[p] for p in parts]), queries)
    for p in parts:  # within the budget, or a single query
        assert p.stop - p.start == 1 or (f.paths_of(queries[p]) + 1).sum() <= 30


def test_candidate_features_are_the_pair_features_of_every_two_hop_candidate():
    edges, g = _graph()
    edges = np.concatenate([edges, [[3], [g.num_nodes]]], axis=1)  # a neighbour of degree 1 (AA's weight 0 there)
    g = Graph.from_edge_index(edges, g.num_nodes + 1, canonical=True)
    q = np.array([5, 0, 17, 3, g.num_nodes - 1])
    rows, nodes, raw = PairFeatures(g).candidate_features(q)
    want_rows, want_nodes = PairFeatures(g).candidates(q)
    assert np.array_equal(rows, want_rows) and np.array_equal(nodes, want_nodes)
    np.testing.assert_allclose(raw, dense_features(edges, g.num_nodes)[q[rows], nodes], rtol=1e-12)
    np.testing.assert_allclose(raw, PairFeatures(g).raw(q[rows], nodes), rtol=1e-12)
    # looked up among them: the structural part of any pairs of the queries, 0 where no common neighbour
    st = StructuralScores(g, torch.tensor([0.7, 1.3, 2.1]))
    ask_rows = np.repeat(np.arange(q.size), g.num_nodes)
    ask_nodes = np.tile(np.arange(g.num_nodes), q.size)
    got = st.of_candidates(q, ask_rows, ask_nodes)
    np.testing.assert_allclose(got, st.pairs(q[ask_rows], ask_nodes), rtol=1e-12, atol=0)
    assert np.count_nonzero(got) == rows.size  # the candidates, and no other pair
    # the last queries' candidates are kept, and another batch's (a query array reused in place too) are its own
    other = q[::-1].copy()
    for asked in (q, other, q, other):
        r, c, values = st.candidates(asked)
        np.testing.assert_allclose(values, st.pairs(asked[r], c), rtol=1e-12, atol=0)
    other[:] = q  # the last queries' array, changed in place by its owner: the candidates follow
    fresh = StructuralScores(g, torch.tensor([0.7, 1.3, 2.1])).candidates(q)
    assert all(np.array_equal(a, b) for a, b in zip(st.candidates(other), fresh))


def test_two_hop_pool_is_every_two_hop_pair_or_an_unbiased_sample_of_them():
    edges, g = _graph()
    a = dense_adjacency(edges, g.num_nodes).numpy()
    cn = a @ a
    np.fill_diagonal(cn, 0)
    f = PairFeatures(g)
    u, v, w, _ = two_hop_pool(g, f, 10**6, np.random.default_rng(0))  # small enough: all of T, weight 1
    assert sorted(zip(u.tolist(), v.tolist())) == sorted(zip(*np.nonzero(cn)))
    assert np.all(w == 1)
    # a sample: ordered wedges u - c - v, each pair weighing W / (m CN); sum w f estimates sum over T of f
    u, v, w, raw = two_hop_pool(g, _Few(f), 200_000, np.random.default_rng(1))
    np.testing.assert_array_equal(raw[:, 0], cn[u, v])
    assert np.all(u != v) and np.all(cn[u, v] > 0)
    fvals = np.sin(np.arange(g.num_nodes))[:, None] + np.cos(np.arange(g.num_nodes))[None, :]
    assert (w * fvals[u, v]).sum() == pytest.approx((fvals * (cn > 0)).sum(), rel=0.02)
    assert w.sum() == pytest.approx((cn > 0).sum(), rel=0.02)


class _Few:
    """PairFeatures whose graph claims more two-hop paths than any pool size: the pool is then a sample."""

    def __init__(self, features):
        self.raw, self.candidates, self.total_paths = features.raw, features.candidates, features.total_paths + 10**9


def test_structural_part_is_nonnegative_and_starts_at_init():
    part = StructuralPart(init=0.5)
    np.testing.assert_allclose(part.weights.detach().numpy(), [0.5] * 3, rtol=1e-6)
    part.theta.data = torch.tensor([-30.0, 0.0, 4.0])
    assert bool((part(torch.rand(7, 3)) >= 0).all())


def test_loss_with_structure_matches_a_dense_reference():
    """Value and gradients (z and the structural weights) against the loss written densely in float64: every
    non-edge pair's l0 and every edge's l1 of the whole logit (balanced weights), and the hard term."""
    n, d = 30, 4
    edges, g = _graph(n, 70, seed=2)
    torch.manual_seed(0)
    z0 = torch.randn(n, d, dtype=torch.float64)
    b0 = torch.randn(n, dtype=torch.float64) * 0.1
    two_hop = TwoHop(g, pool_size=10**6, weight=0.7, seed=3)  # all of T: the whole logits' loss, exactly
    assert two_hop.negatives.num_pairs > 50
    model = GAE(torch.nn.Identity(), node_bias=n, structure=StructuralPart()).double()
    model.node_bias.data = b0.clone()
    model.structure.theta.data = torch.tensor([0.1, -0.3, 0.4], dtype=torch.float64)
    pairs = PairIndex.from_pairs(torch.from_numpy(edges), n)

    z_leaf = z0.clone().requires_grad_(True)
    got = model.loss(model.add_bias(z_leaf), pairs, two_hop=two_hop, kind="bce", dense="exact", weighting="balanced")
    got.backward()

    z_ref = z0.clone().requires_grad_(True)
    theta = model.structure.theta.detach().clone().requires_grad_(True)
    zb = with_bias(z_ref, b0)
    m = bias_metric(zb.shape[1], dtype=torch.float64)
    a = dense_adjacency(edges, n)
    phi = torch.from_numpy(np.log1p(dense_features(edges, n)))
    phi[torch.arange(n), torch.arange(n)] = 0
    e = (zb * m) @ zb.T
    s = e + phi @ torch.nn.functional.softplus(theta)
    bce = KINDS["bce"]
    ref = (bce.l0(s) * (1 - a)).sum() / n**2 + (bce.l1(s) * a).sum() / a.sum()  # every pair's whole logit
    neg = two_hop.negatives.pairs()
    ref = ref + 0.7 * bce.l0(s[neg[0], neg[1]]).mean()
    ref.backward()
    # the loss keeps phi in float32 (training's pair features): agreement to its rounding
    assert got.item() == pytest.approx(ref.item(), rel=1e-7)
    torch.testing.assert_close(z_leaf.grad, z_ref.grad, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(model.structure.theta.grad, theta.grad, rtol=1e-6, atol=1e-9)


def test_edge_offset_changes_only_the_edge_term():
    n = 12
    edges, _ = _graph(n, 20, seed=4)
    z = torch.randn(n, 3, dtype=torch.float64)
    pairs = PairIndex.from_pairs(torch.from_numpy(edges), n)
    zero = reconstruction_loss(z, pairs, n, dense="exact", edge_offset=torch.zeros(pairs.num_pairs, dtype=z.dtype))
    assert zero.item() == pytest.approx(reconstruction_loss(z, pairs, n, dense="exact").item(), rel=1e-12)


def _setup(n=60, e=200, d=5, seed=0):
    edges, g = _graph(n, e, seed)
    rng = np.random.default_rng(seed)
    z = torch.from_numpy(rng.standard_normal((n, d)))
    weights = np.array([0.8, 1.3, 0.4])
    return edges, g, z, StructuralScores(g, torch.tensor(weights)), dense_structure(edges, n, weights)


@pytest.mark.parametrize("chunk", [1, 3, 1 << 20])  # the structural part is added chunk by chunk
def test_pair_scores_add_the_structural_part(chunk):
    edges, g, z, st, dense_g = _setup()
    pairs = np.array([[0, 3, 7, 7, 12, 40, 5], [1, 9, 2, 7, 30, 41, 59]])
    got = pair_scores(z, pairs, structure=st, chunk=chunk)
    np.testing.assert_allclose(got, (z @ z.T).numpy()[pairs[0], pairs[1]] + dense_g[pairs[0], pairs[1]], rtol=1e-12)


@pytest.mark.parametrize("batch", [3, 256])
def test_filtered_ranking_with_structure_matches_brute_force(batch):
    edges, g, z, st, dense_g = _setup()
    n = g.num_nodes
    held = random_edges(n, 40, seed=9)
    held = held[:, ~dense_adjacency(edges, n).numpy()[held[0], held[1]].astype(bool)]
    scores = (z @ z.T).numpy() + dense_g
    known = dense_adjacency(np.concatenate([edges, held], 1), n).numpy()
    ranks = brute_force_ranks(scores, held, known)
    got = filtered_ranking(z, held, [g, held], structure=st, batch=batch, block=7)
    assert got["filtered_mrr"] == pytest.approx(np.mean(1 / ranks), rel=1e-12)
    assert got["filtered_hits@10"] == pytest.approx(np.mean(ranks <= 10))


def test_filtered_ranking_with_structure_and_bias_metric():
    edges, g, z, st, dense_g = _setup(seed=3)
    zb = with_bias(z, torch.from_numpy(np.random.default_rng(1).standard_normal(z.shape[0])))
    metric = bias_metric(zb.shape[1], dtype=torch.float64)
    held = random_edges(g.num_nodes, 30, seed=5)
    scores = ((zb * metric) @ zb.T).numpy() + dense_g
    known = dense_adjacency(np.concatenate([edges, held], 1), g.num_nodes).numpy()
    ranks = brute_force_ranks(scores, held, known)
    got = filtered_ranking(zb, held, [g, held], structure=st, metric=metric)
    assert got["filtered_mrr"] == pytest.approx(np.mean(1 / ranks), rel=1e-12)


@pytest.mark.parametrize("exclude", [False, True])
def test_top_k_with_two_hop_is_the_brute_force_top_k(exclude):
    edges, g, z, st, dense_g = _setup(n=80, e=260, seed=6)
    n, k = g.num_nodes, 6
    z32 = z.float()
    scores = (z32 @ z32.T).double().numpy() + dense_g
    np.fill_diagonal(scores, -np.inf)
    if exclude:
        scores[dense_adjacency(edges, n).numpy() > 0] = -np.inf
    queries = np.array([0, 5, 11, 79, 40])
    s, c = top_k(z32, k, queries=queries, exclude=g if exclude else None)
    s, c = with_two_hop(s, c, z32, st, queries=queries, exclude=g if exclude else None, batch=2)
    for row, q in enumerate(queries):
        expect = np.argsort(-scores[q], kind="stable")[:k]
        np.testing.assert_allclose(s[row], scores[q, expect], rtol=1e-5)
        assert set(c[row]) == set(expect)


def test_ranking_score_is_the_geometric_mean_of_the_validation_ranking():
    from gaescale.structure import ranking_score
    assert ranking_score({"val_mrr": 0.0765, "val_hits@10": 0.16, "val_hits@100": 0.431}) == pytest.approx(
        (0.0765 * 0.16 * 0.431) ** (1 / 3))
    # the demo graph's validation at scales 1 and 2: a little MRR for much Hits@100 is taken
    assert ranking_score({"val_mrr": 0.0753, "val_hits@10": 0.152, "val_hits@100": 0.487}) > ranking_score(
        {"val_mrr": 0.0765, "val_hits@10": 0.16, "val_hits@100": 0.431})


def test_scale_multiplies_the_weights_and_calibrate_keeps_the_best_validation_factor():
    part = StructuralPart(init=0.7)
    part.scale_(4.0)
    np.testing.assert_allclose(part.weights.detach().numpy(), [2.8] * 3, rtol=1e-6)
    edges, g = _graph()
    f = PairFeatures(g)
    seen = []

    def rank(structure):  # a scripted validation ranking: best at a factor of 8 (12 and 16 tie below it)
        factor = structure.weights[0] / 2.8
        seen.append(round(factor, 3))
        return {"val_mrr": {1.0: 0.1, 8.0: 0.3, 12.0: 0.3}.get(round(factor, 3), 0.2)}  # alone: its own mean
    factor, before, after = calibrate(part, rank, f, scales=(1.0, 4.0, 8.0, 12.0))
    assert factor == 8.0 and (before, after) == pytest.approx((0.1, 0.3)) and seen == [1.0, 4.0, 8.0, 12.0]
    np.testing.assert_allclose(part.weights.detach().numpy(), [22.4] * 3, rtol=1e-6)


@pytest.mark.parametrize("options, word", [(dict(structure="on", strategy="cluster"), "strategy='cluster'"),
                                           (dict(structure="on", decoder="hadamard"), "decoder='hadamard'"),
                                           (dict(structure="on", directed=True), "directed=True"),
                                           (dict(structure="off", hard_negatives=1.0), "structure='off'"),
                                           (dict(structure="off", pool_ratio=0.5), "'pool_ratio'.*structure='off'")])
def test_the_structural_part_where_it_cannot_train_is_refused_by_name(options, word):
    from gaescale.config import TrainConfig
    from gaescale.errors import ParameterError
    with pytest.raises(ParameterError, match=word):
        TrainConfig(**options)


def test_draw_wedges_estimates_every_sum_over_the_two_hop_pairs_without_bias():
    edges, g = _graph()
    edges = np.concatenate([edges, [[0], [g.num_nodes]]], axis=1)  # a node of degree 1: its slot names no wedge
    g = Graph.from_edge_index(edges, g.num_nodes + 1, canonical=True)
    a = dense_adjacency(edges, g.num_nodes).numpy()
    cn = a @ a
    np.fill_diagonal(cn, 0)
    pairs, phi, weight = SampledTwoHop(g).draw(200_000, torch.Generator().manual_seed(0))
    u, v = pairs
    assert np.all(u != v) and np.all(cn[u, v] > 0) and u.size < 200_000  # the degree-1 centre's slots dropped
    np.testing.assert_allclose(phi.numpy(), np.log1p(dense_features(edges, g.num_nodes)[u, v]), rtol=1e-6)
    fvals = 2 + np.sin(np.arange(g.num_nodes))[:, None] + np.cos(np.arange(g.num_nodes))[None, :]
    w = weight.numpy()
    assert (w * fvals[u, v]).sum() == pytest.approx((fvals * (cn > 0)).sum(), rel=0.02)
    assert w.sum() == pytest.approx((cn > 0).sum(), rel=0.02)


@pytest.mark.parametrize("ranges", [[(0, 14)], [(14, 41)], [(0, 14), (27, 41)], [(14, 27), (27, 41)]])
def test_block_wedges_estimate_every_sum_over_the_blocks_two_hop_pairs_without_bias(ranges):
    edges, g = _graph()
    edges = np.concatenate([edges, [[0], [g.num_nodes]]], axis=1)  # a node of degree 1
    g = Graph.from_edge_index(edges, g.num_nodes + 1, canonical=True)
    a = dense_adjacency(edges, g.num_nodes).numpy()
    cn = a @ a
    np.fill_diagonal(cn, 0)
    block = np.zeros_like(cn, dtype=bool)
    (r0, r1), (c0, c1) = ranges[0], ranges[-1]
    block[r0:r1, c0:c1] = block[c0:c1, r0:r1] = True  # the block and its transpose (the same on the diagonal)
    pairs, phi, weight = SampledTwoHop(g).draw(200_000, torch.Generator().manual_seed(0), ranges=ranges)
    u, v = pairs
    assert np.all(block[u, v]) and np.all(cn[u, v] > 0)
    np.testing.assert_allclose(phi.numpy(), np.log1p(dense_features(edges, g.num_nodes)[u, v]), rtol=1e-6)
    fvals = 2 + np.sin(np.arange(g.num_nodes))[:, None] + np.cos(np.arange(g.num_nodes))[None, :]
    w = weight.numpy()
    assert (w * fvals[u, v]).sum() == pytest.approx((fvals * ((cn > 0) & block)).sum(), rel=0.03)
    assert w.sum() == pytest.approx(((cn > 0) & block).sum(), rel=0.03)


class _Lookup(torch.nn.Module):
    """An encoder that returns its input rows: a learnt table's, so that a step's z are the nodes' own rows."""

    def forward(self, x, graph):
        return x


def _exact_case(n=30):
    """A small graph, rows ``x`` that a lookup encoder returns as ``z``, a float64 model with a structural part, and
    the loss of its whole logits computed exactly (every pair, all of T) with its gradient in the structural weights."""
    edges, g = _graph(n, 70, seed=2)
    torch.manual_seed(0)
    x = torch.randn(n, 3, dtype=torch.float64)
    model = GAE(_Lookup(), node_bias=n, structure=StructuralPart()).double()
    model.node_bias.data = torch.randn(n, dtype=torch.float64) * 0.1
    model.structure.theta.data = torch.tensor([0.1, -0.3, 0.4], dtype=torch.float64)
    pairs = PairIndex.from_pairs(torch.from_numpy(edges), n)
    exact = model.loss(model(x, g), pairs, two_hop=TwoHop(g, pool_size=10**6), kind="bce", dense="exact")
    (exact_grad,) = torch.autograd.grad(exact, model.structure.theta)
    return n, g, x, model, pairs, exact, exact_grad


def test_neighbour_sampled_steps_with_the_structural_part_estimate_the_whole_loss():
    """The mean of many steps of NeighborLinks (edges, uniform pairs and drawn wedges) against the loss of the whole
    logits computed exactly (every pair, all of T), value and the structural weights' gradient."""
    from gaescale.training.strategies import NeighborLinks
    n, g, x, model, pairs, exact, exact_grad = _exact_case()
    gen, two_hop, values, grads = torch.Generator().manual_seed(1), SampledTwoHop(g), [], []
    while len(values) < 3000:  # epochs of 5 steps (70 edges, 16 a step)
        for loss in NeighborLinks([2], 16).steps(model, x, g, None, gen, {"two_hop": two_hop, "kind": "bce"}):
            values.append(loss.item())
            grads.append(torch.autograd.grad(loss, model.structure.theta)[0].numpy())
    values, grads = np.array(values), np.array(grads)
    assert abs(values.mean() - exact.item()) < 4 * values.std() / np.sqrt(values.size)
    assert np.all(np.abs(grads.mean(0) - exact_grad.numpy()) < 4 * grads.std(0) / np.sqrt(values.size) + 1e-12)
    with pytest.raises(ValueError, match="structural part"):  # a model with one and no draws: refused, not ignored
        next(NeighborLinks([2], 16).steps(model, x, g, None, torch.Generator(), {}))


def test_partitioned_buckets_with_the_structural_part_estimate_the_whole_loss(tmp_path):
    """The sum of an epoch's bucket losses (each its block's edges with their pair features, uniform pairs of the
    block and two-hop pairs drawn in it), averaged over many epochs, against the loss of the whole logits computed
    exactly: value and the structural weights' gradient. The encoder returns the table's rows, so that no subgraph's
    approximation enters."""
    from gaescale.training.buckets import BucketEdges, DiskTable, PartitionBuckets, bucket_order
    n, g, x, model, pairs, exact, exact_grad = _exact_case()
    strategy = PartitionBuckets(DiskTable(tmp_path / "t.npy", n, 3), 3, lr=0.1)
    buckets = BucketEdges(g, strategy.bounds, tmp_path)
    kwargs = {"two_hop": SampledTwoHop(g), "kind": "bce"}
    gen, values, grads = torch.Generator().manual_seed(1), [], []
    for _ in range(600):
        epoch = sum(strategy._bucket_loss(model, x[int(strategy.bounds[parts[0]]):int(strategy.bounds[parts[0] + 1])]
                                          if len(parts) == 1 else torch.cat([x[int(strategy.bounds[p]):
                                                                                int(strategy.bounds[p + 1])]
                                                                              for p in parts]),
                                          g, parts, buckets.subgraph(parts), gen, kwargs)
                    for parts in ([i] if i == j else [i, j] for i, j in bucket_order(3)))
        values.append(epoch.item())
        grads.append(torch.autograd.grad(epoch, model.structure.theta)[0].numpy())
    values, grads = np.array(values), np.array(grads)
    tolerance = 4 * grads.std(0) / np.sqrt(values.size)
    assert abs(values.mean() - exact.item()) < 4 * values.std() / np.sqrt(values.size)
    assert np.all(np.abs(grads.mean(0) - exact_grad.numpy()) < tolerance + 1e-12)
    # both structural terms move the gradient by more than the tolerance: the edges' (all of it without the two-hop
    # pairs) and the two-hop pairs' correction (what an empty pool leaves out)
    no_pairs = model.loss(model(x, g), pairs, two_hop=TwoHop(g, pool_size=0), kind="bce", dense="exact")
    (edges_grad,) = torch.autograd.grad(no_pairs, model.structure.theta)
    assert np.all(np.abs(edges_grad.numpy()) > 3 * tolerance)
    assert np.all(np.abs(exact_grad.numpy() - edges_grad.numpy()) > 3 * tolerance)
    with pytest.raises(ValueError, match="structural part"):  # a model with one and no draws: refused, not ignored
        next(strategy.steps(model, None, g, None, torch.Generator(), {}))


@pytest.mark.parametrize("keeps", [True, False])
def test_partitioned_buckets_compute_their_edges_pair_features_once_where_they_fit(tmp_path, monkeypatch, keeps):
    """A bucket's edges are the same every epoch: their pair features are computed in the first and kept where the
    graph is small enough (PartitionBuckets.keeps_phi), else computed again; the losses are the same either way."""
    from gaescale.training.buckets import DiskTable, PartitionBuckets
    n = 30
    _, g = _graph(n, 70, seed=2)
    model = GAE(_Lookup(), node_bias=n, structure=StructuralPart())
    table = DiskTable(tmp_path / "t.npy", n, 3)
    strategy = PartitionBuckets(table, 3, lr=0.0)  # lr 0: the rows stay, so that epochs are comparable
    monkeypatch.setattr(PartitionBuckets, "keeps_phi", staticmethod(lambda num_nodes, slots: keeps))
    two_hop, asked = SampledTwoHop(g), []
    monkeypatch.setattr(two_hop, "phi", lambda pairs: asked.append(pairs.shape[1]) or SampledTwoHop.phi(two_hop,
                                                                                                          pairs))
    losses = []
    for _ in range(2):
        gen = torch.Generator().manual_seed(3)  # the same draws each epoch
        epoch = [loss.item() for loss in strategy.steps(model, table.tensor, g, None, gen, {"two_hop": two_hop})]
        losses.append(epoch)
    assert len(asked) == (6 if keeps else 12)  # 6 buckets of 3 partitions
    assert losses[0] == losses[1]


@pytest.mark.parametrize("strategy, structure", [("full", "on"), ("neighbor", "on"), ("partitioned", "on"),
                                                 ("cluster", "off"), ("fastgae", "off")])
def test_auto_trains_the_structural_part_where_its_loss_can_be_estimated(strategy, structure):
    from gaescale.config import TrainConfig
    from gaescale.errors import ParameterError
    from gaescale.parallel.runtime import Local
    from gaescale.run.ranking import resolve_structure
    got = resolve_structure(TrainConfig(), strategy, Local())
    assert (got.structure, got.select) == (structure, "mrr" if structure == "on" else "auc")
    if strategy != "full":  # the hard negatives' pool is drawn once over the whole graph: full batch only
        with pytest.raises(ParameterError, match="'hard_negatives' parameter of train must be 0 where"):
            resolve_structure(TrainConfig(hard_negatives=1.0), strategy, Local())
        with pytest.raises(ParameterError, match="'pool_ratio' parameter of train must be None .unset. where"):
            resolve_structure(TrainConfig(pool_ratio=0.5), strategy, Local())
    else:
        assert resolve_structure(TrainConfig(pool_ratio=0.5), strategy, Local()).pool_ratio == 0.5


@pytest.mark.parametrize("ratio", [None, 0.5])
def test_full_batch_draws_a_pool_of_pool_ratio_pairs_a_training_edge(monkeypatch, ratio):
    import gaescale
    from gaescale.config import POOL_RATIO
    from gaescale.run import ranking
    sizes = []

    def recorded(graph, *, pool_size, **kwargs):
        sizes.append((pool_size, graph.num_edges))
        return TwoHop(graph, pool_size=pool_size, **kwargs)

    monkeypatch.setattr(ranking, "TwoHop", recorded)
    g = gaescale.community_graph(300, 1500, seed=0)
    metrics = gaescale.train(data=g, strategy="full", pool_ratio=ratio, epochs=2, hidden="4", dim=2, quiet=True,
                             report=False, checkpoint_every=0).metrics
    [(size, train_edges)] = sizes
    assert train_edges == metrics["train_edges"] and size == round((ratio or POOL_RATIO) * train_edges)
