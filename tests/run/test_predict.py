"""topk and score: exact against a dense brute force on small graphs, keyed by the original ids."""
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

import gaescale
from conftest import dense_structure
from gaescale.graph import Graph
from gaescale.models import bias_metric, with_bias
from gaescale.run.predict import score_pairs, topk_links
from gaescale.run.scan import top_k


def _brute(z, k, exclude=None, queries=None, bias=None, structure=None):
    s = z.astype(np.float64) @ z.T.astype(np.float64)
    if bias is not None:
        s += bias[:, None].astype(np.float64) + bias[None, :]
    if structure is not None:  # (N, N) the structural part of the logit
        s += structure
    np.fill_diagonal(s, -np.inf)
    if exclude is not None:
        s[exclude.adjacency().toarray() > 0] = -np.inf
    if queries is not None:
        s = s[queries]
    idx = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(s, idx, 1), idx


@pytest.mark.parametrize("exclude", [False, True])
@pytest.mark.parametrize("block", [16, 4096])
def test_top_k_matches_dense_brute_force(exclude, block):
    rng = np.random.default_rng(1)
    n = 700
    # norms spread over two orders of magnitude, as degree makes them: the pruning bound matters
    z = (rng.standard_normal((n, 6)) * rng.lognormal(0, 1.0, (n, 1))).astype(np.float32)
    g = Graph.from_edge_index(rng.integers(0, n, (2, 4000)), n)
    q = rng.choice(n, 90, replace=False)
    v, i = top_k(z, 8, queries=q, exclude=g if exclude else None, block=block, batch=32)
    rv, ri = _brute(z, 8, g if exclude else None, q)
    np.testing.assert_allclose(v, rv, rtol=1e-5, atol=1e-5)
    assert (i == ri).mean() > 0.99  # float32 vs float64 may swap near-ties only
    assert all(q[r] not in i[r] for r in range(q.size))  # a node is never its own candidate


@pytest.mark.parametrize("block", [16, 4096])
def test_top_k_with_node_bias_matches_dense_brute_force(block):
    rng = np.random.default_rng(2)
    n = 500
    z = (rng.standard_normal((n, 5)) * rng.lognormal(0, 0.7, (n, 1))).astype(np.float32)
    b = (2 * rng.standard_normal(n)).astype(np.float32)
    zb = with_bias(torch.from_numpy(z), torch.from_numpy(b))
    q = rng.choice(n, 60, replace=False)
    v, i = top_k(zb.numpy(), 6, queries=q, block=block, batch=16, metric=bias_metric(zb.shape[1]))
    rv, ri = _brute(z, 6, queries=q, bias=b)
    np.testing.assert_allclose(v, rv, rtol=1e-5, atol=1e-4)
    assert (i == ri).mean() > 0.99


def test_top_k_pads_when_fewer_candidates_than_k():
    z = np.array([[1.0, 0], [0.5, 0], [0.2, 0.1]], np.float32)
    g = Graph.from_edge_index(np.array([[0], [1]]), 3)
    v, i = top_k(z, 3, exclude=g)
    assert i.tolist() == [[2, -1, -1], [2, -1, -1], [0, 1, -1]]
    assert np.isneginf(v[0, 1:]).all() and v[2, 0] == pytest.approx(0.2)


def _named_edges(tmp_path_factory, names: list[str], draws: int, seed: int):
    """A CSV edge list of ``draws`` random pairs (fewer once repeats merge) among the nodes ``names``."""
    rng = np.random.default_rng(seed)
    n = len(names)
    e = {tuple(sorted(rng.choice(n, 2, replace=False))) for _ in range(draws)}
    p = tmp_path_factory.mktemp("data") / "edges.csv"
    p.write_text("".join(f"{names[a]},{names[b]}\n" for a, b in sorted(e)))
    return p


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    p = _named_edges(tmp_path_factory, [f"n{i:03d}" for i in range(120)], 500, seed=0)
    out = tmp_path_factory.mktemp("run")
    gaescale.train(edges=str(p), out=str(out), epochs=5, hidden="8", dim=4, quiet=True, report=False)
    return out


