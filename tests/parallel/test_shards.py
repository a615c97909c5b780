"""The training graph and features sharded over the ranks of a gloo group (3 processes on 127.0.0.1)."""
from datetime import timedelta

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from conftest import free_port, random_edges
from gaescale.data.split import hashed_rows, split_edges, split_hashed
from gaescale.encoders import GCN, SAGE
from gaescale.graph import Graph
from gaescale.models import GAE, VGAE
from gaescale.parallel.runtime import Dist
from gaescale.parallel.shards import embed_sharded, node_bounds, partition
from gaescale.training.samplers import neighbor_subgraph, sample_edges

N = 400


def _graph() -> Graph:
    edges = random_edges(N - 20, 2500, seed=7)  # the last 20 nodes are isolated
    edges[:, :40] = np.stack([np.zeros(40, np.int64), np.arange(1, 41)])  # node 0 is a hub
    return Graph.from_edge_index(edges, N)


def _worker(rank: int, world: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                           timeout=timedelta(seconds=60))
    try:
        group, graph = Dist(rank, world, "gloo"), _graph()
        x = torch.randn(N, 5, generator=torch.Generator().manual_seed(0))
        train = split_edges(graph, 0.05, 0.10, seed=1).train_graph()
        sharded, features = partition(group, graph, train, x)[:2]
        bounds = node_bounds(graph.indptr, world)
        lo, hi = train.indptr[bounds[rank]], train.indptr[bounds[rank + 1]]
        assert np.array_equal(sharded.indptr, train.indptr) and sharded.indices.size == train.indices.size
        assert np.array_equal(sharded.indices.local, train.indices[lo:hi])  # this rank holds its rows only
        assert torch.equal(features.local, x[bounds[rank]:bounds[rank + 1]])

        # reads of any entries and feature rows, a different number on each rank (none on the last)
        rng = np.random.default_rng(rank)
        keys = rng.integers(0, train.indices.size, 0 if rank == world - 1 else 50 + 30 * rank)
        assert np.array_equal(sharded.indices[keys], train.indices[keys])
        rows = torch.from_numpy(rng.integers(0, N, 0 if rank == world - 1 else 40 + rank))
        assert torch.equal(features[rows], x[rows])

        # sampling from the shards draws what sampling from the whole graph does, bit for bit
        for name, g in (("whole", train), ("sharded", sharded)):
            gen = torch.Generator().manual_seed(10 + rank)
            pairs, loops = sample_edges(g, 64, gen, self_loops=True)
            sub, hops = neighbor_subgraph(g, np.unique(pairs), [3, 2], gen)
            if name == "whole":
                expected = (pairs, loops, sub.node_ids, sub.indptr, sub.indices)
        for a, b in zip(expected, (pairs, loops, sub.node_ids, sub.indptr, sub.indices)):
            assert np.array_equal(a, b)
        assert np.all(graph.has_edges(np.concatenate(hops["targets"]), np.concatenate(hops["neighbors"])))

        # a rank that does not hold the training graph computes its rows from the whole graph's
        hashed = split_hashed(graph, 0.05, 0.10, seed=3).train_graph()
        rows = hashed_rows(graph, bounds[rank], bounds[rank + 1], 0.05, 0.10, seed=3)[:2]
        own = partition(group, graph, hashed if rank == 0 else None, None, rows=rows).graph
        assert np.array_equal(own.indptr, hashed.indptr)
        keys = rng.integers(0, hashed.indices.size, 100)
        assert np.array_equal(own.indices[keys], hashed.indices[keys])

        # rank 0's weights reach every rank
        model = GAE(GCN(5, [4]))
        torch.nn.init.constant_(model.encoder.lins[0].weight, float(rank))
        group.broadcast_state(model)
        assert torch.equal(model.encoder.lins[0].weight, torch.zeros(4, 5))

        # every rank embeds its own nodes, fetching its neighbours' rows: rank 0 gets a forward pass's z
        with_x, without = partition(group, graph, train, x), partition(group, graph, train, None)
        for name, model in _models():
            featureless = model.encoder.featureless
            z = embed_sharded(model, without if featureless else with_x, block=37)  # a different number of
            if rank:  # blocks on each rank
                assert z is None
                continue
            expected = model.embed(None if featureless else x, train)
            torch.testing.assert_close(z, expected, rtol=1e-5, atol=1e-6, msg=name)
    finally:
        dist.destroy_process_group()


def _models():
    """The same weights on every rank; dropout, which evaluation must not apply."""
    torch.manual_seed(0)
    for name, enc in (("gcn", GCN), ("sage", SAGE)):
        yield name, GAE(enc(5, [16, 12, 4], dropout=0.5))
        yield f"featureless {name}", GAE(enc(None, [8, 4], num_nodes=N, dropout=0.5))
    yield "vgae", VGAE(GCN(5, [6, 2 * 3]))


@pytest.mark.slow
def test_three_ranks_hold_a_third_each_and_read_and_sample_what_the_whole_graph_gives():
    mp.spawn(_worker, args=(3, free_port()), nprocs=3, join=True)


@pytest.mark.parametrize("world", [1, 2, 3, 7])
def test_node_bounds_cut_contiguous_ranges_of_about_equal_entries(world):
    graph = _graph()
    bounds = node_bounds(graph.indptr, world)
    assert bounds[0] == 0 and bounds[-1] == N and np.all(np.diff(bounds) >= 0) and bounds.size == world + 1
    entries = np.diff(graph.indptr[bounds])
    assert entries.sum() == graph.indices.size
    assert entries.max() - graph.indices.size / world <= graph.degree.max()  # off by at most one row


def test_more_ranks_than_nodes_leave_some_ranges_empty():
    indptr = np.array([0, 1, 2])  # two nodes, one edge
    assert node_bounds(indptr, 4).tolist() == [0, 0, 1, 1, 2]
