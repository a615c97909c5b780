"""``train --directed`` end to end: reverse_auc learnt on a layered DAG (where direction is the whole signal) and
0.5 without --directed, the run directory it writes, and topk/score keeping direction on a hand-made run."""
import json

import numpy as np
import pytest
import torch

import gaescale
from gaescale import Run
from gaescale.cli import main
from gaescale.data.readers import EdgeList
from gaescale.directed.graph import DiGraph
from gaescale.directed.metrics import reverse_auc
from gaescale.models import bias_metric, with_bias
from gaescale.run.predict import score_pairs, topk_links
from gaescale.training.evaluate import pair_scores

FAST = dict(dim=8, epochs=30, lr=0.05, eval_every=10, warmup=0, patience=0, quiet=True, report=False,
            checkpoint_every=0)


def layered_dag(layers: int = 5, width: int = 30, out_degree: int = 4, seed: int = 0) -> EdgeList:
    """Edges only from layer k to layer k + 1: every node of a layer alike but for its position."""
    rng = np.random.default_rng(seed)
    src, dst = [], []
    for k in range(layers - 1):
        for u in range(k * width, (k + 1) * width):
            src += [u] * out_degree
            dst += (rng.choice(width, out_degree, replace=False) + (k + 1) * width).tolist()
    return EdgeList(np.array([src, dst]), layers * width, None, source="dag")


@pytest.fixture(scope="module")
def dag_runs(tmp_path_factory):
    data = layered_dag()
    out = tmp_path_factory.mktemp("dag") / "run"
    directed = gaescale.train(data=data, directed=True, out=str(out), **FAST)
    undirected = gaescale.train(data=data, **FAST)
    return data, directed, undirected, out


def test_reverse_auc_near_one_with_directed_and_one_half_without(dag_runs):
    data, directed, undirected, _ = dag_runs
    m = directed.metrics
    assert m["reverse_auc"] > 0.9 and m["test_auc"] > 0.75
    graph = DiGraph.from_edge_index(data.edge_index, data.num_nodes)
    test_pos = np.load(dag_runs[3] / "heldout.npz")["test_pos"]
    assert m["reverse_pairs"] == test_pos.shape[1]  # a DAG: no reversal is an edge
    # the symmetric decoder of an undirected run scores (u, v) and (v, u) alike: ties, AUC 0.5 exactly
    zb = with_bias(torch.from_numpy(undirected.embeddings), torch.from_numpy(undirected.node_bias))
    auc, count = reverse_auc(lambda p: pair_scores(zb, p, metric=bias_metric(zb.shape[1])), graph, test_pos)
    assert count == test_pos.shape[1] and auc == pytest.approx(0.5, abs=1e-9)


def test_the_run_directory_records_direction(dag_runs):
    data, directed, _, out = dag_runs
    config, metrics = json.loads((out / "config.json").read_text()), json.loads((out / "metrics.json").read_text())
    assert config["directed"] is True
    d = 8 + 2  # dim, and the two bias columns on each side
    assert np.load(out / "embeddings.npy").shape == (data.num_nodes, 2 * d)
    assert metrics["directed"]["columns"] == "[z_s, b_s, 1 | z_t, 1, b_t]" and metrics["directed"]["half"] == d
    assert set(metrics["baselines"]) == {"adamic_adar", "common_neighbours", "degree_product",
                                         "directed_degree_product", "reciprocity"}
    assert config["directed_symmetric"] == "off"  # auto, resolved: a DAG reciprocates nothing
    with np.load(out / "graph.npz") as g:  # the out-CSR: one row entry per directed edge
        assert g["indices"].size == data.edge_index.shape[1]
    run = Run.open(out)
    assert run.directed
    # score(u, v) is s_uv: on a DAG edge (u, v) the trained model prefers u -> v over v -> u
    test_pos = np.load(out / "heldout.npz")["test_pos"]
    fwd = pair_scores(run.logits_form()[0], test_pos, decoder=run.pair_decoder())
    back = pair_scores(run.logits_form()[0], np.ascontiguousarray(test_pos[::-1]), decoder=run.pair_decoder())
    assert (fwd > back).mean() > 0.85


