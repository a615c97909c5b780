"""The command line: bad inputs get one line naming the file/line/field, exit code 2 and no output."""
import json
import subprocess
import sys

import numpy as np
import pytest

from gaescale.cli import main


def _write(tmp_path, name, content):
    p = tmp_path / name
    if isinstance(content, np.ndarray):
        np.save(p, content)
    elif isinstance(content, dict):
        np.savez(p, **content)
    else:
        p.write_text(content)
    return str(p)


RING = "".join(f"{i} {(i + 1) % 12}\n{i} {(i + 5) % 12}\n" for i in range(12))

BAD = {
    "missing file": (lambda t: ["train", str(t / "nope.csv")], r"nope.csv: no such file\."),
    "empty file": (lambda t: ["train", _write(t, "e.csv", "")], r"e.csv: the file is empty\."),
    "one column": (lambda t: ["train", _write(t, "e.csv", "1,2\n3\n")],
                   r"e.csv, line 2: expected at least 2 columns \(source, target\)\. Got 1: '3'\."),
    "non-numeric in numeric": (lambda t: ["train", _write(t, "e.txt", "1 2\n2 3\n3 x\n")],
                               r"e.txt, line 3, field 'target': expected an integer node id\. Got 'x'"),
    "ids int with string": (lambda t: ["train", _write(t, "e.txt", "a b\n"), "--ids", "int", "--header", "no"],
                            r"e.txt, line 1, field 'source': expected an integer node id\. Got 'a'"),
    "negative index npy": (lambda t: ["train", _write(t, "e.npy", np.array([[0, 1], [-1, 2]]))],
                           r"e.npy: node indices must be >= 0\. Got -1"),
    "out of range npz": (lambda t: ["train", _write(t, "g.npz", dict(edge_index=np.array([[0], [7]]), num_nodes=3))],
                         r"g.npz, field 'edge_index': node index 7 \(edge 0\) is out of range for num_nodes=3\."),
    "wrong shape": (lambda t: ["train", _write(t, "e.npy", np.zeros((3, 4), np.int64))],
                    r"e.npy: expected shape \(2, E\) or \(E, 2\)\. Got \(3, 4\)\."),
    "npz without edge_index": (lambda t: ["train", _write(t, "g.npz", dict(edges=np.zeros((2, 2), np.int64)))],
                               r"g.npz: expected an array named 'edge_index'\. Got arrays \['edges'\]\."),
    "feature rows": (lambda t: ["train", _write(t, "e.txt", RING), "--features", _write(t, "x.npy", np.ones((5, 2)))],
                     r"x.npy: has 5 feature rows \(row i = node id i\) but the edge list names node 5\."),
    "feature ids": (lambda t: ["train", _write(t, "e.csv", "a,b\nb,c\n"), "--header", "no",
                               "--features", _write(t, "x.csv", "id,f\na,1\nb,2\n")],
                    r"x.csv: 1 node\(s\) of the edge list have no feature row, e.g. id 'c'\."),
    "nan features": (lambda t: ["train", _write(t, "e.txt", RING),
                                "--features", _write(t, "x.npy", np.where(np.eye(12, 2) > 0, np.nan, 1.0))],
                     r"x.npy: features must be finite\. Got nan at row 0, column 0\."),
    "inf features in npz": (lambda t: ["train", _write(t, "g.npz", dict(edge_index=np.array([[0], [1]]),
                                                                          x=np.array([[1.0], [np.inf]])))],
                            r"g.npz, field 'x': features must be finite\. Got inf at row 1, column 0\."),
    "non-numeric feature": (lambda t: ["train", _write(t, "e.txt", RING), "--features",
                                       _write(t, "x.csv", "id,f\n0,1.5\n1,abc\n")],
                            r"x.csv, line 3, field 'f': feature values must be numbers\. Got 'abc'\."),
    "only self loops": (lambda t: ["train", _write(t, "e.txt", "1 1\n2 2\n")],
                        r"e.txt has no edges left after removing self loops and duplicates"),
    "no training edges": (lambda t: ["train", _write(t, "e.txt", RING), "--val-fraction", "0.5", "--test-fraction",
                                     "0.5"],
                          r"The 'val_fraction \+ test_fraction' parameter of split_edges must be small enough to "
                          r"leave training edges \(the graph has 24 edges\)\. Got 1\.0 instead\."),
    "bad learning rate": (lambda t: ["train", _write(t, "e.txt", RING), "--lr", "-1"],
                          r"The 'lr' parameter of train must be a float > 0\. Got '-1' instead\."),
    "bad hidden": (lambda t: ["train", _write(t, "e.txt", RING), "--hidden", "16,x"],
                   r"The 'hidden' parameter of train must be a comma-separated list of ints >= 1"),
    "linear with hidden": (lambda t: ["train", _write(t, "e.txt", RING), "--encoder", "linear", "--hidden", "16"],
                           r"The 'hidden' parameter of train must be empty with encoder='linear'"),
    "closed with bce": (lambda t: ["train", _write(t, "e.txt", RING), "--dense", "closed"],
                        r"The 'dense' parameter of train must be 'sampled' or 'exact' unless loss='linear-mse'"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_one_line_error_no_output(tmp_path, capsys, case):
    make_args, pattern = BAD[case]
    out = tmp_path / "run"
    code = main(make_args(tmp_path) + ["--out", str(out), "--quiet", "--epochs", "2"])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gaescale: error: "), err
    import re
    assert re.search(pattern, lines[0]), lines[0]
    assert not out.exists()


def test_output_dir_that_is_a_file(tmp_path, capsys):
    f = tmp_path / "taken"
    f.write_text("keep me")
    code = main(["train", _write(tmp_path, "e.txt", RING), "--out", str(f), "--quiet"])
    assert code == 2
    assert capsys.readouterr().err.strip() == f"gaescale: error: {f}: the output directory is an existing file; choose another --out."
    assert f.read_text() == "keep me"


def test_missing_out_is_a_usage_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "gaescale", "train", _write(tmp_path, "e.txt", RING)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "required: --out" in r.stderr


def test_help_lists_every_config_field():
    import dataclasses

    from gaescale.config import TrainConfig
    r = subprocess.run([sys.executable, "-m", "gaescale", "train", "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    for f in dataclasses.fields(TrainConfig):
        if f.name != "edges":
            assert f.metadata.get("flag", "--" + f.name.replace("_", "-")) in r.stdout, f.name
    r = subprocess.run([sys.executable, "-m", "gaescale", "demo", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--nodes" in r.stdout and "(default: 16,16)" in r.stdout


def test_train_string_ids_end_to_end(tmp_path):
    """Embeddings keyed by the user's own ids; every output present; real subprocess exit code."""
    names = [f"user_{i}" for i in range(40)]
    rng = np.random.default_rng(0)
    rows = {tuple(sorted(rng.choice(40, 2, replace=False))) for _ in range(150)}
    edges = "src,dst\n" + "".join(f"{names[a]},{names[b]}\n" for a, b in sorted(rows))
    feats = "id,f1,f2\n" + "".join(f"{n},{i % 3},{i % 5}\n" for i, n in enumerate(reversed(names)))
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "gaescale", "train", _write(tmp_path, "e.csv", edges), "--features",
                        _write(tmp_path, "f.csv", feats), "--out", str(out), "--epochs", "5", "--hidden", "8",
                        "--dim", "4"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "test AUC" in r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["checkpoints", "config.json", "embeddings.npy", "graph.npz",
                                                    "heldout.npz", "metrics.json", "model.pt", "node_bias.npy", "nodes.tsv",
                                                    "report"]
    assert (out / "report" / "report.html").is_file() and (out / "checkpoints" / "epoch-000005.pt").is_file()
    ids = (out / "nodes.tsv").read_text().splitlines()
    emb = np.load(out / "embeddings.npy")
    assert sorted(ids) == sorted(names) and emb.shape == (40, 4) and emb.dtype == np.float32
    m = json.loads((out / "metrics.json").read_text())
    for key in ("test_auc", "test_ap", "val_auc", "val_ap", "epochs", "seconds_per_epoch", "peak_rss_bytes", "history"):
        assert key in m
    assert m["epochs"] == len(m["history"]) == 5
    assert json.loads((out / "config.json").read_text())["dim"] == 4
