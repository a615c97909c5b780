"""The learnt table on disk, trained in partitions (gaescale.training.buckets): its subgraphs, its buckets and its
losses and gradients against the in-memory table and a dense computation."""
import numpy as np
import pytest
import torch

from conftest import dense_adjacency, random_edges
from gaescale import GAE, GCN, Graph
from gaescale.data.synthetic import community_graph
from gaescale.losses import pair_weights
from gaescale.training.buckets import (
    BucketEdges,
    DiskTable,
    EdgeSample,
    PartitionBuckets,
    bucket_order,
    part_bounds,
    row_adagrad_,
)
from gaescale.training.samplers import induced_subgraph
from gaescale.training.trainer import fit


def _graph(n=30, e=80, seed=0, weighted=False):
    edges = random_edges(n, e, seed)
    w = np.random.default_rng(seed).uniform(0.5, 2.0, edges.shape[1]).astype(np.float32) if weighted else None
    return Graph.from_edge_index(edges, n, canonical=True, edge_weight=w), edges


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("num_parts,parts", [(1, [0]), (4, [1]), (4, [0, 1]), (4, [1, 3]), (3, [0, 2])])
def test_bucket_edges_give_the_induced_subgraph(tmp_path, num_parts, parts, weighted):
    """The buckets' subgraph of one or two partitions is the subgraph their nodes induce (cut from the CSR), whatever
    the chunks the buckets were built in; the files go with close()."""
    graph, _ = _graph(weighted=weighted)
    bounds = part_bounds(graph.num_nodes, num_parts)
    nodes = np.concatenate([np.arange(bounds[p], bounds[p + 1]) for p in parts])
    want = induced_subgraph(graph, nodes)
    for chunk in (7, 1 << 22):  # many chunks of rows (each holding a few buckets), and one
        buckets = BucketEdges(graph, bounds, tmp_path, chunk=chunk)
        got = buckets.subgraph(parts)
        np.testing.assert_array_equal(got.node_ids, want.node_ids)
        np.testing.assert_array_equal(got.edge_index(), want.edge_index())
        if weighted:
            np.testing.assert_array_equal(got.edge_weight(), want.edge_weight())
        assert int(buckets.offsets[-1]) == graph.num_edges  # every edge in one bucket
        on_disk = sum(f.stat().st_size for f in buckets.directory.iterdir())
        assert 0 <= on_disk - BucketEdges.nbytes(graph.num_nodes, graph.num_edges, weighted) <= 2 * 128  # headers
        buckets.close()
    assert list(tmp_path.iterdir()) == []


def _banded(n=4000, e=40000, seed=2):
    """Edges between nodes at most 50 apart: a graph in a locality order, as a prepared graph's order keeps
    communities together."""
    rng = np.random.default_rng(seed)
    u = rng.integers(0, n - 50, e)
    return np.stack([u, u + rng.integers(1, 51, e)])


@pytest.mark.parametrize("order", ["locality", "random"])
def test_an_edge_sample_bounds_the_largest_bucket_from_above_and_closely(order):
    """The sample's estimate of the largest bucket subgraph's share of the edges, against the exact count over every
    edge: never below it, and within a few points of it, whether the node order keeps the edges within partitions or
    spreads them evenly."""
    edges = _banded()
    if order == "random":
        edges = np.random.default_rng(0).permutation(4000)[edges]
    graph = Graph.from_edge_index(edges, 4000)
    u, v = graph.edge_index()
    sample = EdgeSample.of(graph, size=100_000)
    for num_parts in (2, 3, 5, 8):
        bounds = part_bounds(4000, num_parts)
        pu, pv = (np.searchsorted(bounds, x, side="right") - 1 for x in (u, v))
        exact = max(np.mean(np.isin(pu, [i, j]) & np.isin(pv, [i, j]))  # the edges with both ends in i or j
                    for i in range(num_parts) for j in range(i + 1, num_parts))
        got = sample.largest_share(num_parts)
        assert exact <= got <= exact + 0.02, (num_parts, exact, got)
        if order == "random":  # about 4 / P^2: the within and between blocks of two partitions
            assert got < 6 / num_parts ** 2
        else:  # two neighbouring partitions keep nearly every edge of their nodes
            assert got > 1.9 / num_parts
    assert sample.largest_share(1) == 1.0