def reciprocal_graph(n: int = 400, out_degree: int = 5, share: float = 0.5, seed: int = 0) -> EdgeList:
    """Random out-links, each reciprocated with probability ``share``: the reversal is the only signal."""
    rng = np.random.default_rng(seed)
    u = np.repeat(np.arange(n), out_degree)
    v = (u + rng.integers(1, n, u.size)) % n
    back = rng.random(u.size) < share
    return EdgeList(np.concatenate([np.stack([u, v]), np.stack([v[back], u[back]])], axis=1), n, None,
                    source="reciprocal")


def test_reciprocity_resolves_the_symmetric_part_and_is_a_baseline():
    from gaescale.directed.graph import DirectedSplit
    from gaescale.directed.kind import resolve_symmetric
    from gaescale.directed.metrics import directed_baselines
    # 0 -> 1, 1 -> 0, 1 -> 2, 2 -> 3: two of the four edges are reciprocated
    g = DiGraph.from_edge_index(np.array([[0, 1, 1, 2], [1, 0, 2, 3]]), 5)
    assert g.reciprocity == 0.5 and DiGraph.from_edge_index(layered_dag().edge_index, 150).reciprocity == 0
    lines = []
    on = resolve_symmetric(gaescale.TrainConfig(directed=True), g, lines.append)
    assert on.directed_symmetric == "on" and lines == ["--directed-symmetric auto: on (50.0% of the training edges "
                                                       "are reciprocated; on from 10%)"]
    assert resolve_symmetric(gaescale.TrainConfig(directed=True, directed_symmetric="off"), g, print) \
        .directed_symmetric == "off"
    # the heuristic by hand: test positives 2 -> 1 (1 -> 2 is a training edge: 1) and 4 -> 3 (0); negatives
    # 3 -> 2 (2 -> 3 is one: 1), 0 -> 4 (0). AUC: pairs (pos, neg) won 1 + 0.5 + 0 + 0.5 of 4 = 0.5
    split = DirectedSplit(train=np.array([[0, 1, 1, 2], [1, 0, 2, 3]]), val_pos=np.zeros((2, 0), np.int64),
                          val_neg=np.zeros((2, 0), np.int64), test_pos=np.array([[2, 4], [1, 3]]),
                          test_neg=np.array([[3, 0], [2, 4]]), num_nodes=5)
    full = DiGraph.from_edge_index(np.array([[0, 1, 1, 2, 2, 4], [1, 0, 2, 3, 1, 3]]), 5)
    b = directed_baselines(g, full, split, seed=0)["reciprocity"]
    assert b["auc"] == pytest.approx(0.5) and b["ap"] == pytest.approx(0.5)


def test_the_symmetric_part_learns_reciprocated_links_that_source_target_cannot():
    data = reciprocal_graph()
    runs = {sym: gaescale.train(data=data, directed=True, directed_symmetric=sym, **{**FAST, "epochs": 100})
            for sym in ("auto", "off")}
    auto, off = runs["auto"].metrics, runs["off"].metrics
    assert auto["directed"]["columns"] == "[z_s, z_u, b_s, 1 | z_t, z_u, 1, b_t]"  # auto resolved to on
    assert auto["test_auc"] > off["test_auc"] + 0.05
    assert auto["test_auc"] > max(b["auc"] for k, b in auto["baselines"].items() if k != "reciprocity")


def _hand_run(tmp_path):
    """Three nodes a, b, c with z_s = (2, 0.5, -1), z_t = (0.1, 3, 1): s_ab = 6, s_ba = 0.05, s_ac = 2, s_ca = -0.1,
    s_bc = 0.5, s_cb = -3; its graph has the one edge a -> b."""
    run = tmp_path / "hand"
    run.mkdir()
    np.save(run / "embeddings.npy", np.array([[2.0, 0.1], [0.5, 3.0], [-1.0, 1.0]], np.float32))
    (run / "nodes.tsv").write_text("a\nb\nc\n")
    (run / "config.json").write_text(json.dumps({"directed": True, "decoder": "inner"}))
    np.savez(run / "graph.npz", indptr=np.array([0, 1, 1, 1]), indices=np.array([1], np.int32))
    return run


