"""`gaescale embed` / `Run.embed`: the trained encoder on a given graph, keyed by its ids.

References: the run's own embeddings.npy (the pipeline embedded the training graph, graph.npz less the held-out
positives, with the same weights), the locality of a message-passing encoder (a node more than L hops from every
change keeps its embedding exactly), and the files read back."""
import numpy as np
import pandas as pd
import pytest

import gaescale
from gaescale import Run
from gaescale.cli import main
from gaescale.data.synthetic import community_graph

N, E = 300, 1500
RUNS = {"gcn-bias": dict(encoder="gcn", hidden="8", dim=4),
        "sage-vgae": dict(encoder="sage", hidden="8", dim=4, variational=True, decoder="inner")}


def _ids(rows) -> np.ndarray:
    return np.array([f"n{i}" for i in rows], dtype=object)


def _write_edges(path, edge_index, names):
    pd.DataFrame({"source": names[edge_index[0]], "target": names[edge_index[1]]}).to_csv(path, sep="\t",
                                                                                          index=False)


def _write_features(path, names, x):
    df = pd.DataFrame(x, columns=[f"f{c}" for c in range(x.shape[1])])
    df.insert(0, "id", names)
    df.to_csv(path, index=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two finished runs on a 300-node graph with string ids and 8 features (a CSV keyed by id)."""
    d = tmp_path_factory.mktemp("embed")
    g = community_graph(N, E, seed=4)
    names = _ids(range(N))
    _write_edges(d / "e.tsv", g.edge_index, names)
    _write_features(d / "x.csv", names, g.x)
    for name, kw in RUNS.items():
        gaescale.train(edges=str(d / "e.tsv"), features=str(d / "x.csv"), out=str(d / name), epochs=3, quiet=True,
                       report=False, checkpoint_every=0, seed=1, test=False, **kw)
    return d, g


def _training_edges(run: Run) -> np.ndarray:
    """(2, E') the run's training graph: graph.npz less the held-out validation and test edges."""
    ei = run.graph().edge_index()
    ei = ei[:, ei[0] < ei[1]]
    held = np.concatenate([run.heldout()["val_pos"], run.heldout()["test_pos"]], axis=1)
    held = np.sort(held, axis=0)
    n = run.embeddings.shape[0]
    keep = ~np.isin(ei[0].astype(np.int64) * n + ei[1], held[0] * n + held[1])
    assert (~keep).sum() == held.shape[1]  # every held-out edge was an edge of the graph
    return ei[:, keep]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_embed_on_the_training_graph_reproduces_embeddings_npy(runs, tmp_path, name):
    d, _ = runs
    run = Run.open(d / name)
    _write_edges(tmp_path / "train.tsv", _training_edges(run), run.node_ids)
    got = run.embed(tmp_path / "train.tsv", d / "x.csv")
    rows = run.rows(got.node_ids, "got")
    assert sorted(rows.tolist()) == list(range(N)) and got.known.all() and got.num_new == 0
    np.testing.assert_allclose(got.embeddings, run.embeddings[rows], rtol=1e-4, atol=1e-5)
    if run.node_bias is None:
        assert got.node_bias is None
    else:  # known nodes keep their learnt bias
        np.testing.assert_allclose(got.node_bias, run.node_bias[rows], rtol=1e-5, atol=1e-6)  # via (p, q)
    # one forward pass and layer by layer in blocks of 7 rows agree with the default (layer by layer, 65,536 rows)
    np.testing.assert_allclose(run.embed(tmp_path / "train.tsv", d / "x.csv", block=None).embeddings,
                               got.embeddings, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(run.embed(tmp_path / "train.tsv", d / "x.csv", block=7).embeddings,
                               got.embeddings, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_new_node_gets_a_finite_row_and_far_nodes_are_unchanged(runs, tmp_path, name):
    d, g = runs
    run = Run.open(d / name)
    train = _training_edges(run)
    names = np.concatenate([run.node_ids, np.array(["new"], dtype=object)])
    anchors = [0, 1, 2]
    ei = np.concatenate([train, np.array([[N] * 3, anchors])], axis=1)
    _write_edges(tmp_path / "grown.tsv", ei, names)
    x = np.concatenate([g.x[[int(s[1:]) for s in run.node_ids]], g.x[:1] * 0.5 + 1.0])
    _write_features(tmp_path / "x.csv", names, x)
    got = run.embed(tmp_path / "grown.tsv", tmp_path / "x.csv")
    assert got.embeddings.shape == (N + 1, 4) and np.isfinite(got.embeddings).all()
    new = np.flatnonzero(got.node_ids == "new")
    assert new.size == 1 and not got.known[new[0]] and got.known.sum() == N and got.num_new == 1
    # the old nodes keep their ids; those more than 2 hops (the encoder's layers) from the anchors keep their rows
    graph = gaescale.Graph.from_edge_index(train, N)
    near = set(anchors)
    for _ in range(2):
        near |= {int(v) for u in near for v in graph.indices[graph.indptr[u]:graph.indptr[u + 1]]}
    old = np.flatnonzero(got.known)
    rows = run.rows(got.node_ids[old], "got")
    far = ~np.isin(rows, list(near))
    assert far.sum() > N // 2 and (~far).sum() >= 3
    np.testing.assert_allclose(got.embeddings[old][far], run.embeddings[rows[far]], rtol=1e-4, atol=1e-5)
    assert not np.allclose(got.embeddings[old][~far], run.embeddings[rows[~far]], atol=1e-6)
    if run.node_bias is not None:  # a new node: the mean learnt bias
        assert got.node_bias[new[0]] == pytest.approx(float(run.node_bias.mean()), rel=1e-5)


@pytest.mark.parametrize("suffix", [".npy", ".tsv", ".parquet"])
def test_cli_outputs_read_back(runs, tmp_path, suffix):
    d, _ = runs
    run = Run.open(d / "gcn-bias")
    out = tmp_path / f"z{suffix}"
    assert main(["embed", str(d / "gcn-bias"), str(d / "e.tsv"), "--features", str(d / "x.csv"),
                 "--out", str(out)]) == 0
    ref = run.embed(d / "e.tsv", d / "x.csv")
    if suffix == ".npy":
        z, ids = np.load(out), (tmp_path / "z.nodes.tsv").read_text().splitlines()
        bias = np.load(tmp_path / "z.bias.npy")
    else:
        df = pd.read_csv(out, sep="\t") if suffix == ".tsv" else pd.read_parquet(out)
        assert list(df.columns) == ["id", "z0", "z1", "z2", "z3", "bias"]
        z, ids, bias = df[["z0", "z1", "z2", "z3"]].to_numpy(), df["id"].tolist(), df["bias"].to_numpy()
    assert ids == ref.node_ids.tolist()
    np.testing.assert_allclose(z, ref.embeddings, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(bias, ref.node_bias, rtol=1e-6)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["z.npy", "z.nodes.tsv", "z.bias.npy"] if suffix == ".npy" else [out.name])  # no temporary files left


def test_a_featureless_run_is_refused_saying_what_to_train(tmp_path):
    g = community_graph(100, 400, seed=0)
    g.x = None
    gaescale.train(data=g, out=str(tmp_path / "run"), epochs=2, hidden="4", dim=2, quiet=True, report=False)
    np.savetxt(tmp_path / "e.txt", g.edge_index.T, fmt="%d")
    with pytest.raises(gaescale.ParameterError) as info:
        Run.open(tmp_path / "run").embed(tmp_path / "e.txt", out=tmp_path / "z.npy")
    msg = str(info.value)
    assert msg.startswith("The 'run' parameter of embed must be a run trained with node features") and "\n" not in msg
    assert "train with --features" in msg and not (tmp_path / "z.npy").exists()


def test_a_prepared_directory_embeds_as_its_edge_list(runs, tmp_path):
    from gaescale.data.prepare import prepare
    d, _ = runs
    run = Run.open(d / "gcn-bias")
    prepare(d / "e.tsv", tmp_path / "prep", features=d / "x.csv")
    mapped = run.embed(tmp_path / "prep", block=64)
    ref = run.embed(d / "e.tsv", d / "x.csv")
    order = pd.Index(ref.node_ids).get_indexer(mapped.node_ids)
    assert sorted(order.tolist()) == list(range(N))
    np.testing.assert_allclose(mapped.embeddings, ref.embeddings[order], rtol=1e-4, atol=1e-5)
    lines = []
    np.testing.assert_allclose(run.embed(tmp_path / "prep", log=lines.append).embeddings, mapped.embeddings,
                               rtol=1e-5, atol=1e-6)
    assert "layer by layer" in lines[1] and "0 new to the run" in lines[1]  # the default for a memory-mapped graph
    with pytest.raises(gaescale.ParameterError, match="The 'features' parameter of embed must be unset"):
        run.embed(tmp_path / "prep", d / "x.csv")


@pytest.fixture(scope="module")
def weighted_run(tmp_path_factory):
    """A weighted run (weight_column='w', the fourth column; the third, 'junk', is not the weight) on 300 nodes."""
    d = tmp_path_factory.mktemp("embed-weighted")
    g = community_graph(N, E, seed=6)
    names = _ids(range(N))
    rng = np.random.default_rng(0)
    ei = g.edge_index
    pd.DataFrame({"source": names[ei[0]], "target": names[ei[1]], "junk": rng.uniform(5, 9, ei.shape[1]),
                  "w": rng.uniform(0.1, 3.0, ei.shape[1])}).to_csv(d / "e.tsv", sep="\t", index=False)
    _write_features(d / "x.csv", names, g.x)
    gaescale.train(edges=str(d / "e.tsv"), features=str(d / "x.csv"), out=str(d / "run"), weighted=True,
                   weight_column="w", encoder="gcn", hidden="8", dim=4, epochs=3, quiet=True, report=False,
                   checkpoint_every=0, seed=1, test=False)
    return d


def test_a_weighted_run_embeds_its_training_graph_with_its_weights_as_embeddings_npy(weighted_run, tmp_path):
    d = weighted_run
    run = Run.open(d / "run")
    assert run.graph().weighted
    train = _training_edges(run)
    w = run.graph().weights_of(train[0], train[1])
    assert (w > 0).all() and w.std() > 0.5  # the weights of the training edges, as graph.npz holds them
    names = run.node_ids
    table = pd.DataFrame({"source": names[train[0]], "target": names[train[1]], "junk": 7.0, "w": w})
    table.to_csv(tmp_path / "train.tsv", sep="\t", index=False)
    got = run.embed(tmp_path / "train.tsv", d / "x.csv")
    rows = run.rows(got.node_ids, "got")
    assert sorted(rows.tolist()) == list(range(N)) and got.num_new == 0
    np.testing.assert_allclose(got.embeddings, run.embeddings[rows], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(run.embed(tmp_path / "train.tsv", d / "x.csv", block=7).embeddings, got.embeddings,
                               rtol=1e-4, atol=1e-5)  # layer by layer: the same weighted normalisation
    # the weights matter: the same graph with all weights 1 embeds otherwise
    table.assign(w=1.0).to_csv(tmp_path / "ones.tsv", sep="\t", index=False)
    assert np.abs(run.embed(tmp_path / "ones.tsv", d / "x.csv").embeddings - got.embeddings).max() > 1e-2


def test_a_weighted_runs_edges_without_its_weight_column_get_the_one_line_error(weighted_run, tmp_path, capsys):
    d = weighted_run
    _write_edges(tmp_path / "plain.tsv", np.array([[0, 1], [1, 2]]), _ids(range(3)))
    with pytest.raises(gaescale.InputFileError) as info:
        Run.open(d / "run").embed(tmp_path / "plain.tsv", d / "x.csv", out=tmp_path / "z.npy")
    msg = str(info.value)
    assert "plain.tsv" in msg and "no column named 'w' (--weight-column)" in msg and "\n" not in msg
    assert not (tmp_path / "z.npy").exists()
    pd.DataFrame({"source": ["n0", "n1"], "target": ["n1", "n2"], "junk": [1, 1], "w": ["0.5", "heavy"]}).to_csv(
        tmp_path / "bad.tsv", sep="\t", index=False)
    assert main(["embed", str(d / "run"), str(tmp_path / "bad.tsv"), "--features", str(d / "x.csv"),
                 "--out", str(tmp_path / "z.npy")]) == 2
    err = capsys.readouterr().err.strip()
    assert "bad.tsv" in err and "line 3" in err and "field 'w'" in err and "'heavy'" in err, err
    assert "\n" not in err and not (tmp_path / "z.npy").exists()
    from gaescale.data.prepare import prepare
    prepare(d / "e.tsv", tmp_path / "prep", features=d / "x.csv")
    with pytest.raises(gaescale.ParameterError, match="The 'edges' parameter of embed must be an edge-list file "
                                                      "with the edge weights for a weighted run"):
        Run.open(d / "run").embed(tmp_path / "prep")