@pytest.mark.parametrize("parts", [1, 2, 3, 6, 7])
def test_bucket_order_visits_every_block_once(parts):
    order = bucket_order(parts)
    assert sorted(order) == [(i, j) for i in range(parts) for j in range(i, parts)]
    assert order[:parts] == [(i, i) for i in range(parts)]  # every partition's own block first
    rest = order[parts:]
    shared = sum(bool({*a} & {*b}) for a, b in zip(rest, rest[1:]))
    assert shared >= len(rest) - 1 - parts // 2  # only the step from an odd row's end to the next row swaps both


def test_part_bounds_cover_the_nodes_evenly():
    b = part_bounds(10, 3)
    np.testing.assert_array_equal(b, [0, 3, 6, 10])
    assert np.diff(part_bounds(1001, 7)).max() - np.diff(part_bounds(1001, 7)).min() <= 1


def test_row_adagrad_by_hand():
    rows, state = torch.tensor([[1.0, 2.0], [0.0, 0.0]]), torch.tensor([0.0, 3.0])
    grad = torch.tensor([[3.0, 4.0], [1.0, -1.0]])
    row_adagrad_(rows, state, grad, lr=0.5)
    np.testing.assert_allclose(state, [12.5, 4.0])  # mean of (9, 16); 3 + mean of (1, 1)
    np.testing.assert_allclose(rows, [[1 - 0.5 * 3 / 12.5 ** 0.5, 2 - 0.5 * 4 / 12.5 ** 0.5], [-0.25, 0.25]],
                               rtol=1e-6)


def test_disk_table_is_drawn_as_the_in_memory_one_and_keeps_what_it_stores(tmp_path):
    table = DiskTable(tmp_path / "t.npy", 50, 4, seed=3, chunk=7)
    bound = (6.0 / 54) ** 0.5
    assert np.abs(table.rows).max() <= bound and np.abs(table.rows).max() > bound / 2
    again = DiskTable(tmp_path / "u.npy", 50, 4, seed=3, chunk=50)  # the draw does not depend on the chunks
    np.testing.assert_array_equal(table.rows, again.rows)
    rows, state = table.load(10, 20)
    table.store(10, 20, rows + 1, state + 2)
    table.flush()
    on_disk = np.load(tmp_path / "t.npy")
    np.testing.assert_allclose(on_disk[10:20], rows.numpy() + 1)
    np.testing.assert_array_equal(np.load(tmp_path / "t.adagrad.npy")[10:20], 2.0)
    np.testing.assert_array_equal(on_disk[:10], again.rows[:10])


@pytest.mark.parametrize("first,second", [(4, (4, 7)), (5, (0, 5))])  # a block between partitions; a diagonal one
def test_negatives_cover_their_block_uniformly(first, second):
    m = 300_000
    u, v = PartitionBuckets.negatives(first, second, m, torch.Generator().manual_seed(1))
    assert u.min() >= 0 and u.max() < first and v.min() >= second[0] and v.max() < second[1]
    width = second[1] - second[0]
    counts = torch.bincount(u * width + (v - second[0]), minlength=first * width).double()
    expected = m / (first * width)
    # chi-square over the block's cells (12 or 25: 24 degrees of freedom at most, 99.9 % quantile ~51)
    assert ((counts - expected) ** 2 / expected).sum() < 51


class _AllPairs(PartitionBuckets):
    """Every pair of a block instead of a sample: the bucket's loss is then its exact share."""

    @staticmethod
    def negatives(first, second, m, generator):
        u, v = torch.meshgrid(torch.arange(first), torch.arange(*second), indexing="ij")
        return torch.stack([u.reshape(-1), v.reshape(-1)])


def _models(n, dims=(5, 3)):
    """The in-memory featureless GAE (table in its first layer) and the same model with the table as input."""
    torch.manual_seed(0)
    memory = GAE(GCN(None, list(dims), num_nodes=n), node_bias=n)
    with torch.no_grad():
        memory.node_bias.normal_(0, 0.3)
    given = GAE(GCN(None, list(dims), num_nodes=n, table="input"), node_bias=n)
    state = {k: v for k, v in memory.state_dict().items() if k != "encoder.layers.0.0.weight"}
    given.load_state_dict(state, strict=False)
    assert given.encoder.layers[0][0].weight.numel() == 0
    return memory, given


