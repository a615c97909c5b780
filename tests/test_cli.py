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
    assert capsys.readouterr().err.strip() == (f"gaescale: error: {f}: the output directory is an existing file; "
                                               "choose another --out.")
    assert f.read_text() == "keep me"


def test_missing_edges_is_a_usage_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "gaescale", "train", "--epochs", "1"], capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 2 and "required: EDGES" in r.stderr and not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_help_lists_every_config_field():
    import dataclasses

    from gaescale.config import TrainConfig
    r = subprocess.run([sys.executable, "-m", "gaescale", "train", "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    for f in dataclasses.fields(TrainConfig):
        if f.name != "edges":
            assert f.metadata.get("flag", "--" + f.name.replace("_", "-")) in r.stdout, f.name
    r = subprocess.run([sys.executable, "-m", "gaescale", "demo", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--num-nodes" in r.stdout and "(default: 16,16)" in r.stdout
    assert "--weighted" not in r.stdout  # the built-in graph has no weights


@pytest.mark.slow
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
                                                    "heldout.npz", "manifest.json", "metrics.json", "model.pt",
                                                    "node_bias.npy",
                                                    "nodes.tsv", "report"]
    assert (out / "report" / "report.html").is_file() and (out / "checkpoints" / "epoch-000005.pt").is_file()
    ids = (out / "nodes.tsv").read_text().splitlines()
    emb = np.load(out / "embeddings.npy")
    assert sorted(ids) == sorted(names) and emb.shape == (40, 4) and emb.dtype == np.float32
    m = json.loads((out / "metrics.json").read_text())
    for key in ("test_auc", "test_ap", "val_auc", "val_ap", "epochs", "seconds_per_epoch", "peak_rss_bytes", "history"):
        assert key in m
    assert m["epochs"] == len(m["history"]) == 5
    assert json.loads((out / "config.json").read_text())["dim"] == 4


def _community_npz(tmp_path, nodes=300, edges=1200):
    from gaescale.data.synthetic import community_graph
    data = community_graph(nodes, edges, seed=0)
    p = tmp_path / "g.npz"
    np.savez(p, edge_index=data.edge_index, x=data.x)
    return str(p)


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """One small run trained through the command line (GCN with its defaults), no report."""
    tmp = tmp_path_factory.mktemp("cli")
    out = tmp / "run"
    assert main(["train", _community_npz(tmp), "--out", str(out), "--encoder", "gcn", "--epochs", "3", "--quiet",
                 "--no-report"]) == 0
    return out


def test_version_prints_the_package_version(capsys):
    from gaescale import __version__
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out == f"gaescale {__version__}\n"


def test_demo_trains_on_the_generated_graph_and_writes_a_complete_run(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--nodes", "2000", "--num-edges", "8000", "--epochs", "2", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "generating the default graph: 2,000 nodes, 8,000 edges" in err and "test AUC" in err
    for name in ("embeddings.npy", "nodes.tsv", "model.pt", "config.json", "metrics.json", "report/report.html"):
        assert (out / name).is_file(), name
    emb = np.load(out / "embeddings.npy")
    assert emb.shape == (2000, 8) and emb.dtype == np.float32 and np.isfinite(emb).all()  # demo: dim 8
    assert len((out / "nodes.tsv").read_text().splitlines()) == 2000
    config = json.loads((out / "config.json").read_text())
    assert config["hidden"] == [16, 16] and config["dim"] == 8 and config["epochs"] == 2
    m = json.loads((out / "metrics.json").read_text())
    assert m["epochs"] == len(m["history"]) == 2 and (m["num_nodes"], m["num_edges"]) == (2000, 8000)
    assert np.isfinite([h["loss"] for h in m["history"]]).all()
    assert 0.0 <= m["test_auc"] <= 1.0 and 0.0 <= m["test_ap"] <= 1.0 and 0.0 <= m["val_auc"] <= 1.0


def test_report_command_writes_the_html_report_of_a_run(cli_run, tmp_path, capsys):
    assert not (cli_run / "report").exists()  # trained with --no-report
    assert main(["report", str(cli_run), "--out", str(tmp_path / "rep")]) == 0
    page = tmp_path / "rep" / "report.html"
    assert page.is_file() and "<html" in page.read_text().lower()
    assert capsys.readouterr().err.strip().endswith(f"wrote {page}")


def test_train_with_a_runs_config_retrains_the_same_model(cli_run, tmp_path):
    again = tmp_path / "again"
    assert main(["train", "--config", str(cli_run / "config.json"), "--out", str(again), "--quiet"]) == 0
    old, new = (json.loads((d / "config.json").read_text()) for d in (cli_run, again))
    assert new == old and "out" not in new  # where a run goes is the command's, never the model's
    assert np.array_equal(np.load(again / "embeddings.npy"), np.load(cli_run / "embeddings.npy"))


def test_train_with_a_runs_config_and_another_encoder_refills_its_defaults(cli_run, tmp_path):
    old = json.loads((cli_run / "config.json").read_text())
    assert (old["encoder"], old["hidden"], old["dim"]) == ("gcn", [32], 16)  # the GCN's defaults, resolved
    out = tmp_path / "linear"
    assert main(["train", "--config", str(cli_run / "config.json"), "--encoder", "linear", "--out", str(out),
                 "--quiet", "--no-report", "--epochs", "1"]) == 0
    new = json.loads((out / "config.json").read_text())
    assert (new["encoder"], new["hidden"], new["dim"], new["lr"]) == ("linear", [], 64, 0.02)


def test_score_command_writes_the_pairs_table_to_out(cli_run, tmp_path, capsys):
    ids = (cli_run / "nodes.tsv").read_text().split()
    pairs = tmp_path / "pairs.txt"
    pairs.write_text(f"{ids[0]}\t{ids[5]}\n{ids[7]}\t{ids[2]}\n")
    out = tmp_path / "scores.csv"
    assert main(["score", str(cli_run), str(pairs), "--out", str(out)]) == 0
    assert capsys.readouterr().out == ""  # the table went to --out
    import pandas as pd
    assert out.read_text().splitlines()[0] == "source,target,score,probability"
    t = pd.read_csv(out, dtype={"source": str, "target": str})
    z, b = np.load(cli_run / "embeddings.npy"), np.load(cli_run / "node_bias.npy")
    rows = [(0, 5), (7, 2)]
    expect = np.array([z[u] @ z[v] + b[u] + b[v] for u, v in rows], np.float64)  # the default decoder: bias
    assert t["source"].tolist() == [ids[u] for u, _ in rows] and t["target"].tolist() == [ids[v] for _, v in rows]
    np.testing.assert_allclose(t["score"], expect, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t["probability"], 1 / (1 + np.exp(-expect)), rtol=1e-5)


def _interrupt_at_epoch(monkeypatch, epoch):
    """Ctrl-C in the optimizer step of ``epoch`` (the full-batch strategy's ``epoch``-th call)."""
    from gaescale.training.strategies import FullBatch
    steps, calls = FullBatch.steps, []

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == epoch:
            raise KeyboardInterrupt
        yield from steps(self, *args, **kwargs)
    monkeypatch.setattr(FullBatch, "steps", interrupted)


def test_ctrl_c_during_training_exits_130_with_a_resume_hint_that_works(tmp_path, capsys, monkeypatch):
    args = ["train", _community_npz(tmp_path), "--out", str(tmp_path / "run"), "--epochs", "4", "--hidden", "8",
            "--dim", "4", "--quiet", "--no-report", "--checkpoint-every", "2"]
    _interrupt_at_epoch(monkeypatch, 3)
    assert main(args) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "gaescale: interrupted; run the same command with --resume to continue from the last checkpoint")
    assert (tmp_path / "run" / ".staging" / "checkpoints" / "epoch-000002.pt").is_file()  # the run is not complete
    assert not (tmp_path / "run" / "embeddings.npy").exists()
    monkeypatch.undo()
    assert main(args + ["--resume"]) == 0
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["epochs"] == 4


@pytest.mark.parametrize("how", ["flag", "config"])
def test_ctrl_c_without_checkpoints_gives_no_resume_hint(tmp_path, capsys, monkeypatch, how):
    edges, out = _community_npz(tmp_path), tmp_path / "run"
    if how == "flag":
        args = ["train", edges, "--checkpoint-every", "0"]
    else:  # checkpoint_every 0 from a config file: no flag on the command line
        (tmp_path / "c.json").write_text(json.dumps({"edges": edges, "checkpoint_every": 0}))
        args = ["train", "--config", str(tmp_path / "c.json")]
    _interrupt_at_epoch(monkeypatch, 2)
    assert main(args + ["--out", str(out), "--epochs", "4", "--quiet", "--no-report"]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "gaescale: interrupted"
    assert not (out / "checkpoints").exists()


def _help(capsys, monkeypatch, *command) -> str:
    monkeypatch.setenv("COLUMNS", "400")  # one line per option: nothing wrapped
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize("command, old, new, args, expect", [
    ("topk", "--nodes", "--node-ids", ["RUN", "--out", "t.tsv", "--node-ids", "a", "b"], ("node_ids", ["a", "b"])),
    ("plan", "--nodes", "--num-nodes", ["--num-nodes", "10"], ("num_nodes", "10")),
    ("plan", "--edges", "--num-edges", ["--num-edges", "20"], ("num_edges", "20")),
    ("demo", "--nodes", "--num-nodes", ["--num-nodes", "7"], ("num_nodes", 7)),
])
def test_a_renamed_flag_is_read_under_its_old_spelling_too_which_help_leaves_out(capsys, monkeypatch, command, old,
                                                                                new, args, expect):
    from gaescale.cli import build_parser
    dest, value = expect
    for spelling in (new, old):
        parsed = build_parser().parse_args([command] + [spelling if a == new else a for a in args])
        assert getattr(parsed, dest) == value, spelling
    text = _help(capsys, monkeypatch, command)
    assert f"  {new} " in text and f" {old} " not in text and f"[{old} " not in text


def test_plan_with_the_old_count_flags_prints_what_the_new_ones_do(capsys):
    assert main(["plan", "--num-nodes", "3000", "--num-edges", "15000", "--memory-budget", "64"]) == 0
    new = capsys.readouterr().out
    assert main(["plan", "--nodes", "3000", "--edges", "15000", "--memory-budget", "64"]) == 0
    assert capsys.readouterr().out == new and "3,000 nodes, 15,000 edges" in new


def test_metavars_are_whole_words(capsys, monkeypatch):
    import dataclasses
    import re

    from gaescale.config import TrainConfig
    text = _help(capsys, monkeypatch, "train")
    shown = dict(re.findall(r"^  (--[a-z-]+) ([A-Z_]+)\b", text, re.M))
    for flag, metavar in {"--checkpoint-every": "N", "--memory-budget": "SIZE", "--time-limit": "SECONDS",
                          "--cluster-parts": "N", "--batch-size": "N", "--val-fraction": "FRACTION",
                          "--neg-ratio": "RATIO", "--fastgae-alpha": "ALPHA", "--weight-column": "COLUMN",
                          "--epochs": "EPOCHS", "--tensorboard": "DIR", "--hard-negatives": "W"}.items():
        assert shown[flag] == metavar, flag
    for f in dataclasses.fields(TrainConfig):  # never a name cut at its first word
        words = f.name.upper().split("_")
        if len(words) > 1 and "--" + f.name.replace("_", "-") in shown:
            assert shown["--" + f.name.replace("_", "-")] != words[0], f.name


def test_the_score_help_says_what_each_decoder_scores(capsys, monkeypatch):
    text = " ".join(_help(capsys, monkeypatch, "score").split())
    for part in ("z_u . z_v (--decoder inner)", "z_u . z_v + b_u + b_v (bias)", "MLP of z_u * z_v (hadamard)",
                 "for a directed run z_s_u . z_t_v", "structural part", "sigmoid(s_uv)"):
        assert part in text, part
    assert "sigmoid of the run's logit (z_u . z_v, plus" not in text


def test_a_smaller_demo_keeps_the_built_in_graphs_degree(tmp_path, capsys):
    from gaescale.cli import demo_edges
    assert demo_edges(770_000) == 4_600_000  # the built-in graph unchanged
    assert main(["demo", "--num-nodes", "3000", "--epochs", "1", "--quiet", "--no-report",
                 "--out", str(tmp_path / "d")]) == 0
    m = json.loads((tmp_path / "d" / "metrics.json").read_text())
    assert (m["num_nodes"], m["num_edges"]) == (3000, 17_922)  # round(3000 * 4.6M / 770k): not 4.6M on 3,000 nodes
