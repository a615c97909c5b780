"""The bad-input catalogue beyond `train`'s input files (those are in test_cli.py): run directories,
topk/score/report, checkpoints and resume, config files, and the Python API.

Every case asserts the exact one-line message, exit code 2 (or the named exception for the API) and
that nothing was written: the directory tree is the same before and after.
"""
import os
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

import gaescale
from conftest import FAST, RING, tree
from gaescale.cli import main
from gaescale.training.checkpoint import list_checkpoints


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished run with two checkpoints, and its edge list."""
    d = tmp_path_factory.mktemp("trained")
    (d / "e.txt").write_text(RING)
    assert main(["train", str(d / "e.txt"), "--out", str(d / "run"), "--checkpoint-every", "1"] + FAST) == 0
    np.save(d / "x.npy", np.eye(30, 3, dtype=np.float32) + 1)  # a run with features, for embed
    assert main(["train", str(d / "e.txt"), "--features", str(d / "x.npy"), "--out", str(d / "xrun")] + FAST) == 0
    return d


def _setup_run(t, trained, drop=None, corrupt=None):
    shutil.copytree(trained, t, dirs_exist_ok=True)
    if drop:
        os.remove(t / "run" / drop)
    if corrupt:
        ck = list_checkpoints(t / "run" / "checkpoints")[-1][1]
        ck.write_bytes(b"not a checkpoint")
    return t


def _run(t):
    return str(t / "run")


CASES = {
    "topk: no run directory": (lambda t, tr: ["topk", str(t / "nope"), "--out", str(t / "l.tsv")],
                               "{t}/nope: no such run directory; pass the --out directory of a finished "
                               "'gaescale train'."),
    "topk: not a run": (lambda t, tr: ["topk", str(t), "--out", str(t / "l.tsv")],
                        "{t}: not a finished gaescale run (embeddings.npy is missing); pass the --out directory of a "
                        "finished 'gaescale train'."),
    "topk: k is zero": (lambda t, tr: ["topk", _run(_setup_run(t, tr)), "--k", "0", "--out", str(t / "l.tsv")],
                        "The 'k' parameter of topk must be an int >= 1. Got 0 instead."),
    "topk: k not a number": (lambda t, tr: ["topk", _run(_setup_run(t, tr)), "--k", "ten", "--out", str(t / "l.tsv")],
                             "The 'k' parameter of topk must be an int >= 1. Got 'ten' instead."),
    "topk: unknown node": (lambda t, tr: ["topk", _run(_setup_run(t, tr)), "--node-ids", "3", "x9",
                                          "--out", str(t / "l.tsv")],
                           "--node-ids: node id 'x9' is not in the run ({t}/run/nodes.tsv)."),
    "topk: output suffix": (lambda t, tr: ["topk", _run(_setup_run(t, tr)), "--out", str(t / "l.xlsx")],
                            "The 'out' parameter of topk must be a file name ending in one of ['.tsv', '.csv', "
                            "'.parquet']. Got '{t}/l.xlsx' instead."),
    "topk: graph.npz missing": (lambda t, tr: ["topk", _run(_setup_run(t, tr, drop="graph.npz")), "--exclude-existing",
                                               "--out", str(t / "l.tsv")],
                                "{t}/run: graph.npz is missing; it is written by 'gaescale train' at the end of a run: "
                                "train again (or resume) to create it."),
    "topk: nodes.tsv does not match": (lambda t, tr: ["topk", _edit(_setup_run(t, tr), "run/nodes.tsv", "1\n2\n")[:-10],
                                                      "--out", str(t / "l.tsv")],
                                       "{t}/run/nodes.tsv: has 2 ids but embeddings.npy has 30 rows; the run directory "
                                       "is inconsistent."),
    "index: no run directory": (lambda t, tr: ["index", str(t / "nope"), "--out", str(t / "i.idx")],
                                "{t}/nope: no such run directory; pass the --out directory of a finished "
                                "'gaescale train'."),
    "index: unwritable --out": (lambda t, tr: ["index", _run(_setup_run(t, tr)), "--out", _edit(t, "f", "") + "/i.idx"],
                                "{t}/f/i.idx: cannot create the file: {t}/f is not a directory."),
    "index: unknown kind": (lambda t, tr: ["index", _run(_setup_run(t, tr)), "--out", str(t / "i.idx"),
                                           "--kind", "lsh"],
                            "The 'kind' parameter of index must be one of ['auto', 'hnsw', 'ivf']. Got 'lsh' instead."),
    "index: hadamard run": (lambda t, tr: ["index", _edit(_setup_run(t, tr), "run/config.json",
                                                          '{"decoder": "hadamard"}')[:-12], "--out", str(t / "i.idx")],
                            "The 'decoder' parameter of index must be 'bias' or 'inner' (a bilinear decoder, which an "
                            "inner-product index ranks); score candidate pairs of this hadamard run with 'gaescale "
                            "score'. Got 'hadamard' instead."),
    "topk: --index not an index": (lambda t, tr: ["topk", _run(_setup_run(t, tr)), "--index", _edit(t, "i.idx", "x\n"),
                                                  "--out", str(t / "l.tsv")],
                                   "{t}/i.idx: not a gaescale index (expected a file written by 'gaescale index RUN "
                                   "--out FILE')."),
    "topk: --index missing": (lambda t, tr: ["topk", _run(_setup_run(t, tr)), "--index", str(t / "i.idx"),
                                             "--out", str(t / "l.tsv")],
                              "{t}/i.idx: no such file."),
    "topk: --index of a retrained run": (lambda t, tr: ["topk", _stale_index(t, tr), "--index", str(t / "i.idx"),
                                                        "--out", str(t / "l.tsv")],
                                         "{t}/i.idx: was built from other embeddings than {t}/run/embeddings.npy holds "
                                         "now (the run was retrained since, or the index is of another run, {t}/run): "
                                         "rebuild it with 'gaescale index {t}/run --out {t}/i.idx'."),
    "score: unknown id": (lambda t, tr: ["score", _run(_setup_run(t, tr)), _edit(t, "p.txt", "1 2\n# c\n3 77\n")],
                          "{t}/p.txt, line 3, field 'target': node id '77' is not in the run ({t}/run/nodes.tsv)."),
    "score: one column": (lambda t, tr: ["score", _run(_setup_run(t, tr)), _edit(t, "p.csv", "1,2\n5\n")],
                          "{t}/p.csv, line 2: expected 2 node ids (source, target). Got 1: '5'."),
    "score: no pairs": (lambda t, tr: ["score", _run(_setup_run(t, tr)), _edit(t, "p.txt", "# nothing\n\n")],
                        "{t}/p.txt: no pairs to score (the input is empty or only comments)."),
    "score: missing pairs file": (lambda t, tr: ["score", _run(_setup_run(t, tr)), str(t / "p.txt")],
                                  "{t}/p.txt: no such file."),
    "embed: no run directory": (lambda t, tr: ["embed", str(t / "nope"), _edit(t, "e.txt", RING), "--out",
                                               str(t / "z.npy")],
                                "{t}/nope: no such run directory; pass the --out directory of a finished "
                                "'gaescale train'."),
    "embed: missing edges": (lambda t, tr: ["embed", _xrun(_setup_run(t, tr)), str(t / "new.txt"), "--features",
                                            str(t / "x.npy"), "--out", str(t / "z.npy")],
                             "{t}/new.txt: no such file."),
    "embed: featureless run": (lambda t, tr: ["embed", _run(_setup_run(t, tr)), str(t / "e.txt"), "--out",
                                              str(t / "z.tsv")],
                               "The 'run' parameter of embed must be a run trained with node features (train "
                               "--features): this run is featureless, its first layer a learnt table with one row per "
                               "training node and none for a node it never saw; to embed new nodes without "
                               "retraining, train with --features (node attributes, or e.g. each node's degree). Got "
                               "'{t}/run' instead."),
    "embed: no features": (lambda t, tr: ["embed", _xrun(_setup_run(t, tr)), str(t / "e.txt"), "--out",
                                          str(t / "z.npy")],
                           "The 'features' parameter of embed must be the path of the node features (3 per node, as "
                           "the run was trained with; the same formats as train --features). Got None instead."),
    "embed: features of another width": (lambda t, tr: ["embed", _xrun(_setup_run(t, tr)), str(t / "e.txt"),
                                                        "--features", _save(t, "x2.npy", np.ones((30, 2))), "--out",
                                                        str(t / "z.parquet")],
                                         "{t}/x2.npy: expected 3 features per node, as the run was trained with. "
                                         "Got 2."),
    "embed: non-finite features": (lambda t, tr: ["embed", _xrun(_setup_run(t, tr)), str(t / "e.txt"), "--features",
                                                  _save(t, "x3.npy", np.full((30, 3), np.nan)), "--out",
                                                  str(t / "z.npy")],
                                   "{t}/x3.npy: features must be finite. Got nan at row 0, column 0."),
    "embed: output suffix": (lambda t, tr: ["embed", _xrun(_setup_run(t, tr)), str(t / "e.txt"), "--features",
                                            str(t / "x.npy"), "--out", str(t / "z.xlsx")],
                             "The 'out' parameter of embed must be a file name ending in one of ['.npy', '.tsv', "
                             "'.csv', '.parquet']. Got '{t}/z.xlsx' instead."),
    "embed: output is a directory": (lambda t, tr: ["embed", _xrun(_setup_run(t, tr)), str(t / "e.txt"),
                                                    "--features", str(t / "x.npy"), "--out", _mkdir(t, "z.npy")],
                                     "{t}/z.npy: is a directory; --out names the file to write."),
    "embed: block not a number": (lambda t, tr: ["embed", _xrun(_setup_run(t, tr)), str(t / "e.txt"), "--features",
                                                 str(t / "x.npy"), "--block", "many", "--out", str(t / "z.npy")],
                                  "The 'block' parameter of embed must be an int >= 1. Got 'many' instead."),
    "embed: model.pt missing": (lambda t, tr: ["embed", _run(_setup_run(t, tr, drop="model.pt")), str(t / "e.txt"),
                                               "--out", str(t / "z.npy")],
                                "{t}/run: model.pt is missing; it is written by 'gaescale train' at the end of a run: "
                                "train again (or resume) to create it."),
    "train --weighted: no weight column": (lambda t, tr: ["train", _edit(t, "e.txt", RING), "--weighted", "--out",
                                                          str(t / "o")] + FAST,
                                           "{t}/e.txt, line 1, field 'weight': missing edge weight (--weighted reads "
                                           "the third column)."),
    "train --weighted: not a number": (lambda t, tr: ["train", _edit(t, "e.txt", "1 2 0.5\n# c\n2 3 heavy\n"),
                                                      "--weighted", "--out", str(t / "o")] + FAST,
                                       "{t}/e.txt, line 3, field 'weight': expected an edge weight: a finite number "
                                       ">= 0. Got 'heavy'."),
    "train --weighted: negative": (lambda t, tr: ["train", _edit(t, "e.csv", "src,dst,w\n1,2,0.5\n2,3,-2\n"),
                                                  "--weighted", "--out", str(t / "o")] + FAST,
                                   "{t}/e.csv, line 3, field 'w': expected an edge weight: a finite number >= 0. "
                                   "Got '-2'."),
    "train --weighted: NaN": (lambda t, tr: ["train", _edit(t, "e.csv", "1,2,0.5\n2,3,NaN\n"), "--weighted"]
                              + OUT(t) + FAST,
                              "{t}/e.csv, line 2, field 'weight': expected an edge weight: a finite number >= 0. "
                              "Got 'NaN'."),
    "train --weighted: unknown --weight-column": (
        lambda t, tr: ["train", _edit(t, "e.csv", "src,dst,w\n1,2,0.5\n"), "--weighted", "--weight-column",
                       "weight"] + OUT(t) + FAST,
        "{t}/e.csv, line 1: no column named 'weight' (--weight-column). Got columns ['src', 'dst', 'w']."),
    "train --weighted: npz edge_weight length": (
        lambda t, tr: ["train", _npz(t, edge_index=np.array([[0, 1], [1, 2]]), edge_weight=np.ones(3)),
                       "--weighted"] + OUT(t) + FAST,
        "{t}/e.npz, field 'edge_weight': expected 2 numbers, one per edge of 'edge_index'. Got shape (3,), dtype "
        "float64."),
    "train --weight-column without --weighted": (
        lambda t, tr: ["train", _edit(t, "e.csv", "src,dst,w\n1,2,0.5\n"), "--weight-column", "w"] + OUT(t) + FAST,
        "The 'weight_column' parameter of train must be used with weighted=True (--weighted). Got 'w' instead."),
    "train --weighted: prepared graph": (
        lambda t, tr: ["train", _edit_dir(t, "prep", "graph.json", "{}"), "--weighted"] + OUT(t) + FAST,
        "The 'weighted' parameter of train must be False for a prepared graph ('gaescale prepare' keeps no edge "
        "weights yet; train from the edge list itself). Got True instead."),
    "report: heldout.npz missing": (lambda t, tr: ["report", _run(_setup_run(t, tr, drop="heldout.npz"))],
                                    "{t}/run: heldout.npz is missing; it is written by 'gaescale train' at the end of "
                                    "a run: train again (or resume) to create it."),
    "resume: no checkpoint": (lambda t, tr: ["train", _edit(t, "e.txt", RING), "--out", str(t / "run"),
                                             "--resume"] + FAST,
                              "{t}/run/checkpoints: no checkpoint to resume from; run without --resume to start "
                              "afresh."),
    "resume: changed config": (lambda t, tr: ["train", str(_setup_run(t, tr) / "e.txt"), "--out", _run(t), "--resume",
                                              "--lr", "0.5"] + FAST,
                               "{t}/run/checkpoints/epoch-000002.pt: the checkpoint was written with a different "
                               "configuration (changed: lr 0.01 -> 0.5); resume with the same settings, or train "
                               "without --resume into another --out."),
    "resume: other graph": (lambda t, tr: ["train", _edit(_setup_run(t, tr), "e.txt", RING + "0 15\n"),
                                           "--out", _run(t), "--resume"] + FAST,
                            "{t}/run/checkpoints/epoch-000002.pt: the checkpoint was trained on a different graph or "
                            "features; resume with the same input files, or train without --resume into another "
                            "--out."),
    "config: invalid JSON": (lambda t, tr: ["train", "--config", _edit(t, "c.json", '{\n  "lr": 0.1,\n}\n'), "--out",
                                            str(t / "out")],
                             "{t}/c.json, line 3: not valid JSON: Expecting property name enclosed in double quotes "
                             "(column 1)."),
    "config: unknown field": (lambda t, tr: ["train", "--config",
                                             _edit(t, "c.json", '{"edges": "e.txt", "learning_rate": 1}'),
                                             "--out", str(t / "out")],
                              "{t}/c.json, field 'learning_rate': unknown config field; 'gaescale train --help' lists "
                              "the fields (as flags)."),
    "config: bad value": (lambda t, tr: ["train", "--config", _edit(t, "c.json", '{"edges": "e.txt", "epochs": 0}'),
                                         "--out", str(t / "out")],
                          "The 'epochs' parameter of train must be an int >= 1. Got 0 instead."),
    "flag: option of another strategy": (lambda t, tr: ["train", _edit(t, "e.txt", RING), "--out", str(t / "out"),
                                                        "--fastgae-nodes", "100"],
                                         "The 'fastgae_nodes' parameter of train must be left unset unless "
                                         "strategy is 'fastgae' or 'auto'. Got 100 instead."),
    "flag: negative checkpoint interval": (lambda t, tr: ["train", _edit(t, "e.txt", RING), "--out", str(t / "out"),
                                                          "--checkpoint-every", "-1"],
                                           "The 'checkpoint_every' parameter of train must be an int >= 0. Got '-1' "
                                           "instead."),
    "flag: tensorboard directory is a file": (lambda t, tr: ["train", _edit(t, "e.txt", RING), "--out", str(t / "out"),
                                                             "--tensorboard", _edit(t, "tb", "x")] + FAST,
                                              "{t}/tb: the TensorBoard directory is an existing file; choose another "
                                              "--tensorboard."),
    "plan: both a graph and counts": (lambda t, tr: ["plan", _edit(t, "e.txt", RING), "--num-nodes", "30"],
                                      "The 'graph' parameter of plan must be an edge list, or --num-nodes and "
                                      "--num-edges, not both. Got 'both' instead."),
    "flag: a memory budget nothing fits": (lambda t, tr: ["train", _edit(t, "e.txt", RING), "--out", str(t / "out"),
                                                          "--strategy", "auto", "--memory-budget", "0.01", "--quiet"],
                                           "The 'memory_budget' parameter of train must be at least 0.74 GiB, the "
                                           "smallest predicted peak (strategy 'cluster'); lower --batch-size or "
                                           "raise --cluster-parts. Got '0.01 GiB' instead."),
    "flag: --directed with another strategy": (lambda t, tr: ["train", _edit(t, "e.txt", RING), "--out", str(t / "o"),
                                                              "--directed", "--strategy", "cluster", "--quiet"],
                                               "The 'strategy' parameter of train must be 'full' with directed=True "
                                               "(the other strategies do not support directed graphs yet). Got "
                                               "'cluster' instead."),
    "flag: --directed-symmetric without --directed": (lambda t, tr: ["train", _edit(t, "e.txt", RING), "--out",
                                                                     str(t / "o"), "--directed-symmetric", "on",
                                                                     "--quiet"],
                                                      "The 'directed_symmetric' parameter of train must be 'auto' "
                                                      "(unset) without directed=True (it shapes the directed model "
                                                      "only). Got 'on' instead."),
    "flag: --directed with --variational": (lambda t, tr: ["train", _edit(t, "e.txt", RING), "--out", str(t / "o"),
                                                           "--directed", "--variational", "--quiet"],
                                            "The 'variational' parameter of train must be False with directed=True (a "
                                            "directed VGAE is not supported yet). Got True instead."),
    "flag: --directed with a prepared graph": (lambda t, tr: ["train", _prepared(t), "--out", str(t / "o"),
                                                              "--directed", "--quiet"],
                                               "The 'directed' parameter of train must be False with a prepared graph "
                                               "('gaescale prepare' stores an undirected graph; directed graphs are "
                                               "read from an edge list, not supported prepared yet). Got True "
                                               "instead."),
}


def _xrun(t):
    return str(t / "xrun")


def _mkdir(t, name):
    (t / name).mkdir()
    return str(t / name)


def _save(t, name, array):
    np.save(t / name, array)
    return str(t / name)


def _prepared(t):
    from gaescale.data.prepare import prepare
    prepare(_edit(t, "e.txt", RING), t / "prep", log=lambda m: None)
    return str(t / "prep")


def _stale_index(t, trained):
    """The run's index, then the run retrained (other embeddings of the same shape)."""
    from gaescale.run.index import build_index
    run = _run(_setup_run(t, trained))
    build_index(run, t / "i.idx")
    z = np.load(t / "run" / "embeddings.npy")
    np.save(t / "run" / "embeddings.npy", z + 1)
    return run


