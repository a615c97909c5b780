"""The optional packages (gaescale.optional): each feature that needs one, with the package absent, is a one-line
MissingDependencyError naming the extra to install (from the function and from the CLI, exit 2, nothing written);
no module imports one but through ``require``; and gaescale without any of them imports, trains and reports."""
import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gaescale
from conftest import hide_packages
from gaescale.cli import main
from gaescale.errors import MissingDependencyError
from gaescale.optional import OPTIONAL, require

SRC = Path(gaescale.__file__).parent
FAST = dict(epochs=2, hidden="8", dim=4, eval_every=1, quiet=True, report=False)
FAST_FLAGS = ["--quiet", "--epochs", "2", "--hidden", "8", "--dim", "4", "--no-report"]


def message(what: str, package: str, extra: str, instead: str = "") -> str:
    return (f"{what} needs the {package} package, which is not installed; pip install 'gaescale[{extra}]'"
            f"{f' ({instead})' if instead else ''}.")


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    path = tmp_path_factory.mktemp("graph") / "edges.npy"
    data = gaescale.community_graph(300, 1200, seed=3)
    np.save(path, data.edge_index)
    return path, data


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, graph):
    """A small finished run, with a FAISS index of it (built while faiss is importable)."""
    from gaescale.run.index import build_index
    out = tmp_path_factory.mktemp("run") / "run"
    gaescale.train(data=graph[1], out=str(out), **FAST)
    build_index(out, out.parent / "run.index")
    return out


def test_require_returns_the_module_or_names_the_extra(monkeypatch):
    assert require("matplotlib", "x") is sys.modules["matplotlib"]
    hide_packages(monkeypatch, "optuna")
    with pytest.raises(MissingDependencyError) as info:
        require("optuna", "tune", "or something else")
    assert str(info.value) == message("tune", "optuna", "tune", "or something else")
    assert isinstance(info.value, ImportError)


def test_another_missing_module_is_not_explained_as_the_optional_one(monkeypatch):
    hide_packages(monkeypatch, "kiwisolver")  # a package that matplotlib imports, not an optional one of ours
    with pytest.raises(ModuleNotFoundError) as info:
        require("matplotlib", "x", module="gaescale_no_such_module")
    assert not isinstance(info.value, MissingDependencyError)


def test_no_module_imports_an_optional_package_but_through_require():
    """A bare ``import faiss`` anywhere in gaescale: a missing package would be a traceback, not the named error."""
    bare = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            bare += [f"{path.relative_to(SRC)}:{node.lineno}: {n}" for n in names if n.split(".")[0] in OPTIONAL]
    assert bare == []


def _tune(graph, out):
    from gaescale.run.tune import tune
    return tune(edges=str(graph[0]), out=str(out), trials=1, epochs=2)


def _index(run_dir, out):
    from gaescale.run.index import build_index
    return build_index(run_dir, out)


def _topk(run_dir, out):
    from gaescale.run.predict import topk_links
    return topk_links(run_dir, 3, index=run_dir.parent / "run.index", out=out)


def _cluster(graph, out):
    return gaescale.train(data=graph[1], out=str(out), strategy="cluster", cluster_parts=4, **FAST)


def _report(run_dir, out):
    from gaescale.run.report import write_report
    return write_report(run_dir, out, plots=True)


# feature: (what it needs hidden, the function, the CLI command, the expected message)
FEATURES = {
    "tune": (("optuna",), _tune, lambda g, r, o: ["tune", str(g[0]), "--out", str(o), "--trials", "1", "--quiet"],
             message("tune", "optuna", "tune")),
    "tune's report": (("matplotlib",), _tune, lambda g, r, o: ["tune", str(g[0]), "--out", str(o), "--trials", "1"],
                      message("tune's report", "matplotlib", "report")),
    "index": (("faiss",), _index, lambda g, r, o: ["index", str(r), "--out", str(o)],
              message("a FAISS index (gaescale index, topk --index)", "faiss-cpu", "index")),
    "topk --index": (("faiss",), _topk, lambda g, r, o: ["topk", str(r), "--index", str(r.parent / "run.index"),
                                                         "--out", str(o)],
                     message("a FAISS index (gaescale index, topk --index)", "faiss-cpu", "index")),
    "cluster": (("pymetis",), _cluster, lambda g, r, o: ["train", str(g[0]), "--out", str(o), "--strategy", "cluster",
                                                         "--cluster-parts", "4"] + FAST_FLAGS,
                message("--strategy cluster", "pymetis", "cluster", "or another --strategy")),
    "report with plots": (("matplotlib",), _report, None, message("a report with plots", "matplotlib", "report")),
}


@pytest.mark.parametrize("feature", FEATURES)
def test_each_feature_without_its_package_is_the_named_error_before_anything_is_written(feature, graph, run_dir,
                                                                                        tmp_path, monkeypatch, capsys):
    hidden, call, argv, expected = FEATURES[feature]
    out = tmp_path / ("out.tsv" if feature == "topk --index" else "out")
    before = sorted(p.name for p in run_dir.iterdir())
    hide_packages(monkeypatch, *hidden)
    with pytest.raises(MissingDependencyError) as info:
        call(graph if feature in ("tune", "tune's report", "cluster") else run_dir, out)
    assert str(info.value) == expected
    if argv is not None:
        assert main(argv(graph, run_dir, out)) == 2
        assert capsys.readouterr().err.strip().splitlines() == [f"gaescale: error: {expected}"]
    assert not out.exists() and sorted(p.name for p in run_dir.iterdir()) == before


BARE = """
import sys
for name in {names!r}:
    sys.modules[name] = None  # as in an environment where 'pip install gaescale' installed no extra
from gaescale.cli import main
code = main(["demo", "--nodes", "300", "--num-edges", "1200", "--out", {out!r}, "--epochs", "2", "--hidden", "8",
             "--dim", "4"])
assert not [m for m in {names!r} if sys.modules.get(m) is not None]
sys.exit(code)
"""


@pytest.mark.slow
def test_without_any_extra_demo_trains_and_writes_the_report_without_plots(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-c", BARE.format(names=sorted(OPTIONAL), out=str(out))],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "report: " in proc.stderr and "(0 plots, " in proc.stderr
    assert "the plots need matplotlib: pip install 'gaescale[report]'" in proc.stderr
    report = json.loads((out / "report" / "report.json").read_text())
    assert report["plots"] == [] and report["degree_buckets"] and report["pca"]["sample"] == 300
    assert all("pip install 'gaescale[report]'" in note for note in report["notes"].values())
    assert (out / "embeddings.npy").is_file() and not list((out / "report").glob("*.png"))
