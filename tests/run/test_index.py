"""gaescale index / topk --index: recall against the exact scan on a trained run, the bias decoder's augmentation
on a hand case, --exclude-existing, and the index refused for a retrained or another run."""
import json

import numpy as np
import pandas as pd
import pytest

import gaescale
from gaescale import Run
from gaescale.cli import main
from gaescale.errors import InputFileError, OutputError, ParameterError
from gaescale.graph import Graph
from gaescale.outputs import write_ids, write_npy, write_npz
from gaescale.run.index import _sides, build_index, index_params, indexed_top_k
from gaescale.run.predict import top_k, topk_links


def _fake_run(d, z, bias=None, edges=None, decoder=None):
    """A run directory written by hand: embeddings (and biases, graph, config) as given."""
    d.mkdir(parents=True, exist_ok=True)
    write_npy(d / "embeddings.npy", np.asarray(z, np.float32))
    write_ids(d / "nodes.tsv", np.array([f"v{i}" for i in range(len(z))], dtype=object))
    if bias is not None:
        write_npy(d / "node_bias.npy", np.asarray(bias, np.float32))
    if edges is not None:
        g = Graph.from_edge_index(np.asarray(edges), len(z))
        write_npz(d / "graph.npz", indptr=g.indptr, indices=g.indices)
    (d / "config.json").write_text(json.dumps({} if decoder is None else {"decoder": decoder}))
    return d


