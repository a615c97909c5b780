"""gaescale prepare (chunked conversion to a memory-mapped CSR), the hashed split, and training from it."""
import gzip
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import gaescale
from conftest import random_edges
from gaescale import Run
from gaescale.cli import main
from gaescale.data.prepare import open_prepared, prepare
from gaescale.data.readers import read_edges
from gaescale.data.split import hashed_is_train, hashed_rows, split_hashed
from gaescale.data.synthetic import community_graph
from gaescale.errors import InputFileError, OutputError, ParameterError
from gaescale.graph import Graph
from gaescale.training.samplers import metis_parts
from gaescale.training.strategies import ClusterGCN, NeighborLinks
from gaescale.training.trainer import fit


def _messy_edges(n=400, e=3000, seed=0):
    """Random rows with self loops, repeats and reversed repeats."""
    rng = np.random.default_rng(seed)
    ei = rng.integers(0, n, (2, e))
    return np.concatenate([ei, ei[::-1, :200], ei[:, :100]], axis=1)


def _id_pairs(graph, ids):
    ei = graph.edge_index()
    return sorted(tuple(sorted((str(ids[u]), str(ids[v])))) for u, v in ei.T)


def _same_graph_as_read_edges(prepared, path, **kw):
    el = read_edges(path, **kw)
    g = Graph.from_edge_index(el.edge_index, el.num_nodes)
    ids = (prepared.path / "nodes.tsv").read_text().split("\n")[:-1]
    ref_ids = el.node_ids if el.node_ids is not None else np.arange(el.num_nodes)
    assert prepared.graph.num_nodes == g.num_nodes and prepared.graph.num_edges == g.num_edges
    assert _id_pairs(prepared.graph, ids) == _id_pairs(g, ref_ids)
    assert prepared.graph.stats == g.stats
    assert isinstance(prepared.graph.indices, np.memmap)


@pytest.mark.parametrize("fmt", ["csv", "tsv-str", "txt-gz", "parquet", "npy", "npy-float", "npz"])
def test_prepare_equals_reading_in_memory_with_many_chunks_and_buckets(tmp_path, fmt):
    ei = _messy_edges()
    if fmt == "csv":
        f = tmp_path / "e.csv"
        f.write_text("source,target\n" + "".join(f"{7 * u + 3},{7 * v + 3}\n" for u, v in ei.T))
    elif fmt == "tsv-str":
        f = tmp_path / "e.tsv"
        f.write_text("".join(f"n {u}\tm{v}\n" for u, v in ei.T))
    elif fmt == "txt-gz":
        f = tmp_path / "e.txt.gz"
        with gzip.open(f, "wt") as fh:
            fh.write("# comment\n" + "".join(f"{u}  {v} 0.5\n" for u, v in ei.T))
    elif fmt == "parquet":
        f = tmp_path / "e.parquet"
        pq.write_table(pa.table({"a": [f"x{u}" for u in ei[0]], "b": [f"x{v}" for v in ei[1]]}), f)
    elif fmt == "npy":
        f = tmp_path / "e.npy"
        np.save(f, ei.T)
    elif fmt == "npy-float":  # whole numbers stored as floats, as train accepts them
        f = tmp_path / "e.npy"
        np.save(f, ei.T.astype(np.float64))
    else:
        f = tmp_path / "e.npz"
        np.savez(f, edge_index=ei, num_nodes=np.array(450))
    p = prepare(f, tmp_path / "g", chunk=257)  # 257 rows per chunk, 257 entries per bucket: many of both
    _same_graph_as_read_edges(p, f)
    assert p.manifest["ids"] == {"csv": "int", "tsv-str": "str", "txt-gz": "int", "parquet": "str"}.get(fmt, "index")
    if fmt == "npz":
        assert p.graph.num_nodes == 450  # num_nodes kept: isolated nodes included


def test_prepare_features_keyed_table_adds_isolated_nodes(tmp_path):
    f = tmp_path / "e.csv"
    f.write_text("a,b\nb,c\n")
    feats = tmp_path / "x.csv"
    feats.write_text("id,f1,f2\nc,3,30\na,1,10\nb,2,20\nd,4,40\n")
    p = prepare(f, tmp_path / "g", features=feats)
    ids = (p.path / "nodes.tsv").read_text().split()
    assert ids == ["a", "b", "c", "d"] and p.graph.num_nodes == 4 and p.graph.degree.tolist() == [1, 2, 1, 0]
    assert np.asarray(p.x).tolist() == [[1, 10], [2, 20], [3, 30], [4, 40]]