@pytest.mark.slow
def test_topk_cli_keyed_by_ids_and_matches_brute_force(run, tmp_path):
    out = tmp_path / "links.parquet"
    r = subprocess.run([sys.executable, "-m", "gaescale", "topk", str(run), "--k", "5", "--exclude-existing",
                        "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    t = pd.read_parquet(out)
    ids = np.array((run / "nodes.tsv").read_text().split())
    z, bias = np.load(run / "embeddings.npy"), np.load(run / "node_bias.npy")  # the default decoder: bias
    with np.load(run / "graph.npz") as g:
        graph = Graph(g["indptr"], g["indices"], len(ids))
    rv, ri = _brute(z, 5, graph, bias=bias, structure=_dense_structure(run, graph))
    assert len(t) == 120 * 5 and list(t.columns) == ["node", "rank", "candidate", "score", "probability"]
    assert (t["node"].to_numpy() == np.repeat(ids, 5)).all() and (
        t["rank"].to_numpy() == np.tile(np.arange(1, 6), 120)).all()
    np.testing.assert_allclose(t["score"].to_numpy(), rv.ravel(), rtol=1e-5, atol=1e-6)
    assert (t["candidate"].to_numpy() == ids[ri.ravel()]).mean() > 0.99
    np.testing.assert_allclose(t["probability"], 1 / (1 + np.exp(-t["score"])), rtol=1e-6)


def _dense_structure(run, graph: Graph) -> np.ndarray:
    """The default run's structural part on its whole graph (graph.npz), densely, with model.pt's weights."""
    theta = torch.load(run / "model.pt", weights_only=True)["state_dict"]["structure.theta"]
    return dense_structure(graph.edge_index(), graph.num_nodes, torch.nn.functional.softplus(theta).double().numpy())


def test_topk_of_chosen_nodes_and_tsv(run, tmp_path):
    table = topk_links(run, 3, nodes=["n007", "n042"], out=tmp_path / "t.tsv")
    back = pd.read_csv(tmp_path / "t.tsv", sep="\t", dtype={"node": str, "candidate": str})
    assert back["node"].tolist() == ["n007"] * 3 + ["n042"] * 3 and (
        list(table["candidate"]) == back["candidate"].tolist())


def test_score_from_file_and_stdin(run, tmp_path):
    ids = (run / "nodes.tsv").read_text().split()
    z, b = np.load(run / "embeddings.npy"), np.load(run / "node_bias.npy")
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(f"source\ttarget\n# a comment\n{ids[3]}\t{ids[9]}\n\n{ids[0]}\t{ids[1]}\n")
    t = score_pairs(run, str(pairs))
    with np.load(run / "graph.npz") as g:
        g_s = _dense_structure(run, Graph(g["indptr"], g["indices"], len(ids)))
    expect = [float(z[3] @ z[9] + b[3] + b[9] + g_s[3, 9]), float(z[0] @ z[1] + b[0] + b[1] + g_s[0, 1])]
    assert g_s.max() > 0  # the run has a structural part that counts
    np.testing.assert_allclose(t["score"], expect, rtol=1e-5)
    r = subprocess.run([sys.executable, "-m", "gaescale", "score", str(run), "-"], input=f"{ids[3]} {ids[9]}\n",
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    header, row = r.stdout.splitlines()
    assert header == "source\ttarget\tscore\tprobability" and row.split("\t")[:2] == [ids[3], ids[9]]
    assert float(row.split("\t")[3]) == pytest.approx(1 / (1 + np.exp(-expect[0])), rel=1e-5)


def test_run_ids_are_integers_only_when_written_canonically(tmp_path):
    from gaescale import Run
    np.save(tmp_path / "embeddings.npy", np.zeros((3, 2), np.float32))
    (tmp_path / "nodes.tsv").write_text("10\n-2\n3\n")
    (tmp_path / "config.json").write_text("{}")
    assert Run.open(tmp_path).node_ids.dtype == np.int64
    (tmp_path / "nodes.tsv").write_text("10\n007\n3\n")  # '007' must keep its zeros
    run = Run.open(tmp_path)
    assert run.node_ids.tolist() == ["10", "007", "3"] and run.rows(["007"], "x").tolist() == [1]


def test_hadamard_run_scores_pairs_with_its_mlp_and_topk_refuses(tmp_path):
    from gaescale import Run
    from gaescale.models import HadamardMLP
    rng = np.random.default_rng(5)
    e = {tuple(sorted(rng.choice(80, 2, replace=False))) for _ in range(300)}
    p = tmp_path / "edges.csv"
    p.write_text("".join(f"{a},{b}\n" for a, b in sorted(e)))
    out = tmp_path / "run"
    res = gaescale.train(edges=str(p), out=str(out), epochs=3, dim=4, decoder="hadamard", quiet=True, report=True)
    assert not (out / "node_bias.npy").exists() and res.metrics["test_auc"] is not None
    mlp = Run.open(out).pair_decoder()
    assert isinstance(mlp, HadamardMLP)
    ids = (out / "nodes.tsv").read_text().split()
    z = torch.from_numpy(np.load(out / "embeddings.npy"))
    (tmp_path / "pairs.tsv").write_text(f"{ids[2]}\t{ids[5]}\n")
    t = score_pairs(out, str(tmp_path / "pairs.tsv"))
    with torch.no_grad():
        assert t["score"][0] == pytest.approx(float(mlp(z[2:3], z[5:6])), rel=1e-5)
    with pytest.raises(gaescale.ParameterError, match="'bias' or 'inner'"):
        topk_links(out, 3)
    with pytest.raises(gaescale.ParameterError, match="decoder='hadamard'"):
        gaescale.TrainConfig(decoder="hadamard", dense="exact")


@pytest.fixture(scope="module")
def inner_run(tmp_path_factory):
    """A run whose logit is the plain z_u . z_v (--decoder inner, no structural part): a reference by hand."""
    p = _named_edges(tmp_path_factory, [f"v{i}" for i in range(90)], 360, seed=3)
    out = tmp_path_factory.mktemp("inner") / "run"
    gaescale.train(edges=str(p), out=str(out), epochs=5, hidden="8", dim=4, decoder="inner", structure="off",
                   quiet=True, report=False)
    return out


def test_run_score_takes_pairs_as_arrays_and_files_alike(inner_run, tmp_path):
    from gaescale import Run
    run = Run.open(inner_run)
    ids = (inner_run / "nodes.tsv").read_text().split()
    z = np.load(inner_run / "embeddings.npy").astype(np.float64)
    rows = [(3, 9), (9, 3), (0, 41), (17, 5)]
    logit = np.array([z[u] @ z[v] for u, v in rows])  # the reference: NumPy's dot products of the embeddings
    tuples = [(ids[u], ids[v]) for u, v in rows]
    (tmp_path / "pairs.csv").write_text("".join(f"{a},{b}\n" for a, b in tuples))
    tables = [run.score(tuples), run.score(np.array(tuples)), run.score(np.array(tuples).T),
              run.score(tmp_path / "pairs.csv"), run.score(str(tmp_path / "pairs.csv")),
              score_pairs(str(inner_run), np.array(tuples).T), score_pairs(run, tuples[:2])]
    for t in tables:
        n = len(t["score"])
        assert list(t["source"]) == [a for a, _ in tuples[:n]] and list(t["target"]) == [b for _, b in tuples[:n]]
        np.testing.assert_allclose(t["score"], logit[:n], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(t["probability"], 1 / (1 + np.exp(-logit[:n])), rtol=1e-5)
    run.score(tuples, out=tmp_path / "s.tsv")
    back = pd.read_csv(tmp_path / "s.tsv", sep="\t")
    assert back.columns.tolist() == ["source", "target", "score", "probability"] and len(back) == 4
    with pytest.raises(gaescale.ParameterError, match=r"The 'pairs' parameter of score must be a file of id pairs, or "
                                                      r"a \(P, 2\) or \(2, P\) array of node ids\. Got \['v1', 'v2', "
                                                      r"'v3'\] instead\."):
        run.score(["v1", "v2", "v3"])
    with pytest.raises(gaescale.InputFileError, match=r"^pairs, field 'target': node id 'nope' is not in the run"):
        run.score([("v1", "nope")])


def test_run_topk_takes_node_ids_as_a_list_an_array_or_one_id(inner_run, tmp_path):
    from gaescale import Run
    run = Run.open(inner_run)
    ids = np.array((inner_run / "nodes.tsv").read_text().split())
    z = np.load(inner_run / "embeddings.npy")
    q = np.array([4, 30, 77])
    rv, ri = _brute(z, 3, queries=q)  # NumPy's dot products, sorted
    for nodes in (list(ids[q]), ids[q], ids[q].astype(object)):
        t = run.topk(3, nodes=nodes)
        assert list(t["node"]) == list(np.repeat(ids[q], 3)) and list(t["rank"]) == [1, 2, 3] * 3
        np.testing.assert_allclose(t["score"], rv.ravel(), rtol=1e-5, atol=1e-6)
        assert list(t["candidate"]) == list(ids[ri.ravel()])
        np.testing.assert_allclose(t["probability"], 1 / (1 + np.exp(-rv.ravel())), rtol=1e-5)
    one = run.topk(2, nodes=ids[30], out=tmp_path / "one.tsv")
    assert list(one["node"]) == [ids[30]] * 2 and (tmp_path / "one.tsv").is_file()
    assert len(run.topk(1)["node"]) == z.shape[0]
    with pytest.raises(gaescale.ParameterError, match="The 'nodes' parameter of topk must be node ids"):
        run.topk(2, nodes=[ids[:2]])