def _dense_block_loss(table, model, graph_edges, n, nodes, block, slots, loops):
    """The block's share of the balanced BCE loss, densely: the GCN on the dense adjacency of the subgraph that
    ``nodes`` induce, the sum over the block's ordered pairs and edges."""
    a = dense_adjacency(graph_edges, n)[np.ix_(nodes, nodes)].float()
    a_hat = a + torch.eye(len(nodes))
    d = a_hat.sum(1).rsqrt()
    a_hat = d[:, None] * a_hat * d[None, :]
    enc = model.encoder
    h = torch.relu(a_hat @ table + enc.biases[0])
    z = a_hat @ (h @ enc.layers[1][0].weight.T) + enc.biases[1]
    b = model.node_bias[torch.from_numpy(nodes)]
    s = z @ z.T + b[:, None] + b[None, :]
    target = a + (torch.eye(len(nodes)) if loops else 0)
    w0, w1 = pair_weights("balanced", n, slots + (n if loops else 0))
    mask = torch.zeros_like(s, dtype=torch.bool)
    (r0, r1), (c0, c1) = block
    mask[r0:r1, c0:c1] = True
    mask[c0:c1, r0:r1] = True
    l0, l1 = torch.nn.functional.softplus(s), torch.nn.functional.softplus(-s)
    return (w0 * l0 * mask).sum() + ((w1 * l1 - w0 * l0) * target * mask).sum()


@pytest.mark.parametrize("self_loops", [False, True])
def test_a_bucket_has_the_dense_loss_and_the_in_memory_table_gradients(tmp_path, self_loops):
    n = 30
    graph, edges = _graph(n)
    memory, given = _models(n)
    table = DiskTable(tmp_path / "t.npy", n, 5)
    table.rows[:] = memory.encoder.layers[0][0].weight.detach().T.numpy()
    strategy = _AllPairs(table, 3, lr=0.1, self_loops=self_loops)
    kwargs = dict(kind="bce", weighting="balanced", dense="sampled")
    buckets = BucketEdges(graph, strategy.bounds, tmp_path)
    for parts in ([0], [1, 2], [0, 2]):
        ranges = [(int(strategy.bounds[p]), int(strategy.bounds[p + 1])) for p in parts]
        nodes = np.concatenate([np.arange(a, b) for a, b in ranges])
        rows = torch.from_numpy(table.rows[nodes].copy()).requires_grad_()
        loss = strategy._bucket_loss(given, rows, graph, parts, buckets.subgraph(parts), None, kwargs)
        loss.backward()
        first = ranges[0][1] - ranges[0][0]
        block = ((0, first), (first, len(nodes)) if len(parts) == 2 else (0, first))
        t = memory.encoder.layers[0][0].weight.T[torch.from_numpy(nodes)].detach().clone().requires_grad_()
        want = _dense_block_loss(t, memory, edges, n, nodes, block, 2 * edges.shape[1], self_loops)
        want.backward()
        torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(rows.grad, t.grad, rtol=1e-4, atol=1e-8)
        # the in-memory table (the first layer's weight, trained with the rest): the same loss, and its gradient
        # is the rows' in the bucket's nodes and 0 elsewhere
        memory.zero_grad()
        in_memory = strategy._bucket_loss(memory, torch.empty(0), graph, parts, buckets.subgraph(parts), None,
                                           kwargs)
        in_memory.backward()
        torch.testing.assert_close(in_memory, loss, rtol=1e-6, atol=1e-8)
        grad = memory.encoder.layers[0][0].weight.grad.T
        torch.testing.assert_close(grad[torch.from_numpy(nodes)], rows.grad, rtol=1e-5, atol=1e-9)
        others = np.setdiff1d(np.arange(n), nodes)
        assert torch.count_nonzero(grad[torch.from_numpy(others)]) == 0


def test_one_partition_with_every_pair_is_the_exact_full_loss(tmp_path):
    n = 30
    graph, edges = _graph(n)
    memory, given = _models(n)
    table = DiskTable(tmp_path / "t.npy", n, 5)
    table.rows[:] = memory.encoder.layers[0][0].weight.detach().T.numpy()
    rows = table.tensor.clone().requires_grad_()
    whole = BucketEdges(graph, part_bounds(n, 1), tmp_path).subgraph([0])
    got = _AllPairs(table, 1, lr=0.1)._bucket_loss(given, rows, graph, [0], whole, None, dict(dense="sampled"))
    z = memory(None, graph)
    want = memory.loss(z, torch.from_numpy(edges), dense="exact")
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    got.backward()
    want.backward()
    torch.testing.assert_close(rows.grad, memory.encoder.layers[0][0].weight.grad.T, rtol=1e-4, atol=1e-8)


