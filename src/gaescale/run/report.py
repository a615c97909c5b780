"""A self-contained report of a finished run: ``write_report("run")`` -> ``run/report/report.html``.

Reads the run directory (:class:`gaescale.run.rundir.RunDir`) and writes, each file atomically::

    loss.png        training loss per epoch
    validation.png  validation AUC and AP per evaluated epoch (left out when no epoch was evaluated)
    scores.png      sigmoid(z_u . z_v) of the held-out test edges vs the test non-edges
    degree_auc.png  test AUC by the smaller endpoint degree, in power-of-two buckets (a directed run: the smaller of
                    the source's out-degree and the target's in-degree, the degrees of its out(u) * in(v) baseline)
    pca.png         2-D PCA of a uniform sample of the embeddings, coloured by log(1 + degree)
    report.json     the numbers the page shows
    report.html     one page that needs no network: every plot is embedded as a data: URI

Plots use matplotlib's object API (``Figure`` on an Agg canvas), never ``pyplot``: no global state changes.
matplotlib is the optional extra ``gaescale[report]``: without it the page and report.json are written without
the plots (``plots=True`` refuses instead, with a :class:`MissingDependencyError`).
Cost: O(N + P log P) time and O(N + P) memory for N nodes and P test pairs, plus a PCA of at most ``sample`` rows.
"""
from __future__ import annotations

import base64
import html
import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import expit
from sklearn.decomposition import PCA
from sklearn.metrics import roc_auc_score

from .._version import __version__
from ..errors import MissingDependencyError, ParameterError, RunDirError
from ..optional import install_hint, require
from ..outputs import atomic_write, check_out_dir, write_json
from ..training.evaluate import pair_scores
from ..training.heldout import BASELINE_NAMES
from .rundir import RunDir
from .writer import refuse_run_file

METRICS = [("test_auc", "Test AUC", "{:.4f}"), ("test_ap", "Test AP", "{:.4f}"),
           ("val_auc", "Validation AUC", "{:.4f}"), ("val_ap", "Validation AP", "{:.4f}"),
           ("hits@20", "Hits@20", "{:.4f}"), ("hits@50", "Hits@50", "{:.4f}"),
           ("hits@100", "Hits@100", "{:.4f}"), ("mrr", "MRR (100 random negatives)", "{:.4f}"),
           ("mrr_hits@1", "MRR Hits@1", "{:.4f}"), ("mrr_hits@3", "MRR Hits@3", "{:.4f}"),
           ("mrr_hits@10", "MRR Hits@10", "{:.4f}"), ("epochs", "Epochs trained", "{:,}"),
           ("best_epoch", "Best epoch", "{:,}"), ("seconds_per_epoch", "Seconds per epoch", "{:.3f}"),
           ("peak_rss_gib", "Peak RSS (GiB)", "{:.2f}"), ("num_nodes", "Nodes", "{:,}"), ("num_edges", "Edges", "{:,}"),
           ("device", "Device", "{}"), ("processes", "Processes (torchrun)", "{:,}")]
CONFIG = ("encoder", "decoder", "hidden", "dim", "loss", "dense", "weighting", "variational", "strategy", "epochs",
          "lr", "seed")
BLUE, ORANGE, GREY = "#1f6feb", "#e36209", "#6a737d"


def degree_buckets(degree: np.ndarray) -> np.ndarray:
    """``(k,)`` int64 bucket of integer degrees ``(k,)``: 0 for degree 0, else ``b`` with ``2**(b-1) <= d < 2**b``."""
    return np.frexp(np.asarray(degree, np.float64))[1].astype(np.int64)