def test_prepare_memory_is_bounded_by_the_chunk(tmp_path):
    rng = np.random.default_rng(0)
    e = 1_000_000
    np.save(tmp_path / "e.npy", rng.integers(0, 20_000, (e, 2)))  # 16 MB of int64 rows
    tracemalloc.start()
    try:
        prepare(tmp_path / "e.npy", tmp_path / "g", chunk=1 << 15)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Reading the rows in memory alone takes 16 MB (the graph build several times that); the chunked
    # conversion holds O(N) degrees and ids plus a few chunk-sized arrays.
    assert peak < 6 * 2**20, peak
    assert open_prepared(tmp_path / "g").graph.num_edges > 0.99 * e


def test_prepare_refuses_fractional_float_indices_like_train(tmp_path):
    a = np.arange(2000, dtype=np.float64).reshape(1000, 2)
    a[700, 1] = 3.5
    np.save(tmp_path / "e.npy", a)
    for read in (lambda: prepare(tmp_path / "e.npy", tmp_path / "g", chunk=100),
                 lambda: read_edges(tmp_path / "e.npy")):
        with pytest.raises(InputFileError, match=r"e\.npy: node indices must be whole numbers"):
            read()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.npy"]


def test_prepare_errors_leave_nothing_behind(tmp_path):
    f = tmp_path / "e.csv"
    f.write_text("".join(f"{i},{i + 1}\n" for i in range(1000)) + "7,oops\n")
    with pytest.raises(InputFileError,
                       match=r"e\.csv, line 1001, field 'target': expected an integer node id\. Got 'oops'"):
        prepare(f, tmp_path / "g", chunk=100)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.csv"]
    (tmp_path / "g").mkdir()
    with pytest.raises(OutputError, match="already exists"):
        prepare(tmp_path / "e.csv", tmp_path / "g")


def test_split_hashed_partitions_streams_and_matches_in_memory(tmp_path):
    n = 2000
    g = Graph.from_edge_index(random_edges(n, 20_000, seed=4), n)
    a = split_hashed(g, 0.05, 0.10, seed=3)
    b = split_hashed(g, 0.05, 0.10, seed=3, out_dir=tmp_path, block=777)  # many row blocks, CSR on disk
    ta, tb = a.train_graph(), b.train_graph()
    assert isinstance(tb.indices, np.memmap)
    assert np.array_equal(ta.indptr, tb.indptr) and np.array_equal(ta.indices, tb.indices)
    assert np.array_equal(a.test_pos, b.test_pos) and np.array_equal(a.val_neg, b.val_neg)
    every = set(map(tuple, g.edge_index().T.tolist()))
    train, val, test = (set(map(tuple, p.T.tolist())) for p in (ta.edge_index(), a.val_pos, a.test_pos))
    assert train | val | test == every and not (train & val or train & test or val & test)
    assert (ta.adjacency() != ta.adjacency().T).nnz == 0
    e = len(every)  # binomial shares: within 4 standard deviations of the fractions
    for got, frac in ((len(val), 0.05), (len(test), 0.10)):
        assert abs(got - frac * e) < 4 * np.sqrt(e * frac * (1 - frac))
    negatives = np.concatenate([a.val_neg, a.test_neg], axis=1)
    assert not g.has_edges(*negatives).any() and len(set(map(tuple, negatives.T.tolist()))) == negatives.shape[1]
    assert set(map(tuple, split_hashed(g, 0.05, 0.10, seed=4).test_pos.T.tolist())) != test
    u, v = g.edge_index()  # the hash's decision for any edge, in either direction
    kept = {(a, b) for a, b, k in zip(u.tolist(), v.tolist(), hashed_is_train(u, v, n, 0.05, 0.10, seed=3)) if k}
    assert kept == train and hashed_is_train(v, u, n, 0.05, 0.10, seed=3).sum() == len(train)


