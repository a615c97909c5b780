"""The run report: plots, report.json and one self-contained report.html, checked against numbers
recomputed here from the run directory's own files."""
import html
import json
import shutil
import sys
from html.parser import HTMLParser

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from conftest import dense_structure, hide_packages
from gaescale import EdgeList, community_graph, train
from gaescale.errors import MissingDependencyError, ParameterError, RunDirError
from gaescale.graph import Graph
from gaescale.run.report import degree_buckets, write_report

PLOTS = ("loss.png", "validation.png", "scores.png", "degree_auc.png", "pca.png")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """One small trained run (a few seconds), shared by the tests of this module."""
    out = tmp_path_factory.mktemp("report") / "run"
    train(data=community_graph(400, 2000, seed=0), out=str(out), epochs=4, hidden="8", dim=4, eval_every=2,
          quiet=True)
    return out


@pytest.fixture(scope="module")
def report(run_dir):
    pyplot_before = "matplotlib.pyplot" in sys.modules
    lines = []
    page = write_report(run_dir, sample=200, log=lines.append)
    assert pyplot_before or "matplotlib.pyplot" not in sys.modules  # the object API only: no global state
    return page, lines


class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs, self.imgs = [], 0

    def handle_starttag(self, tag, attrs):
        self.imgs += tag == "img"
        self.refs += [v for k, v in attrs if k in ("src", "href") and v is not None]


def test_writes_every_plot_and_a_self_contained_page(run_dir, report):
    page, lines = report
    assert page == run_dir / "report" / "report.html" and page.is_file()
    for name in PLOTS:
        assert (page.parent / name).read_bytes()[:8] == PNG_MAGIC, name
    assert len(lines) == 1 and "report.html" in lines[0]
    text = page.read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text
    parser = _Refs()
    parser.feed(text)
    assert parser.imgs == len(PLOTS)
    for ref in parser.refs:
        assert ref.startswith("data:") or (not ref.startswith("/") and ":" not in ref
                                           and (page.parent / ref).is_file()), ref
    assert sum(ref.startswith("data:image/png;base64,") for ref in parser.refs) == len(PLOTS)
    assert not list(page.parent.glob(".*.tmp"))  # atomic writes leave no temporary files


def test_report_json_holds_the_shown_numbers(run_dir, report):
    rep = json.loads((report[0].parent / "report.json").read_text())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert rep["metrics"]["test_auc"] == metrics["test_auc"] and rep["metrics"]["epochs"] == 4
    assert rep["metrics"]["peak_rss_gib"] == pytest.approx(metrics["peak_rss_bytes"] / 2**30)
    assert (rep["metrics"]["device"], rep["metrics"]["processes"]) == (metrics["device"], 1)
    assert rep["config"]["hidden"] == [8] and rep["config"]["dim"] == 4
    assert rep["pca"]["sample"] == 200 and len(rep["pca"]["explained_variance_ratio"]) == 2
    assert sorted(rep["plots"]) == sorted(PLOTS) and rep["notes"] == {}