def test_score_and_topk_respect_direction_on_a_hand_made_run(tmp_path):
    run = _hand_run(tmp_path)
    (tmp_path / "pairs.tsv").write_text("a\tb\nb\ta\nc\ta\n")
    table = score_pairs(str(run), str(tmp_path / "pairs.tsv"))
    assert table["score"] == pytest.approx([6.0, 0.05, -0.1], abs=1e-6)
    top = topk_links(str(run), 1)
    assert list(top["candidate"]) == ["b", "c", "a"]  # a -> b (6), b -> c (0.5 > 0.05), c -> a (-0.1 > -3)
    assert top["score"] == pytest.approx([6.0, 0.5, -0.1], abs=1e-6)
    excl = topk_links(str(run), 2, exclude_existing=True)  # a's out-edge to b left out; b keeps a (b -> a is none)
    assert list(zip(excl["node"], excl["candidate"])) == [("a", "c"), ("b", "c"), ("b", "a"), ("c", "a"), ("c", "b")]


def test_cli_train_directed_then_topk(tmp_path):
    edges = tmp_path / "e.tsv"
    dag = layered_dag(4, 8, 2)
    edges.write_text("".join(f"n{u}\tn{v}\n" for u, v in dag.edge_index.T))
    assert main(["train", str(edges), "--directed", "--out", str(tmp_path / "run"), "--epochs", "3", "--quiet",
                 "--no-report", "--dim", "4"]) == 0
    assert main(["topk", str(tmp_path / "run"), "--k", "3", "--out", str(tmp_path / "top.tsv")]) == 0
    lines = (tmp_path / "top.tsv").read_text().splitlines()
    n = len((tmp_path / "run" / "nodes.tsv").read_text().splitlines())
    assert lines[0] == "node\trank\tcandidate\tscore\tprobability" and len(lines) == 1 + n * 3


def test_several_processes_refuse_directed():
    from types import SimpleNamespace

    from gaescale.errors import ParameterError
    config = gaescale.TrainConfig(edges="e.txt", directed=True)
    with pytest.raises(ParameterError, match=r"^The 'directed' parameter of train must be False under torchrun "
                                             r"\(several processes do not support directed graphs yet\)\. Got True"):
        gaescale.train(config, runtime=SimpleNamespace(world_size=2, is_main=True))


def test_resume_gives_the_uninterrupted_run(tmp_path):
    data = layered_dag(4, 10, 3)
    opts = dict(directed=True, dim=4, dense="exact", quiet=True, report=False, checkpoint_every=1, eval_every=2,
                warmup=0)
    whole = gaescale.train(data=data, out=str(tmp_path / "whole"), epochs=4, **opts)
    gaescale.train(data=data, out=str(tmp_path / "part"), epochs=2, **opts)
    resumed = gaescale.train(data=data, out=str(tmp_path / "part"), epochs=4, resume=True, **opts)
    assert np.array_equal(whole.embeddings, resumed.embeddings)
    assert whole.metrics["reverse_auc"] == resumed.metrics["reverse_auc"]


def test_tensorboard_holds_a_directed_runs_history(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    run = gaescale.train(data=layered_dag(), directed=True, tensorboard=str(tmp_path / "tb"), out=str(tmp_path / "o"),
                         **{**FAST, "epochs": 4, "eval_every": 2})
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    history = run.metrics["history"]
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3, 4]
    assert [e.value for e in events.Scalars("train/loss")] == pytest.approx([h["loss"] for h in history])
    assert [e.step for e in events.Scalars("val/auc")] == [2, 4]
    assert events.Scalars("test/auc")[0].value == pytest.approx(run.metrics["test_auc"])