@pytest.mark.parametrize("start,stop", [(0, 2000), (0, 1), (700, 1450), (1999, 2000), (900, 900)])
def test_hashed_rows_are_those_rows_of_the_hashed_split(start, stop):
    n = 2000
    g = Graph.from_edge_index(random_edges(n, 20_000, seed=4), n)
    whole = split_hashed(g, 0.05, 0.10, seed=3)
    train = whole.train_graph()
    degree, indices, val_pos, test_pos = hashed_rows(g, start, stop, 0.05, 0.10, seed=3, block=333)  # several blocks
    assert np.array_equal(degree, train.degree[start:stop])
    assert np.array_equal(indices, train.indices[train.indptr[start]:train.indptr[stop]])
    for mine, every in ((val_pos, whole.val_pos), (test_pos, whole.test_pos)):  # those starting in the range
        assert np.array_equal(mine, every[:, (every[0] >= start) & (every[0] < stop)])
    assert stop - start < 100 or test_pos.shape[1] > 0
    other = hashed_rows(g, start, stop, 0.05, 0.10, seed=4).degree
    assert stop - start < 100 or not np.array_equal(other, degree)  # the seed decides


def test_has_edges_matches_the_dense_adjacency():
    rng = np.random.default_rng(1)
    g = Graph.from_edge_index(rng.integers(0, 300, (2, 2000)), 300)
    dense = g.adjacency().toarray() > 0
    u, v = rng.integers(0, 300, 5000), rng.integers(0, 300, 5000)
    assert np.array_equal(g.has_edges(u, v), dense[u, v])


@pytest.mark.parametrize("strategy", ["neighbor", "cluster"])
def test_memory_mapped_graph_trains_exactly_like_the_in_memory_one(tmp_path, strategy):
    data = community_graph(3000, 15000, seed=1)
    np.save(tmp_path / "e.npy", data.edge_index)
    p = prepare(tmp_path / "e.npy", tmp_path / "g", chunk=4096)
    in_memory = Graph.from_edge_index(data.edge_index, data.num_nodes)
    x = torch.from_numpy(data.x)
    runs = []
    for graph, where in ((in_memory, None), (p.graph, tmp_path / "split")):
        split = split_hashed(graph, 0.05, 0.10, seed=0, out_dir=where)
        train_graph = split.train_graph()
        torch.manual_seed(0)
        model = gaescale.GAE(gaescale.GCN(8, [16, 8]))
        strat = (NeighborLinks([5, 5], 2048) if strategy == "neighbor"
                 else ClusterGCN(metis_parts(train_graph, 8), 2))
        result = fit(model, x, train_graph, None, val=(split.val_pos, split.val_neg), epochs=4, seed=2,
                     progress=False, strategy=strat,
                     embed=lambda model=model, train_graph=train_graph: model.embed(x, train_graph, block=500))
        runs.append(([h["loss"] for h in result.history], [h["val_auc"] for h in result.history],
                     model.embed(x, train_graph, block=700)))
    assert runs[0][0] == runs[1][0] and runs[0][1] == runs[1][1]
    assert torch.equal(runs[0][2], runs[1][2])


def test_train_from_a_prepared_directory_end_to_end(tmp_path, capsys):
    data = community_graph(3000, 15000, seed=1)
    f = tmp_path / "e.tsv"
    f.write_text("".join(f"u{a}\tu{b}\n" for a, b in data.edge_index.T))
    assert main(["prepare", str(f), "--out", str(tmp_path / "g"), "--chunk", "5000"]) == 0
    assert main(["train", str(tmp_path / "g"), "--out", str(tmp_path / "run"), "--strategy", "neighbor",
                 "--hidden", "16", "--dim", "8", "--epochs", "6", "--batch-size", "4096", "--fanouts", "5,5",
                 "--quiet", "--no-report"]) == 0
    run = Run.open(tmp_path / "run")
    assert run.metrics()["test_auc"] > 0.75 and run.metrics()["prepared"] == str((tmp_path / "g").resolve())
    n = len(np.unique(data.edge_index))  # the nodes with an edge: ids come from the edge list
    ids = run.node_ids.tolist()
    assert ids == sorted(f"u{i}" for i in np.unique(data.edge_index)) and run.embeddings.shape == (n, 8)
    assert run.graph().num_edges == 15000  # the run refers to the prepared graph instead of copying it
    assert main(["topk", str(tmp_path / "run"), "--k", "2", "--exclude-existing",
                 "--out", str(tmp_path / "t.tsv")]) == 0
    capsys.readouterr()
    assert main(["train", str(tmp_path), "--out", str(tmp_path / "run2"), "--quiet"]) == 2
    assert "is a directory but not a prepared graph (no graph.json)" in capsys.readouterr().err
    with pytest.raises(ParameterError, match="'gaescale prepare --features'"):
        gaescale.train(edges=str(tmp_path / "g"), features=str(f), quiet=True)