def test_degree_bucket_auc_matches_an_independent_computation(run_dir, report):
    rep = json.loads((report[0].parent / "report.json").read_text())
    with np.load(run_dir / "graph.npz") as g:
        degree = np.diff(g["indptr"])
    with np.load(run_dir / "heldout.npz") as h:
        pos, neg = h["test_pos"], h["test_neg"]
    z = np.load(run_dir / "embeddings.npy").astype(np.float64)
    pairs = np.concatenate([pos, neg], axis=1)
    y = np.r_[np.ones(pos.shape[1]), np.zeros(neg.shape[1])]
    scores = np.einsum("ij,ij->i", z[pairs[0]], z[pairs[1]])
    if (run_dir / "node_bias.npy").is_file():  # the default decoder: z_u . z_v + b_u + b_v
        bias = np.load(run_dir / "node_bias.npy").astype(np.float64)
        scores += bias[pairs[0]] + bias[pairs[1]]
    # the default structural part, on the graph the run trained on (graph.npz less the held-out edges)
    with np.load(run_dir / "graph.npz") as g, np.load(run_dir / "heldout.npz") as h:
        full = {tuple(e) for e in Graph(g["indptr"], g["indices"], degree.size).edge_index().T.tolist()}
        held = {tuple(sorted(e)) for e in np.concatenate([h["val_pos"], h["test_pos"]], 1).T.tolist()}
    kept = np.array(sorted(full - held)).T
    theta = torch.load(run_dir / "model.pt", weights_only=True)["state_dict"]["structure.theta"]
    scores += dense_structure(kept, degree.size, torch.nn.functional.softplus(theta).double().numpy())[pairs[0],
                                                                                                     pairs[1]]
    low = np.minimum(degree[pairs[0]], degree[pairs[1]])
    bucket = np.where(low == 0, 0, np.floor(np.log2(np.maximum(low, 1))).astype(int) + 1)
    assert sum(b["pairs"] for b in rep["degree_buckets"]) == pairs.shape[1]
    assert [b["bucket"] for b in rep["degree_buckets"]] == sorted(set(bucket.tolist()))
    checked = 0
    for b in rep["degree_buckets"]:
        sel = bucket == b["bucket"]
        assert (b["pairs"], b["positives"]) == (int(sel.sum()), int(y[sel].sum()))
        assert b["min_degree"] <= low[sel].min() and low[sel].max() <= b["max_degree"]
        if 0 < y[sel].sum() < sel.sum():
            assert b["auc"] == pytest.approx(roc_auc_score(y[sel], scores[sel]), abs=1e-9)
            checked += 1
        else:
            assert b["auc"] is None
    assert checked >= 1


def test_degree_buckets_are_powers_of_two():
    d = np.array([0, 1, 2, 3, 4, 7, 8, 1023, 1024, 2**40])
    assert degree_buckets(d).tolist() == [0, 1, 2, 2, 3, 3, 4, 10, 11, 41]


def test_no_validation_and_odd_names_are_handled(run_dir, tmp_path):
    odd = tmp_path / 'run <script>&"x"'
    shutil.copytree(run_dir, odd, ignore=shutil.ignore_patterns("report"))
    metrics = json.loads((odd / "metrics.json").read_text())
    metrics["history"] = [{k: v for k, v in h.items() if not k.startswith("val_")} for h in metrics["history"]]
    (odd / "metrics.json").write_text(json.dumps(metrics))
    page = write_report(odd, tmp_path / "out", sample=50)
    text = page.read_text(encoding="utf-8")
    assert not (tmp_path / "out" / "validation.png").exists() and (tmp_path / "out" / "loss.png").is_file()
    assert "No epoch was evaluated on validation pairs" in text
    assert "<script>" not in text and "run &lt;script&gt;&amp;&quot;x&quot;" in text


@pytest.mark.parametrize("missing", ["heldout.npz", "graph.npz", "metrics.json"])
def test_an_incomplete_run_directory_is_a_named_error(run_dir, tmp_path, missing):
    broken = tmp_path / "run"
    shutil.copytree(run_dir, broken, ignore=shutil.ignore_patterns("report", missing))
    with pytest.raises(RunDirError, match=missing.replace(".", r"\.")):
        write_report(broken)
    assert not (broken / "report").exists()  # nothing written before the inputs are all read


def test_not_a_run_directory_and_bad_sample(tmp_path, run_dir):
    with pytest.raises(RunDirError, match="no such run directory"):
        write_report(tmp_path / "nope")
    with pytest.raises(ParameterError, match="'sample' parameter of write_report"):
        write_report(run_dir, sample=1)


def test_report_shows_the_strategy_auto_chose(tmp_path):
    out = tmp_path / "run"
    train(data=community_graph(400, 2000, seed=0), out=str(out), epochs=2, hidden="8", dim=4, quiet=True,
          strategy="auto", memory_budget=64.0)
    shown = json.loads((out / "report" / "report.json").read_text())["config"]
    assert shown["strategy"] == "auto: full"  # 64 GiB: full batch fits