def test_bias_sides_give_the_logits_and_the_index_ranks_as_the_hand_computed_case(tmp_path):
    # logits of node 0 with z = (1, 2, 0.5, 0), b = (0, -3, 1, 2): node 1: 2 - 3 = -1, node 2: 0.5 + 1 = 1.5,
    # node 3: 0 + 2 = 2. Without the biases the order would be 1, 2, 3; with them it is 3, 2, 1.
    z, b = np.array([[1.0], [2.0], [0.5], [0.0]]), np.array([0.0, -3.0, 1.0, 2.0])
    x, q = _sides(z, b)
    np.testing.assert_allclose(q @ x.T, z @ z.T + b[:, None] + b[None, :], atol=1e-6)
    run = _fake_run(tmp_path / "run", z, b, decoder="bias")
    for kind in ("hnsw", "ivf"):
        build_index(run, tmp_path / f"{kind}.idx", kind=kind)
        t = topk_links(run, 3, nodes=["v0"], index=tmp_path / f"{kind}.idx")
        assert t["candidate"].tolist() == ["v3", "v2", "v1"]
        np.testing.assert_allclose(t["score"], [2.0, 1.5, -1.0], atol=1e-6)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run of the default recipe (bias decoder) on a 3,000-node community graph, and its exact top 10."""
    out = tmp_path_factory.mktemp("run")
    g = gaescale.community_graph(3000, 18000, seed=0)
    gaescale.train(data=g, out=str(out), epochs=20, quiet=True, report=False, threads=2)
    run = Run.open(out)
    z, metric = run.logits_form()
    exact = {ex: top_k(z, 10, metric=metric, exclude=run.graph() if ex else None) for ex in (False, True)}
    return run, exact


def _recall(found, exact):
    return np.mean([np.intersect1d(f[f >= 0], e[e >= 0]).size / (e >= 0).sum() for f, e in zip(found, exact)])


@pytest.mark.parametrize("kind", ["hnsw", "ivf"])
def test_recall_at_10_against_the_exact_scan(trained, tmp_path, kind):
    run, exact = trained
    meta = build_index(run, tmp_path / "i.idx", kind=kind)
    assert meta["params"]["kind"] == kind and meta["num_nodes"] == 3000
    graph = run.graph()
    for ex in (False, True):
        v, i = indexed_top_k(run, tmp_path / "i.idx", 10, exclude=graph if ex else None)
        assert _recall(i, exact[ex][1]) >= 0.95, (kind, ex)
        # the scores are the exact logits of the candidates found: never above the exact k-th best
        assert (v[:, 0] <= exact[ex][0][:, 0] + 1e-4).all()
        assert (i != np.arange(3000)[:, None]).all()
        if ex:  # no existing edge comes back
            rows, cols = np.nonzero(i >= 0)
            assert not graph.has_edges(rows, i[rows, cols]).any()


def test_exclude_existing_on_a_hand_graph_and_the_exact_scan_for_high_degrees(tmp_path, monkeypatch):
    # a star: node 0 is linked to 1..5; the best logits of node 0 are its neighbours (larger norms)
    rng = np.random.default_rng(0)
    z = np.vstack([[1.0, 0.0], [[5.0 - 0.1 * i, 0.1 * i] for i in range(5)], rng.uniform(0.1, 1, (30, 2))])
    edges = np.array([[0] * 5, list(range(1, 6))])
    run = Run.open(_fake_run(tmp_path / "run", z, edges=edges))
    build_index(run, tmp_path / "i.idx", kind="hnsw")
    v, i = indexed_top_k(run, tmp_path / "i.idx", 4, exclude=run.graph())
    ev, ei = top_k(z, 4, exclude=run.graph())
    assert set(i[0]) == set(ei[0]) and not set(i[0]) & {0, 1, 2, 3, 4, 5}
    # queries that would need more candidates than EXACT_ABOVE go through the exact scan, with the same result
    monkeypatch.setattr("gaescale.run.index.EXACT_ABOVE", 6)
    stats = {}
    v2, i2 = indexed_top_k(run, tmp_path / "i.idx", 4, exclude=run.graph(), stats=stats)
    assert stats["exact"] == 1 and i2[0].tolist() == ei[0].tolist()


def test_index_of_a_retrained_or_another_run_is_refused(tmp_path):
    rng = np.random.default_rng(1)
    z = rng.standard_normal((50, 3))
    run = _fake_run(tmp_path / "run", z)
    build_index(run, tmp_path / "i.idx")
    assert indexed_top_k(Run.open(run), tmp_path / "i.idx", 3)[1].shape == (50, 3)
    _fake_run(tmp_path / "run", z + 0.01)  # retrained: same shape, other values
    with pytest.raises(InputFileError, match="was built from other embeddings than"):
        indexed_top_k(Run.open(run), tmp_path / "i.idx", 3)
    other = _fake_run(tmp_path / "other", z, bias=np.zeros(50))  # the same z, with biases
    with pytest.raises(InputFileError, match=r"is the index of another run \(50 nodes, d = 3, decoder inner"):
        indexed_top_k(Run.open(other), tmp_path / "i.idx", 3)
    write_npz(tmp_path / "g.npz", meta=np.frombuffer(b'{"format": "gaescale-ann-index"}', np.uint8),
              index=np.zeros(3, np.uint8))  # an .npz, even one that looks like an index, is not one
    for f in (tmp_path / "g.npz", tmp_path / "run" / "embeddings.npy"):
        with pytest.raises(InputFileError, match="not a gaescale index"):
            indexed_top_k(Run.open(run), f, 3)


def test_hadamard_run_cannot_be_indexed_and_params_follow_n(tmp_path):
    run = _fake_run(tmp_path / "run", np.ones((5, 2)), decoder="hadamard")
    with pytest.raises(ParameterError, match="The 'decoder' parameter of index must be 'bias' or 'inner'"):
        build_index(run, tmp_path / "i.idx")
    assert not (tmp_path / "i.idx").exists()
    with pytest.raises(OutputError, match="is a directory"):
        build_index(_fake_run(tmp_path / "r2", np.ones((5, 2))), tmp_path)
    assert index_params(10**6, 10)["kind"] == "ivf" and index_params(10**6, 10, "hnsw")["M"] == 32
    assert index_params(10**4, 8, "hnsw")["ef_search"] < index_params(10**6, 8, "hnsw")["ef_search"]
    assert index_params(10**6, 10)["nlist"] == 4000 and index_params(10**6, 10)["nprobe"] == 40
    assert index_params(1000, 10)["nlist"] == 25 and index_params(1000, 10)["nprobe"] == 25


def test_cli_index_then_topk_index_matches_exact_topk(trained, tmp_path):
    run, _ = trained
    assert main(["index", str(run.path), "--out", str(tmp_path / "i.idx")]) == 0
    assert main(["topk", str(run.path), "--index", str(tmp_path / "i.idx"), "--exclude-existing", "--k", "5",
                 "--out", str(tmp_path / "a.tsv")]) == 0
    assert main(["topk", str(run.path), "--exclude-existing", "--k", "5", "--out", str(tmp_path / "b.tsv")]) == 0
    a, b = (pd.read_csv(tmp_path / f, sep="\t") for f in ("a.tsv", "b.tsv"))
    assert list(a.columns) == list(b.columns) and len(a) == len(b) == 3000 * 5
    assert len(set(zip(a.node, a.candidate)) & set(zip(b.node, b.candidate))) / len(b) >= 0.95