def _small(tmp_path, n=40):
    """A random graph of ``n`` nodes, the model with the table as input, its table on disk and the table's rows."""
    graph, _ = _graph(n, 120, seed=1)
    table = DiskTable(tmp_path / "t.npy", n, 5, seed=1)
    return graph, _models(n)[1], table, np.array(table.rows)


def test_an_epoch_updates_the_rows_on_disk_with_row_wise_adagrad(tmp_path):
    n = 40
    graph, given, table, before = _small(tmp_path, n)
    strategy = PartitionBuckets(table, 4, lr=0.05)
    gen = torch.Generator().manual_seed(0)
    steps = strategy.steps(given, None, graph, None, gen, dict(dense="sampled"))
    expected, seen = before.copy(), 0
    state = np.zeros(n, np.float32)
    for loss in steps:  # as the trainer does: backward, then the next step applies the rows' update
        given.zero_grad()
        loss.backward()
        frame = steps.gi_frame.f_locals
        rows, parts = frame["rows"], frame["parts"]
        nodes = np.concatenate([np.arange(strategy.bounds[p], strategy.bounds[p + 1]) for p in parts])
        g = rows.grad.numpy()
        state[nodes] += (g ** 2).mean(1)
        expected[nodes] -= 0.05 * g / (np.sqrt(state[nodes]) + 1e-10)[:, None]
        seen += 1
    assert seen > 0
    on_disk = np.load(tmp_path / "t.npy")
    np.testing.assert_allclose(on_disk, expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.load(tmp_path / "t.adagrad.npy"), state, rtol=1e-5)
    assert not np.allclose(on_disk, before)


def test_fit_trains_the_table_and_keeps_the_last_epoch(tmp_path):
    n = 400
    data = community_graph(n, 2000, community_size=20, seed=2)
    graph = Graph.from_edge_index(data.edge_index, n)
    _, given = _models(n, dims=(8, 4))
    table = DiskTable(tmp_path / "t.npy", n, 8, seed=2)
    pos, neg = data.edge_index[:, :300], np.random.default_rng(0).integers(0, n, (2, 300))
    result = fit(given, table.tensor, graph, None, strategy=PartitionBuckets(table, 3, lr=0.1), epochs=30,
                 val=(pos, neg), loss_kwargs=dict(dense="sampled"), progress=False, patience=1000)
    losses = [r["loss"] for r in result.history]
    assert result.best_epoch == 30 and len(losses) == 30  # the last epoch's, not the best validation's
    assert result.best_val_auc == result.history[-1]["val_auc"] > 0.8  # communities: its edges are learnt
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5])


def test_an_epoch_removes_its_buckets_and_a_killed_epochs(tmp_path):
    graph, given, table, _ = _small(tmp_path)
    stale = tmp_path / ".table-buckets-killed"  # what a killed process's epoch left beside the table
    stale.mkdir()
    (stale / "edges.npy").write_bytes(b"x" * 100)
    steps = PartitionBuckets(table, 4, lr=0.05).steps(given, None, graph, None, torch.Generator(), {})
    next(steps).backward()
    assert [p.name.startswith(".table-buckets-") for p in tmp_path.iterdir()].count(True) == 1  # this epoch's only
    for loss in steps:
        loss.backward()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.adagrad.npy", "t.npy"]


def test_buckets_that_cannot_be_built_leave_nothing(tmp_path, monkeypatch):
    graph, _ = _graph()
    monkeypatch.setattr(BucketEdges, "_build", lambda self, g, c: (_ for _ in ()).throw(OSError("No space left")))
    with pytest.raises(OSError, match="No space"):
        BucketEdges(graph, part_bounds(graph.num_nodes, 3), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_table_stopped_mid_epoch_is_written_back(tmp_path):
    graph, given, table, before = _small(tmp_path)
    steps = PartitionBuckets(table, 4, lr=0.05).steps(given, None, graph, None, torch.Generator(), {})
    next(steps).backward()
    steps.close()  # the trainer's time limit: the last step's rows are updated and written back
    assert not np.allclose(np.load(tmp_path / "t.npy"), before)