def _layered_dag(layers: int = 5, width: int = 30, out_degree: int = 4) -> EdgeList:
    """Edges only from layer k to layer k + 1: out-degree 4 but in the last layer, in-degree 0 in the first."""
    rng = np.random.default_rng(0)
    src = np.repeat(np.arange((layers - 1) * width), out_degree)
    dst = np.concatenate([rng.choice(width, out_degree, replace=False) + (u // width + 1) * width
                          for u in range((layers - 1) * width)])
    return EdgeList(np.stack([src, dst]), layers * width, None, source="dag")


def test_a_directed_runs_degree_buckets_use_the_sources_out_and_the_targets_in_degree(tmp_path):
    """As the run's own baseline out(u) * in(v): a pair (u, v) falls in the bucket of min(out(u), in(v)) of the
    whole graph, not of the out-degrees alone (graph.npz holds the out-CSR: in-degree is the column count)."""
    out = tmp_path / "run"
    train(data=_layered_dag(), directed=True, out=str(out), dim=4, epochs=3, eval_every=1, quiet=True, report=False)
    page = write_report(out, sample=50)
    rep = json.loads((page.parent / "report.json").read_text())
    with np.load(out / "graph.npz") as g:
        out_degree = np.diff(g["indptr"])
        in_degree = np.bincount(g["indices"], minlength=out_degree.size)
    with np.load(out / "heldout.npz") as h:
        pairs = np.concatenate([h["test_pos"], h["test_neg"]], axis=1)
        y = np.r_[np.ones(h["test_pos"].shape[1]), np.zeros(h["test_neg"].shape[1])]
    expected = degree_buckets(np.minimum(out_degree[pairs[0]], in_degree[pairs[1]]))
    out_only = degree_buckets(np.minimum(out_degree[pairs[0]], out_degree[pairs[1]]))
    assert sorted(set(expected.tolist())) != sorted(set(out_only.tolist()))  # the premise: the two differ here
    got = [(b["bucket"], b["pairs"], b["positives"]) for b in rep["degree_buckets"]]
    assert got == [(k, int((expected == k).sum()), int(y[expected == k].sum())) for k in sorted(set(expected))]
    assert rep["directed"] is True and rep["pair_degree"] == "min(source out-degree, target in-degree)"
    assert "smaller of u&#x27;s out-degree and v&#x27;s in-degree" in page.read_text(encoding="utf-8")


def test_without_matplotlib_the_page_and_numbers_are_written_without_plots(run_dir, tmp_path, monkeypatch):
    hide_packages(monkeypatch, "matplotlib")
    lines = []
    page = write_report(run_dir, tmp_path / "out", sample=50, log=lines.append)
    rep = json.loads((page.parent / "report.json").read_text())
    hint = "Not plotted: the matplotlib package is not installed (pip install 'gaescale[report]' adds the plots)."
    assert rep["plots"] == [] and rep["notes"] == {name[:-4]: hint for name in PLOTS}
    assert rep["degree_buckets"] and rep["pca"]["sample"] == 50  # the numbers do not need matplotlib
    assert not list(page.parent.glob("*.png")) and page.read_text(encoding="utf-8").count(html.escape(hint)) == 5
    assert len(lines) == 1 and lines[0].endswith("s); the plots need matplotlib: pip install 'gaescale[report]'")
    with pytest.raises(MissingDependencyError, match=r"a report with plots needs the matplotlib package"):
        write_report(run_dir, tmp_path / "refused", plots=True)
    assert not (tmp_path / "refused").exists()


def test_plots_false_draws_none_and_a_bad_value_is_named(run_dir, tmp_path):
    page = write_report(run_dir, tmp_path / "out", sample=50, plots=False)
    rep = json.loads((page.parent / "report.json").read_text())
    assert rep["plots"] == [] and set(rep["notes"].values()) == {"Not plotted (write_report with plots=False)."}
    with pytest.raises(ParameterError, match="'plots' parameter of write_report must be None, True or False"):
        write_report(run_dir, tmp_path / "x", plots="yes")