def degree_bucket_auc(degree: np.ndarray, pos: np.ndarray, neg: np.ndarray, pos_scores: np.ndarray,
                      neg_scores: np.ndarray, target_degree: np.ndarray | None = None) -> list[dict]:
    """ROC AUC of test pairs grouped by the bucket (:func:`degree_buckets`) of ``min(degree[u], degree[v])``, or
    with ``target_degree`` of ``min(degree[u], target_degree[v])`` (a directed run: out- and in-degree).

    ``degree: (N,)``; ``pos: (2, P)`` edges and ``neg: (2, Q)`` non-edges (node indices); ``pos_scores: (P,)``,
    ``neg_scores: (Q,)``. One dict per non-empty bucket, ascending: bucket, label, min_degree, max_degree, pairs,
    positives, negatives and auc (None where the bucket holds one class only)."""
    pairs = np.concatenate([pos, neg], axis=1)
    target_degree = degree if target_degree is None else target_degree
    b = degree_buckets(np.minimum(degree[pairs[0]], target_degree[pairs[1]]))
    y = np.concatenate([np.ones(pos.shape[1], np.int8), np.zeros(neg.shape[1], np.int8)])
    order = np.argsort(b, kind="stable")
    b, y, s = b[order], y[order], np.concatenate([pos_scores, neg_scores])[order]
    starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]]) if b.size else np.array([], np.int64)
    out = []
    for start, stop in zip(starts, np.r_[starts[1:], b.size]):
        k, yb = int(b[start]), y[start:stop]
        lo, hi = (0, 0) if k == 0 else (1 << (k - 1), (1 << k) - 1)
        npos = int(yb.sum())
        out.append(dict(bucket=k, label=str(lo) if lo == hi else f"{lo}-{hi}", min_degree=lo, max_degree=hi,
                        pairs=int(yb.size), positives=npos, negatives=int(yb.size - npos),
                        auc=float(roc_auc_score(yb, s[start:stop])) if 0 < npos < yb.size else None))
    return out


def pair_degrees(run) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """``(source, target, node, label)``: the degrees ``(N,)`` in the run's whole graph that bucket a test pair
    ``(u, v)`` by ``min(source[u], target[v])``, each node's degree (the PCA's colours), and what the buckets say.
    Directed (a :class:`gaescale.directed.graph.DiGraph`): out(u) and in(v), as the run's baseline
    ``directed_degree_product``."""
    graph = run.graph()
    if not run.directed:
        return graph.degree, graph.degree, graph.degree, "smaller endpoint degree"
    out, inn = graph.out_degree, graph.in_degree
    return out, inn, out + inn, "min(source out-degree, target in-degree)"


def _matplotlib() -> tuple[Any, Any]:
    """``(Figure, FigureCanvasAgg)``: matplotlib's object API, or a :class:`MissingDependencyError`."""
    return (require("matplotlib", "a report with plots", module="matplotlib.figure").Figure,
            require("matplotlib", "a report with plots", module="matplotlib.backends.backend_agg").FigureCanvasAgg)