def test_weighted_directed_runs_all_ones_as_unweighted_and_from_a_weighted_edge_list(tmp_path):
    data = layered_dag()
    plain = gaescale.train(data=data, directed=True, **FAST)
    data.edge_weight = np.ones(data.edge_index.shape[1], np.float32)
    ones = gaescale.train(data=data, directed=True, weighted=True, **FAST)
    np.testing.assert_allclose(ones.embeddings, plain.embeddings, rtol=1e-5, atol=1e-6)
    assert ones.metrics["test_auc"] == pytest.approx(plain.metrics["test_auc"], abs=1e-6)
    # a text edge list with a weight column: the weights reach graph.npz, and embed reads them as training did
    rng = np.random.default_rng(0)
    w = rng.uniform(0.5, 2.0, data.edge_index.shape[1])
    (tmp_path / "e.tsv").write_text("".join(f"{u}\t{v}\t{x:.3f}\n" for (u, v), x in zip(data.edge_index.T, w)))
    np.save(tmp_path / "x.npy", rng.normal(size=(data.num_nodes, 3)).astype(np.float32))
    assert main(["train", str(tmp_path / "e.tsv"), "--directed", "--weighted", "--features", str(tmp_path / "x.npy"),
                 "--out", str(tmp_path / "run"), "--epochs", "5", "--quiet", "--no-report"]) == 0
    with np.load(tmp_path / "run" / "graph.npz") as g:
        assert sorted(g["data"].tolist()) == pytest.approx(sorted(np.round(w, 3).tolist()))
    run = Run.open(tmp_path / "run")
    train = np.load(tmp_path / "run" / "heldout.npz")
    held = {tuple(p) for k in ("val_pos", "test_pos") for p in train[k].T}
    keep = [i for i, p in enumerate(data.edge_index.T) if tuple(p) not in held]
    (tmp_path / "t.tsv").write_text("".join(f"{u}\t{v}\t{w[i]:.3f}\n" for i, (u, v) in
                                            ((i, data.edge_index[:, i]) for i in keep)))
    got = run.embed(tmp_path / "t.tsv", tmp_path / "x.npy")  # the training graph, weights included
    rows = np.argsort(got.node_ids.astype(np.int64))
    np.testing.assert_allclose(got.embeddings[rows], run.embeddings[np.argsort(run.node_ids.astype(np.int64))],
                               rtol=1e-4, atol=1e-5)


def test_what_directed_does_not_support_yet_is_refused():
    with pytest.raises(gaescale.ParameterError, match="The 'encoder' parameter of train must be an encoder name "
                                                      "with directed=True"):
        gaescale.train(data=layered_dag(), directed=True, encoder=gaescale.GCN(None, [4], num_nodes=150), quiet=True)