def _edit(t, name, text):
    (t / name).write_text(text)
    return str(t / name)


def OUT(t):
    return ["--out", str(t / "o")]


def _edit_dir(t, directory, name, text):
    (t / directory).mkdir()
    _edit(t / directory, name, text)
    return str(t / directory)


def _npz(t, **arrays):
    np.savez(t / "e.npz", **arrays)
    return str(t / "e.npz")


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_catalogue(tmp_path, capsys, trained, case):
    make, expected = CASES[case]
    argv = make(tmp_path, trained)
    before = tree(tmp_path)
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0] == "gaescale: error: " + expected.format(t=tmp_path)
    assert tree(tmp_path) == before  # no partial output, nothing touched


class _BarePyG(__import__("torch").nn.Module):
    """A PyG-style module, forward(x, edge_index)."""

    def forward(self, x, edge_index):
        return x


def _PyGEncoder(module):
    from gaescale.pyg import PyGEncoder
    return PyGEncoder(module)


API = {
    "loss kind": (lambda: gaescale.reconstruction_loss(__import__("torch").zeros(4, 2),
                                                       __import__("torch").tensor([[0], [1]]), 4, kind="hinge"),
                  gaescale.ParameterError, "The 'kind' parameter of reconstruction_loss must be one of"),
    "train without edges": (lambda: gaescale.train(out=None, quiet=True), gaescale.ParameterError,
                            "The 'edges' parameter of train must be the path of an edge list. Got None instead."),
    "tensorboard directory is a file": (lambda: gaescale.train(edges="e.txt", tensorboard=__file__, quiet=True),
                                        gaescale.OutputError, f"{__file__}: the TensorBoard directory is an existing "
                                                              "file; choose another --tensorboard."),
    "config type": (lambda: gaescale.TrainConfig(edges="e.txt", variational="yes"), gaescale.ParameterError,
                    "The 'variational' parameter of train must be a bool. Got 'yes' instead."),
    "loss edge_weight": (lambda: gaescale.reconstruction_loss(__import__("torch").zeros(4, 2),
                                                              __import__("torch").tensor([[0], [1]]), 4,
                                                              edge_weight=__import__("torch").tensor([-1.0])),
                         gaescale.ParameterError, "The 'edge_weight' parameter of reconstruction_loss must be finite "
                                                  "weights >= 0. Got 'a weight of -1.0' instead."),
    "index kind": (lambda: __import__("gaescale.run.index").run.index.index_params(100, 8, kind="lsh"),
                   gaescale.ParameterError, "The 'kind' parameter of index must be one of ['auto', 'hnsw', 'ivf']."),
    "top_k k": (lambda: __import__("gaescale.run.scan").run.scan.top_k(np.ones((3, 2)), 0),
                gaescale.ParameterError, "The 'k' parameter of top_k must be an int >= 1. Got 0 instead."),
    "embed block": (lambda: __import__("gaescale.run.embed").run.embed.embed("run", "e.txt", block=0),
                    gaescale.ParameterError, "The 'block' parameter of embed must be an int >= 1, None or 'auto'. "
                                             "Got 0 instead."),
    "from_pyg: no edge_index": (
        lambda: gaescale.from_pyg(SimpleNamespace(x=np.ones((3, 2)))), gaescale.ParameterError,
        "The 'data' parameter of from_pyg must be a torch_geometric Data (or an object) with an 'edge_index' "
        "attribute. Got SimpleNamespace without edge_index instead."),
    "from_pyg: edge_index shape": (
        lambda: gaescale.from_pyg(SimpleNamespace(edge_index=np.zeros((3, 4), int))), gaescale.ParameterError,
        "The 'data.edge_index' parameter of from_pyg must be a (2, E) tensor of node indices. Got shape (3, 4) "
        "instead."),
    "from_pyg: index past num_nodes": (
        lambda: gaescale.from_pyg(SimpleNamespace(edge_index=np.array([[0, 1], [1, 5]]), num_nodes=4)),
        gaescale.ParameterError, "The 'data.edge_index' parameter of from_pyg must be node indices in "
                                 "[0, num_nodes=4). Got indices from 0 to 5 instead."),
    "from_pyg: negative weight": (
        lambda: gaescale.from_pyg(SimpleNamespace(edge_index=np.array([[0, 1], [1, 2]]),
                                                  edge_weight=np.array([1.0, -2.0]))),
        gaescale.ParameterError, "The 'data.edge_weight' parameter of from_pyg must be finite edge weights >= 0. "
                                 "Got -2.0 at column 1 instead."),
    "from_pyg: features rows": (
        lambda: gaescale.from_pyg(SimpleNamespace(edge_index=np.array([[0, 1], [1, 2]]), x=np.ones((2, 3)),
                                                  num_nodes=3)),
        gaescale.ParameterError, "The 'data.x' parameter of from_pyg must be (num_nodes=3, F) features, one row per "
                                 "node. Got shape (2, 3) instead."),
    "train: a bare PyG module": (
        lambda: gaescale.train(data=gaescale.community_graph(40, 80), encoder=_BarePyG()), gaescale.ParameterError,
        "The 'encoder' parameter of train must be a gaescale encoder, forward(x, graph): wrap a PyG module as "
        "gaescale.pyg.PyGEncoder(module). Got _BarePyG instead."),
    "train: custom encoder, strategy auto": (
        lambda: gaescale.train(data=gaescale.community_graph(40, 80), encoder=_PyGEncoder(_BarePyG()),
                               strategy="auto"), gaescale.ParameterError,
        "The 'strategy' parameter of train must be 'full', 'cluster', 'fastgae' or 'neighbor' with a custom encoder "
        "(the planner predicts gaescale's own encoders). Got 'auto' instead."),
    "directed_loss z": (lambda: __import__("gaescale.directed.model").directed.model.directed_loss(
        __import__("torch").zeros(4, 3), __import__("torch").tensor([[0], [1]])), gaescale.ParameterError,
        "The 'z' parameter of directed_loss must be a 2-D tensor with num_nodes=4 rows and an even number of columns "
        "([z_s | z_t]). Got (4, 3) instead."),
}


@pytest.mark.parametrize("case", sorted(API))
def test_python_api_errors(case):
    call, exc, message = API[case]
    with pytest.raises(exc) as info:
        call()
    assert str(info.value).startswith(message) and "\n" not in str(info.value)