def figure(width: float = 6.4, height: float = 3.6) -> tuple[Any, Any]:
    """``(fig, ax)``: a matplotlib ``Figure`` on an Agg canvas (no pyplot) in the report's style."""
    fig_class, canvas = _matplotlib()
    fig = fig_class(figsize=(width, height), dpi=150, layout="constrained")
    canvas(fig)
    ax = fig.add_subplot()
    ax.grid(True, color="#d0d7de", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.spines[["top", "right"]].set_visible(False)
    return fig, ax


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _epoch_plot(history: list[dict], keys: dict, best_epoch, title: str, ylabel: str):
    """Lines ``{key: (label, colour)}`` over the epochs of ``history``; a dashed line at the best epoch."""
    fig, ax = figure()
    epochs = [h["epoch"] for h in history]
    for key, (label, colour) in keys.items():
        ax.plot(epochs, [h.get(key, np.nan) for h in history], color=colour, linewidth=1.6, label=label,
                marker="o" if 1 < len(history) <= 40 else None, markersize=3)
    if best_epoch:
        ax.axvline(best_epoch, color=GREY, linestyle="--", linewidth=1, label=f"best epoch ({best_epoch})")
    ax.set(xlabel="epoch", ylabel=ylabel, title=title)
    ax.legend(frameon=False, loc="best")
    return fig


def _scores_plot(p_pos: np.ndarray, p_neg: np.ndarray):
    fig, ax = figure()
    edges = np.linspace(0.0, 1.0, 51)
    for p, colour, name in ((p_neg, ORANGE, "test non-edges"), (p_pos, BLUE, "test edges")):
        counts = np.histogram(p, edges)[0]
        ax.stairs(counts, edges, fill=True, alpha=0.3, color=colour)
        ax.stairs(counts, edges, color=colour, linewidth=1.4, label=f"{name} ({p.size:,})")
    ax.set(xlabel="predicted probability  sigmoid(z_u · z_v)", ylabel="pairs", title="Scores of held-out test pairs",
           xlim=(0, 1))
    ax.legend(frameon=False, loc="best")
    return fig


def _degree_plot(buckets: list[dict], overall, xlabel: str = "smaller endpoint degree"):
    fig, ax = figure()
    x = np.arange(len(buckets))
    bars = ax.bar(x, [b["auc"] or 0.0 for b in buckets], color=BLUE, width=0.7)
    for bar, b in zip(bars, buckets):
        n = b["pairs"]
        n = f"{n:,}" if n < 10_000 else f"{n / 1e3:.0f}k" if n < 1e6 else f"{n / 1e6:.1f}M"
        ax.annotate(n if b["auc"] is not None else f"n/a\n{n}", (bar.get_x() + 0.35, bar.get_height()), xytext=(0, 2),
                    textcoords="offset points", ha="center", va="bottom", fontsize=8.5)
    ax.axhline(0.5, color=GREY, linestyle=":", linewidth=1, label="chance (0.5)")
    if overall is not None:
        ax.axhline(overall, color=ORANGE, linestyle="--", linewidth=1, label=f"all test pairs ({overall:.3f})")
    ax.set_xticks(x, [b["label"] for b in buckets], rotation=40 if len(buckets) > 7 else 0, fontsize=9)
    ax.set(xlabel=f"{xlabel} (bar labels: test pairs)", ylabel="test AUC", ylim=(0, 1.1),
           title="Test AUC by degree")
    fig.legend(loc="outside lower center", ncols=2, frameon=False, fontsize=9)
    return fig


def _pca(z: np.ndarray, sample: int, seed: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """``(rows, xy, info)``: a uniform sample of ``sample`` rows of ``z``, their 2-D PCA, and its numbers."""
    rows = np.random.default_rng(seed).choice(z.shape[0], size=min(sample, z.shape[0]), replace=False)
    pca = PCA(n_components=2, random_state=seed)
    xy = pca.fit_transform(z[rows].astype(np.float64))
    ratio = [float(r) for r in pca.explained_variance_ratio_]
    return rows, xy, {"sample": int(rows.size), "seed": seed, "explained_variance_ratio": ratio}


def _pca_plot(z: np.ndarray, degree: np.ndarray, rows: np.ndarray, xy: np.ndarray, info: dict):
    fig, ax = figure(6.4, 4.4)
    points = ax.scatter(xy[:, 0], xy[:, 1], c=np.log1p(degree[rows]), s=4 if rows.size > 5000 else 8, alpha=0.7,
                        cmap="viridis", linewidths=0, rasterized=True)
    fig.colorbar(points, ax=ax, label="log(1 + degree)", shrink=0.9)
    ratio = info["explained_variance_ratio"]
    ax.set(xlabel=f"PC 1 ({ratio[0]:.1%} of variance)", ylabel=f"PC 2 ({ratio[1]:.1%} of variance)",
           title=f"Embeddings: PCA of {rows.size:,} of {z.shape[0]:,} nodes")
    return fig


CAPTIONS = {
    "loss": "Training loss per epoch; the dashed line marks the epoch whose weights were kept.",
    "validation": "Validation ROC AUC and average precision on the evaluated epochs.",
    "scores": "Predicted probability of each held-out test edge and each sampled test non-edge; "
              "the less the two histograms overlap, the higher the test AUC.",
    "degree_auc": "Test AUC of held-out pairs grouped by the smaller degree (in the full graph) of their endpoints.",
    "degree_auc_directed": "Test AUC of held-out pairs (u, v) grouped by the smaller of u's out-degree and v's "
                           "in-degree (in the full graph), the degrees of the baseline out(u) * in(v).",
    "pca": "The first two principal components of a uniform random sample of the node embeddings.",
}
STYLE = """body{margin:0;background:#f6f8fa;color:#24292f;
font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",Arial,sans-serif}main{max-width:1200px;
margin:0 auto;padding:28px 32px 36px}h1{font-size:26px;margin:0}h2{font-size:18px;margin:28px 0 10px}
.sub{color:#57606a;margin:0;word-break:break-all}.tiles{display:flex;gap:12px;margin:20px 0 4px;flex-wrap:wrap}
.tile{flex:1;min-width:130px;background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:10px 14px}
.tile b{display:block;font-size:24px}.tile span{color:#57606a;font-size:12px;text-transform:uppercase;
letter-spacing:.04em}.grid{display:grid;grid-template-columns:1fr 1fr;gap:18px;align-items:start}.card{background:#fff;
border:1px solid #d0d7de;border-radius:8px;padding:14px 16px}figure{margin:0}img{width:100%;height:auto;display:block}
figcaption{color:#57606a;font-size:13px;margin-top:6px}table{border-collapse:collapse;width:100%;
font-variant-numeric:tabular-nums}td,th{padding:4px 8px;border-bottom:1px solid #eaeef2;text-align:left}
th{color:#57606a;font-weight:600}.n{text-align:right}.note{color:#7d4e00;background:#fff8c5;border:1px solid #e5c65c;
border-radius:6px;padding:8px 12px;margin:0}footer{color:#57606a;font-size:12px;margin-top:28px}"""


def html_table(rows, head=(), numeric=()) -> str:
    cell = lambda tag, i, c: f"<{tag}{' class=n' if i in numeric else ''}>{html.escape(str(c))}</{tag}>"  # noqa: E731
    th = "<tr>" + "".join(cell("th", i, c) for i, c in enumerate(head)) + "</tr>" if head else ""
    return "<table>" + th + "".join("<tr>" + "".join(cell("td", i, c) for i, c in enumerate(r)) + "</tr>"
                                    for r in rows) + "</table>"


BASELINE_COLUMNS = (("auc", "test AUC"), ("ap", "test AP"), ("filtered_mrr", "filtered MRR"),
                    ("filtered_hits@10", "filtered Hits@10"))


def _baseline_table(report: dict) -> str:
    """The embeddings next to the link heuristics on the same test split (empty without baselines)."""
    baselines = report.get("baselines")
    if not baselines:
        return ""
    m = report["metrics"]
    ours = {"auc": m.get("test_auc"), "ap": m.get("test_ap"), **{k: m.get(k) for k, _ in BASELINE_COLUMNS[2:]}}
    columns = [(k, label) for k, label in BASELINE_COLUMNS if ours.get(k) is not None]
    rows = [("embeddings (this run)", *(f"{ours[k]:.4f}" for k, _ in columns))]
    rows += [(BASELINE_NAMES[name], *("n/a" if b.get(k) is None else f"{b[k]:.4f}" for k, _ in columns))
             for name, b in baselines.items()]
    separation = report.get("beats_baselines_separation", report.get("beats_baselines"))
    ranking = report.get("beats_baselines_ranking")
    verdict = f"The embeddings {'beat' if separation else 'do not beat'} every heuristic on test AUC and AP"
    if ranking is not None:
        they = ("beat every heuristic too" if ranking and separation else "beat every heuristic" if ranking
                else "do not: a heuristic ranks at least as well")
        verdict += f"; on ranking (filtered MRR and Hits@10, each test edge against every node) they {they}"
    verdict += "."
    return (f'<h2>Against link heuristics</h2><div class="card">'
            f'{html_table(rows, ("", *(label for _, label in columns)), tuple(range(1, len(columns) + 1)))}'
            f'<p class="note">Scored on the same test pairs, on the training graph. {verdict}</p></div>')


def _html(report: dict, pngs: dict[str, bytes], notes: dict[str, str]) -> str:
    """The page: every string from the run is escaped; every image is a data: URI."""
    m, fmt = report["metrics"], {k: f for k, _, f in METRICS}
    tiles = "".join(f'<div class="tile"><span>{label.split(" (")[0]}</span><b>{fmt[k].format(m[k])}</b></div>'
                    for k, label, _ in METRICS[:4] + METRICS[7:8] if m.get(k) is not None)
    metric_rows = [(label, "n/a" if m.get(k) is None else fmt[k].format(m[k])) for k, label, _ in METRICS if k in m]
    config_rows = [(k, "default" if v is None else ",".join(map(str, v)) or "none" if isinstance(v, list) else v)
                   for k, v in report["config"].items()]
    bucket_rows = [(b["label"], f"{b['pairs']:,}", f"{b['positives']:,}", f"{b['negatives']:,}",
                    "n/a" if b["auc"] is None else f"{b['auc']:.4f}") for b in report["degree_buckets"]]
    note = lambda name: f'<p class="note">{html.escape(notes[name])}</p>'  # noqa: E731
    buckets = html_table(bucket_rows, (report["pair_degree"], "pairs", "edges", "non-edges", "AUC"),
                         (1, 2, 3, 4)) if bucket_rows else note("degree_auc")
    captions = dict(CAPTIONS, degree_auc=CAPTIONS["degree_auc_directed" if report["directed"] else "degree_auc"])

    baselines = _baseline_table(report)

    def fig(name: str) -> str:
        if name not in pngs:
            return f'<div class="card">{note(name)}</div>'
        uri = "data:image/png;base64," + base64.b64encode(pngs[name]).decode("ascii")
        return (f'<div class="card"><figure><img src="{uri}" alt="{name}.png">'
                f"<figcaption>{html.escape(captions[name])}</figcaption></figure></div>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>gaescale report: {html.escape(Path(report["run"]).name)}</title><style>{STYLE}</style></head><body><main>
<h1>Graph autoencoder run report</h1>
<p class="sub">{html.escape(report["run"])} &middot; finished {html.escape(report["finished"])}</p>
<div class="tiles">{tiles}</div>
<div class="grid"><div><h2>Metrics</h2><div class="card">{html_table(metric_rows, numeric=(1,))}</div></div>
<div><h2>Configuration</h2><div class="card">{html_table(config_rows, numeric=(1,))}</div></div></div>
{baselines}<h2>Training</h2><div class="grid">{fig("loss")}{fig("validation")}</div>
<h2>Held-out test pairs</h2><div class="grid">{fig("scores")}{fig("pca")}</div>
<h2>Test AUC by degree</h2><div class="grid">{fig("degree_auc")}<div class="card">{buckets}</div></div>
<footer>Written by gaescale {html.escape(__version__)}. The plots are also in this directory as PNG files and
the numbers in report.json.</footer>
</main></body></html>
"""


def write_report(run, out_dir=None, *, sample: int = 20000, seed: int = 0, plots: bool | None = None,
                 log: Callable[[str], None] | None = None) -> Path:
    """Write the plots, ``report.json`` and ``report.html`` of ``run`` (a run directory or a :class:`gaescale.Run`)
    into ``out_dir`` (default ``<run>/report``); returns the path of ``report.html``.

    ``sample``: at most this many embeddings (uniform, seeded by ``seed``) go into the PCA plot. ``plots``: None
    draws them where matplotlib (``gaescale[report]``) is installed, else writes the page and report.json without
    them (each plot's place, and the log line, say what to install); True refuses without matplotlib
    (:class:`MissingDependencyError`, before anything is read); False draws none. A missing ``metrics.json``,
    ``config.json``, ``graph.npz`` or ``heldout.npz`` raises :class:`RunDirError`."""
    if isinstance(sample, bool) or not isinstance(sample, (int, np.integer)) or sample < 2:
        raise ParameterError("sample", "write_report", "an int >= 2", sample)
    if plots not in (None, True, False):
        raise ParameterError("plots", "write_report", "None, True or False", plots)
    unplotted = _unplotted(plots)
    t0 = time.perf_counter()
    run = RunDir.of(run)
    metrics, config, held, z = run.metrics(), run.config(), run.heldout(), run.embeddings
    degrees = pair_degrees(run)
    if {"test_pos", "test_neg"} - held.keys():
        raise RunDirError(f"{run.path / 'heldout.npz'}: expected arrays test_pos and test_neg. Got {sorted(held)}.")
    if degrees[2].size != z.shape[0]:
        raise RunDirError(f"{run.path / 'graph.npz'}: has {degrees[2].size} nodes but embeddings.npy has "
                          f"{z.shape[0]} rows; the run directory is inconsistent.")
    out = check_out_dir(run.path / "report" if out_dir is None else out_dir)
    if out_dir is not None:  # RUN/report is the report's own place in the run
        refuse_run_file(out / "report.html", inputs=(run.path,), own="report")

    figures, notes, numbers = _contents(run, metrics, held, z, degrees, int(sample), seed)
    if unplotted:
        notes.update({name: unplotted for name in figures})
        figures = {}
    pngs = {name: png(make()) for name, make in figures.items()}
    for name in notes.keys() | pngs.keys():
        if name in pngs:
            atomic_write(out / f"{name}.png", lambda fh, data=pngs[name]: fh.write(data))
        else:
            (out / f"{name}.png").unlink(missing_ok=True)  # no stale plot of an earlier report
    notes = {k: v for k, v in notes.items() if k not in pngs}
    report = _report_numbers(run, metrics, config, held, numbers, pngs, notes, degrees[3])
    write_json(out / "report.json", report)
    page = atomic_write(out / "report.html", lambda fh: fh.write(_html(report, pngs, notes).encode("utf-8")))
    if log is not None:
        why = f"; the plots need matplotlib: {install_hint('matplotlib')}" if unplotted and plots is None else ""
        log(f"report: {page} ({len(pngs)} plots, {time.perf_counter() - t0:.1f}s){why}")
    return page


def _unplotted(plots: bool | None) -> str | None:
    """None where the plots are drawn, else the note that takes each plot's place (``plots``: see write_report)."""
    if plots is False:
        return "Not plotted (write_report with plots=False)."
    try:
        _matplotlib()
    except MissingDependencyError:
        if plots:
            raise
        return f"Not plotted: the matplotlib package is not installed ({install_hint('matplotlib')} adds the plots)."
    return None


def _contents(run, metrics: dict, held: dict, z: np.ndarray, degrees: tuple, sample: int, seed: int):
    """``(figures, notes, numbers)``: each plot there is data for as a function that draws it, the note of each
    one there is none for, and the numbers (degree buckets, PCA) that report.json holds either way."""
    source, target, degree, label = degrees
    history, best = metrics.get("history") or [], metrics.get("best_epoch")
    evaluated = [h for h in history if h.get("val_auc") is not None]
    pos, neg = held["test_pos"], held["test_neg"]
    figures, numbers = {}, {"degree_buckets": [], "pca": None}
    notes = dict(loss="No training history in metrics.json.",
                 validation="No epoch was evaluated on validation pairs (the run had no validation split).",
                 scores="No held-out test pairs (the run had no test split).",
                 degree_auc="No held-out test pairs (the run had no test split).",
                 pca=f"A 2-D PCA needs at least 2 nodes and 2 embedding dimensions. Got embeddings of shape {z.shape}.")
    if history:
        figures["loss"] = lambda: _epoch_plot(history, {"loss": ("loss", BLUE)}, best, "Training loss",
                                              "training loss")
    if evaluated:
        figures["validation"] = lambda: _epoch_plot(evaluated, {"val_auc": ("AUC", BLUE), "val_ap": ("AP", ORANGE)},
                                                    best, "Validation AUC and AP", "score")
    if pos.shape[1] and neg.shape[1]:
        zl, metric = run.logits_form()
        how = dict(metric=metric, decoder=run.pair_decoder(), structure=run.structure_scores(training=True))
        s_pos, s_neg = pair_scores(zl, pos, **how), pair_scores(zl, neg, **how)
        buckets = numbers["degree_buckets"] = degree_bucket_auc(source, pos, neg, s_pos, s_neg, target)
        figures["scores"] = lambda: _scores_plot(expit(s_pos), expit(s_neg))
        figures["degree_auc"] = lambda: _degree_plot(buckets, metrics.get("test_auc"), label)
    if z.shape[0] >= 2 and z.shape[1] >= 2:
        rows, xy, numbers["pca"] = _pca(z, sample, seed)
        figures["pca"] = lambda: _pca_plot(z, degree, rows, xy, numbers["pca"])
    return figures, {k: v for k, v in notes.items() if k not in figures}, numbers


def _report_numbers(run, metrics: dict, config: dict, held: dict, numbers: dict, pngs: dict, notes: dict,
                    pair_degree: str) -> dict:
    """What report.json holds (and the page shows)."""
    shown = {k: metrics[k] for k, _, _ in METRICS if k in metrics}
    if metrics.get("peak_rss_bytes") is not None:
        shown["peak_rss_gib"] = metrics["peak_rss_bytes"] / 2**30
    shown_config = {k: config[k] for k in CONFIG if k in config}
    if shown_config.get("strategy") == "auto" and metrics.get("strategy"):
        shown_config["strategy"] = f"auto: {metrics['strategy']}"  # what the planner chose
    finished = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime((run.path / "metrics.json").stat().st_mtime))
    pos, neg = held["test_pos"], held["test_neg"]
    return dict(run=str(run.path.resolve()), finished=finished, metrics=shown, config=shown_config,
                directed=run.directed, pair_degree=pair_degree, **numbers,
                test_pairs=dict(positives=int(pos.shape[1]), negatives=int(neg.shape[1])),
                plots=sorted(f"{n}.png" for n in pngs), notes=notes, gaescale_version=__version__,
                baselines=metrics.get("baselines"), beats_baselines=metrics.get("beats_baselines"),
                beats_baselines_separation=metrics.get("beats_baselines_separation"),
                beats_baselines_ranking=metrics.get("beats_baselines_ranking"))