@pytest.mark.parametrize("symmetric", ["auto", "on"])  # auto: off on a DAG
def test_embed_of_a_directed_run_equals_its_embeddings_and_keeps_direction_for_new_nodes(tmp_path, symmetric):
    data = layered_dag()
    rng = np.random.default_rng(0)
    data.x = np.eye(5, dtype=np.float32)[np.arange(data.num_nodes) // 30] + rng.normal(0, 0.1, (data.num_nodes, 5))
    data.x = data.x.astype(np.float32)
    run = gaescale.train(data=data, directed=True, directed_symmetric=symmetric, out=str(tmp_path / "run"),
                         **{**FAST, "epochs": 60})
    edges, feats = tmp_path / "e.tsv", tmp_path / "x.npy"
    # the training graph (its training edges: what the encoder saw) plus two new nodes: 150 -> layer-1 nodes
    # (a source like layer 0) and layer-3 nodes -> 151 (a target like layer 4)
    train = np.load(tmp_path / "run" / "heldout.npz")
    held = {tuple(p) for k in ("val_pos", "test_pos") for p in train[k].T}
    kept = np.array([p for p in data.edge_index.T if tuple(p) not in held]).T
    new = np.array([[150] * 4 + list(range(90, 94)), list(range(30, 34)) + [151] * 4])
    edges.write_text("".join(f"{u}\t{v}\n" for u, v in kept.T))
    np.save(feats, data.x)
    same = Run.open(tmp_path / "run").embed(edges, feats)  # the training graph: embeddings.npy again
    rows = {int(i): r for r, i in enumerate(same.node_ids)}
    old = np.array([rows[i] for i in range(data.num_nodes)])
    assert same.num_new == 0 and same.node_bias is None
    np.testing.assert_allclose(same.embeddings[old], run.embeddings, rtol=1e-4, atol=1e-5)
    edges.write_text("".join(f"{u}\t{v}\n" for u, v in np.concatenate([kept, new], axis=1).T))
    np.save(feats, np.vstack([data.x, np.eye(5, dtype=np.float32)[[0, 4]]]))
    out = Run.open(tmp_path / "run").embed(edges, feats, out=tmp_path / "z.npy")
    assert out.num_new == 2
    rows = {int(i): r for r, i in enumerate(out.node_ids)}
    z, h = out.embeddings, out.embeddings.shape[1] // 2
    s = lambda u, v: float(z[rows[u], :h] @ z[rows[v], h:])  # noqa: E731
    assert np.isfinite(z).all()
    # the new source points at layer 1, not the other way round; layer 3 points at the new target
    assert np.mean([s(150, v) > s(v, 150) for v in range(30, 60)]) > 0.8
    assert np.mean([s(u, 151) > s(151, u) for u in range(90, 120)]) > 0.8
    assert np.load(tmp_path / "z.npy").shape == z.shape
    with pytest.raises(gaescale.ParameterError, match="The 'block' parameter of embed must be None or 'auto' for a "
                                                      "directed run"):
        Run.open(tmp_path / "run").embed(edges, feats, block=64)
    # the directed encoder is gaescale's own: model.pt names no custom encoder
    assert torch.load(tmp_path / "run" / "model.pt", weights_only=True)["custom_encoder"] is None


def test_an_index_of_a_directed_run_ranks_out_links_as_the_exact_topk(dag_runs, tmp_path):
    from gaescale.run.index import build_index
    run = Run.open(dag_runs[3])
    for kind in ("hnsw", "ivf"):
        idx = tmp_path / f"{kind}.idx"
        assert build_index(run, idx, kind=kind)["decoder"] == "directed"
        for exclude in (False, True):
            exact = topk_links(run, 5, exclude_existing=exclude)
            found = topk_links(run, 5, exclude_existing=exclude, index=idx)
            pairs = lambda t: set(zip(t["node"], t["candidate"]))  # noqa: E731
            assert len(pairs(found) & pairs(exact)) >= 0.95 * len(pairs(exact))
            # every score is the exact s_uv of the pair (z_s_u . z_t_v), never the symmetric z_u . z_v
            z = run.embeddings
            h = z.shape[1] // 2
            u, v = run.rows(list(found["node"]), "n"), run.rows(list(found["candidate"]), "c")
            np.testing.assert_allclose(found["score"], (z[u, :h] * z[v, h:]).sum(1), rtol=1e-4, atol=1e-4)
            if exclude:  # no existing out-link is proposed
                assert not run.graph().has_edges(u, v).any()


def test_an_index_ranks_the_hand_made_directed_run(tmp_path):
    from gaescale.run.index import build_index
    run = _hand_run(tmp_path)
    build_index(run, tmp_path / "i.idx", kind="hnsw")
    top = topk_links(str(run), 1, index=tmp_path / "i.idx")
    assert list(top["candidate"]) == ["b", "c", "a"] and top["score"] == pytest.approx([6.0, 0.5, -0.1], abs=1e-6)
    excl = topk_links(str(run), 2, exclude_existing=True, index=tmp_path / "i.idx")
    assert list(zip(excl["node"], excl["candidate"])) == [("a", "c"), ("b", "c"), ("b", "a"), ("c", "a"), ("c", "b")]