def test_a_prepared_graph_embeds_into_mapped_buffers_with_the_same_numbers(tmp_path, monkeypatch):
    """The layer-wise inference of a run from a prepared directory maps its (N, width) arrays from files (here
    from any size on) in the run's staging directory: the same embeddings as ordinary tensors, nothing left."""
    import gaescale.run.pipeline as pipeline
    from gaescale.outputs import MappedBuffers
    data = community_graph(2000, 9000, seed=3)
    np.save(tmp_path / "e.npy", data.edge_index.T)
    assert main(["prepare", str(tmp_path / "e.npy"), "--out", str(tmp_path / "g")]) == 0
    flags = ["--strategy", "neighbor", "--hidden", "16", "--dim", "8", "--epochs", "2", "--batch-size", "4096",
             "--fanouts", "5,5", "--quiet", "--no-report", "--checkpoint-every", "0"]
    assert main(["train", str(tmp_path / "g"), "--out", str(tmp_path / "plain"), *flags]) == 0
    made = []

    def mapped(directory):
        made.append(Path(directory))
        return MappedBuffers(directory, min_bytes=0)

    monkeypatch.setattr(pipeline, "MappedBuffers", mapped)
    assert main(["train", str(tmp_path / "g"), "--out", str(tmp_path / "mapped"), *flags]) == 0
    assert made and made[0] == tmp_path / "mapped" / ".staging"
    plain, got = Run.open(tmp_path / "plain"), Run.open(tmp_path / "mapped")
    assert np.array_equal(plain.embeddings, got.embeddings)
    assert plain.metrics()["test_auc"] == got.metrics()["test_auc"]
    names = [sorted(p.name for p in (tmp_path / run).iterdir()) for run in ("plain", "mapped")]
    assert names[0] == names[1]


@pytest.mark.parametrize("order", ["community", "bfs", "rcm", "degree", "metis"])
def test_a_locality_order_renumbers_the_same_graph(tmp_path, order):
    """``prepare --order``: the same edges and features by id, rows sorted, and the GCN product the same numbers,
    rows permuted (the "same numbers as before" of a new node order); renumbered in several blocks."""
    if order == "metis" and not gaescale.optional.available("pymetis"):
        pytest.skip("pymetis is not installed")
    data = community_graph(3000, 15000, seed=4)
    np.save(tmp_path / "e.npy", data.edge_index.T)
    np.save(tmp_path / "x.npy", data.x)
    plain = prepare(tmp_path / "e.npy", tmp_path / "plain", features=tmp_path / "x.npy", chunk=4000)
    got = prepare(tmp_path / "e.npy", tmp_path / "ordered", features=tmp_path / "x.npy", chunk=4000, order=order)
    assert got.manifest["order"] == order and plain.manifest["order"] is None
    perm = np.loadtxt(tmp_path / "ordered" / "nodes.tsv", dtype=np.int64)  # the ids (= old indices) in new order
    assert sorted(perm.tolist()) == list(range(3000)) and not np.array_equal(perm, np.arange(3000))
    indptr, indices = np.asarray(got.graph.indptr), np.asarray(got.graph.indices)
    rows = np.repeat(np.arange(3000), np.diff(indptr))
    assert all(np.all(np.diff(indices[indptr[i]:indptr[i + 1]]) > 0) for i in range(3000))  # sorted, no repeats
    by_id = {(int(a), int(b)) for a, b in zip(perm[rows], perm[indices])}
    p_indptr, p_indices = np.asarray(plain.graph.indptr), np.asarray(plain.graph.indices)
    assert by_id == {(int(a), int(b)) for a, b in zip(np.repeat(np.arange(3000), np.diff(p_indptr)), p_indices)}
    np.testing.assert_array_equal(np.asarray(got.x), np.asarray(plain.x)[perm])
    x = torch.randn(3000, 5, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(got.graph.gcn_operator @ x[perm], (plain.graph.gcn_operator @ x)[perm])


def test_an_unknown_order_is_refused_before_any_work(tmp_path):
    np.save(tmp_path / "e.npy", random_edges(50, 100, seed=1).T)
    with pytest.raises(ParameterError, match="The 'order' parameter of prepare must be None or one of 'degree'"):
        prepare(tmp_path / "e.npy", tmp_path / "g", order="random")
    assert not (tmp_path / "g").exists()
