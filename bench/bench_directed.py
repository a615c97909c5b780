"""Directed link prediction: which decoder learns direction, measured side by side on the same directed splits.

    .venv/bin/python bench/bench_directed.py [--nodes 3000] [--epochs 150] [--seeds 0,1,2] [--threads 1]
                                             [--only graphs|dense|defaults|weighted]

First the exact all-pairs term's cost, directed (every B x B tile of Z_s Z_t^T) against undirected (the tiles on
and above the diagonal of Z Z^T), N = 4,000, d = 16, value and gradient, on the CPU (the CUDA path of the
undirected term is a fused kernel; this compares the tile loops).

Three synthetic directed graphs, featureless, each split once per seed by ``split_directed`` (85/5/10 of the
directed edges, as many ordered non-edges); every model trains on the same training edges, through the same
``fit`` (Adam, lr 0.02, sampled dense term with one pair per training edge, BCE balanced, ``epochs`` epochs,
validation every 10 and the best validation AUC kept), one linear layer of width 32, and is scored on the same
test pairs:

- ``undirected``: gaescale's default GAE (inner product + per-node bias) on the symmetrised training graph;
- ``source/target``: ``--directed`` (z_s from the out-, z_t from the in-neighbourhood, s_uv = z_s_u . z_t_v + b_s_u
  + b_t_v);
- ``gravity``: the same encoder, the gravity-inspired decoder s_uv = m_v - log(||p_u - p_v||^2 + 1e-6) (Salha et
  al. 2019), with p the first 63 columns of [z_s | z_t] and m the last.

Graphs: ``dag`` (6 layers, edges only from layer k to k + 1, 5 per node: direction is the whole signal),
``citation`` (nodes arrive in order and cite 5 earlier ones, preferentially the much-cited), ``reciprocal``
(5 random out-edges per node, half of them also reversed), ``citation+30%`` (each citation also reversed with
probability 0.3, as in a social graph). ``reverse_auc``: test edges (u, v) whose (v, u) is no edge, scored against
(v, u). The heuristics' rows: the best of Adamic-Adar, common neighbours and degree product on the symmetrised
training graph, the directed degree product out(u) * in(v) and reciprocity (1 where v -> u is a training edge).

``--only defaults``: the default command (``gaescale.train(data, directed=True)``: linear encoder d = 64, lr 0.02,
200 epochs at most, early stopping) with ``directed_symmetric`` off and on, on the same splits, for those graphs and
the citation graph with 2%, 5% and 10% of its citations reversed; the column ``auto`` marks what the default
chooses (on from 1 in 10 reciprocated training edges).

``--only weighted``: the citation graph with 10% of its edges hidden and as many random noise edges of weight 0.1
added, trained by the default directed command unweighted and with ``--weighted``: the hidden real edges' AUC.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np
import torch

from gaescale.config import TrainConfig
from gaescale.directed.graph import DiGraph, sample_ordered_non_edges, split_directed
from gaescale.directed.kind import build_directed_model
from gaescale.directed.metrics import directed_baselines, reverse_auc
from gaescale.directed.model import DirectedGAE, Gravity, SourceTarget, SourceTargetEncoder, directed_dense_term
from gaescale.losses import KINDS, dense_term
from gaescale.run.kinds import build_model
from gaescale.training.evaluate import link_scores, pair_scores
from gaescale.training.trainer import fit

DIM = 32


def dag(n: int, rng) -> np.ndarray:
    layers, width = 6, n // 6
    u = np.repeat(np.arange((layers - 1) * width), 5)
    v = (u // width + 1) * width + rng.integers(0, width, u.size)
    return np.stack([u, v])


def citation(n: int, rng) -> np.ndarray:
    cited = np.ones(n)
    src, dst = [], []
    for i in range(6, n):
        p = cited[:i] / cited[:i].sum()
        for j in rng.choice(i, 5, replace=False, p=p):
            src.append(i)
            dst.append(j)
            cited[j] += 1
    return np.array([src, dst])


def reciprocal(n: int, rng) -> np.ndarray:
    u = np.repeat(np.arange(n), 5)
    v = rng.integers(0, n, u.size)
    back = rng.random(u.size) < 0.5
    return np.concatenate([np.stack([u, v]), np.stack([v[back], u[back]])], axis=1)


def reciprocated(share: float):
    """The citation graph with each citation also reversed with probability ``share``."""
    def make(n: int, rng) -> np.ndarray:
        e = citation(n, rng)
        back = rng.random(e.shape[1]) < share
        return np.concatenate([e, e[::-1, back]], axis=1)
    return make


GRAPHS = {"dag": dag, "citation": citation, "reciprocal": reciprocal, "citation+30%": reciprocated(0.3)}
DEFAULT_GRAPHS = {**GRAPHS, "citation+2%": reciprocated(0.02), "citation+5%": reciprocated(0.05),
                  "citation+10%": reciprocated(0.1)}


def models(n: int, seed: int):
    """``(name, model, trains on the symmetrised graph)``, each model's initial weights drawn from ``seed``."""
    makers = {"undirected": lambda: build_model(TrainConfig(encoder="linear", dim=DIM), None, n),
              "source/target": lambda: build_directed_model(TrainConfig(encoder="linear", dim=DIM, directed=True,
                                                                        directed_symmetric="off"), None, n),
              "source/target + symmetric": lambda: build_directed_model(
                  TrainConfig(encoder="linear", dim=DIM, directed=True, directed_symmetric="on"), None, n),
              "gravity": lambda: DirectedGAE(SourceTargetEncoder(None, [DIM], num_nodes=n), decoder=Gravity())}
    for name, make in makers.items():
        torch.manual_seed(seed)
        yield name, make(), name == "undirected"


def run(graph: DiGraph, seed: int, epochs: int) -> dict[str, dict[str, float]]:
    split = split_directed(graph, 0.05, 0.10, seed=seed)
    train = split.train_graph()
    sym = train.symmetrised()
    out = {}
    for name, model, undirected in models(graph.num_nodes, seed):
        g, edges = (sym, sym.edge_index()) if undirected else (train, split.train)
        res = fit(model, None, g, torch.from_numpy(edges), val=(split.val_pos, split.val_neg), epochs=epochs, lr=0.02,
                  seed=seed, eval_every=10, patience=0, warmup=0, progress=False,
                  loss_kwargs=dict(kind="bce", dense="sampled", weighting="balanced"))
        z = model.embed(None, g)
        how = dict(metric=model.metric(z), decoder=model.pair_decoder)
        auc, ap = link_scores(z, split.test_pos, split.test_neg, **how)
        rev, count = reverse_auc(lambda pairs, z=z, how=how: pair_scores(z, pairs, **how), graph, split.test_pos)
        out[name] = {"auc": auc, "ap": ap, "reverse_auc": rev, "reverse_pairs": count,
                     "s_per_epoch": res.seconds_per_epoch}
    base = directed_baselines(train, graph, split, seed)
    best = max((k for k in base if k not in ("directed_degree_product", "reciprocity")), key=lambda k: base[k]["auc"])
    for name, b in (("best undirected heuristic", base[best]), ("directed degree product",
                                                                base["directed_degree_product"]),
                    ("reciprocity", base["reciprocity"])):
        out[name] = {"auc": b["auc"], "ap": b["ap"], "reverse_auc": b.get("reverse_auc") or 0.5, "s_per_epoch": None}
    return out


def defaults(n: int, seeds: list[int]) -> None:
    """The default command, ``gaescale.train(data, directed=True)``, with the symmetric part off and on, side by
    side on the same splits of each graph of :data:`DEFAULT_GRAPHS`; what ``auto`` chose; the best heuristic."""
    import gaescale
    from gaescale.data.readers import EdgeList
    print("\n| graph | reciprocity | symmetric part | test AUC | test AP | reverse AUC | filtered MRR | auto | "
          "best heuristic: AUC / AP |\n|---|---:|---|---:|---:|---:|---:|---|---|")
    for gname, make in DEFAULT_GRAPHS.items():
        ei = make(n, np.random.default_rng(100))
        r = DiGraph.from_edge_index(ei, n).reciprocity
        chosen = _auto_choice(ei, n, seeds)
        for sym in ("off", "on"):
            ms = [gaescale.train(data=EdgeList(ei, n, None, source=gname), directed=True, directed_symmetric=sym,
                                 seed=s, quiet=True, report=False, checkpoint_every=0).metrics for s in seeds]
            best = max(ms[0]["baselines"], key=lambda k: statistics.mean(m["baselines"][k]["auc"] for m in ms))
            cell = lambda f, ms=ms: _mean_std([f(m) for m in ms])  # noqa: E731
            heur = (f"{best}: {statistics.mean(m['baselines'][best]['auc'] for m in ms):.4f} / "
                    f"{statistics.mean(m['baselines'][best]['ap'] for m in ms):.4f}")
            print(f"| {gname} | {r:.3f} | {sym} | {cell(lambda m: m['test_auc'])} | {cell(lambda m: m['test_ap'])} | "
                  f"{cell(lambda m: m['reverse_auc'] or 0.5)} | {cell(lambda m: m['filtered_mrr'])} | "
                  f"{'<-' if chosen == sym else ''} | {heur} |", flush=True)


def weighted_table(n: int, seeds: list[int], noise_weight: float = 0.1) -> None:
    """Does ``--weighted`` help a directed graph whose weights mark its noise? Per seed, 10% of the citation graph's
    edges are hidden (positives, against as many ordered non-edges); the training graph is the other 90% (weight 1)
    plus as many random ordered non-edges of weight ``noise_weight``; the default directed command trains on it
    unweighted and weighted (and on the real 90% alone, ``clean``), and scores the hidden pairs."""
    import gaescale
    from gaescale.data.readers import EdgeList
    from gaescale.training.evaluate import link_scores
    real = DiGraph.from_edge_index(citation(n, np.random.default_rng(100)), n)
    rows = {"clean (real edges only)": [], "noisy, unweighted": [], "noisy, --weighted": []}
    for seed in seeds:
        rng = np.random.default_rng(seed)
        edges = real.edge_index()[:, rng.permutation(real.num_edges)]
        cut = edges.shape[1] // 10
        hidden, kept = edges[:, :cut], edges[:, cut:]
        fake = sample_ordered_non_edges(kept.shape[1] + cut, real, rng)
        noise, hidden_neg = fake[:, :kept.shape[1]], fake[:, kept.shape[1]:]
        noisy = np.concatenate([kept, noise], axis=1)
        w = np.concatenate([np.ones(kept.shape[1]), np.full(noise.shape[1], noise_weight)]).astype(np.float32)
        cases = {"clean (real edges only)": (EdgeList(kept, n, None), False),
                 "noisy, unweighted": (EdgeList(noisy, n, None), False),
                 "noisy, --weighted": (EdgeList(noisy, n, None, edge_weight=w), True)}
        for name, (data, weighted) in cases.items():
            r = gaescale.train(data=data, directed=True, weighted=weighted, seed=seed, quiet=True, report=False,
                               checkpoint_every=0)
            z = torch.from_numpy(r.embeddings)
            auc, _ = link_scores(z, hidden, hidden_neg, decoder=SourceTarget())
            rows[name].append((auc, r.metrics["test_auc"]))
    print(f"\n| citation graph + as many noise edges of weight {noise_weight} | hidden real edges: AUC | "
          "run's test AUC (noise included) |\n|---|---:|---:|")
    for name, vals in rows.items():
        print(f"| {name} | {_mean_std([v[0] for v in vals])} | {_mean_std([v[1] for v in vals])} |")


def _auto_choice(ei: np.ndarray, n: int, seeds: list[int]) -> str:
    """What ``directed_symmetric='auto'`` resolves to on the training graph of the first seed's split."""
    from gaescale.directed.kind import resolve_symmetric
    split = split_directed(DiGraph.from_edge_index(ei, n), 0.05, 0.10, seed=seeds[0])
    return resolve_symmetric(TrainConfig(directed=True), split.train_graph(), lambda m: None).directed_symmetric


def dense_timing(n: int, d: int, repeats: int = 3) -> None:
    """The exact all-pairs term (value and gradient) of the undirected ``z: (N, d)`` (tiles on and above the
    diagonal) against the directed ``[z_s | z_t]: (N, 2d)`` (every tile), side by side, best of ``repeats``."""
    z = torch.randn(n, 2 * d)
    times = {}
    undirected = lambda: dense_term(z[:, :d].clone().requires_grad_(), KINDS["bce"], "exact")  # noqa: E731
    directed = lambda: directed_dense_term(z.clone().requires_grad_(), KINDS["bce"], "exact")  # noqa: E731
    for name, fn in (("undirected (N, d)", undirected), ("directed [z_s | z_t] (N, 2d)", directed)):
        best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            fn().backward()
            best = min(best, time.perf_counter() - t)
        times[name] = best
    print(f"\n| exact all-pairs term, N = {n:,}, d = {d} | seconds (value + gradient) |\n|---|---:|")
    for name, t in times.items():
        print(f"| {name} | {t:.3f} |")
    print(f"| ratio directed / undirected | {times['directed [z_s | z_t] (N, 2d)'] / times['undirected (N, d)']:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=3000)
    ap.add_argument("--epochs", type=int, default=150)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--only", choices=("graphs", "dense", "defaults", "weighted"),
                    help="only the graphs' table, the dense-term timing, the default command's table or the "
                         "weighted table")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"machine: {platform.machine()}, {torch.get_num_threads()} torch thread(s), torch {torch.__version__}; "
          f"{args.nodes:,} nodes, {args.epochs} epochs, seeds {seeds}")
    if args.only == "defaults":
        return defaults(args.nodes, seeds)
    if args.only == "weighted":
        return weighted_table(args.nodes, seeds)
    if args.only != "graphs":
        dense_timing(4000, 16)
    if args.only == "dense":
        return
    print("\n| graph | edges | model | test AUC | test AP | reverse AUC | s/epoch |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for gname, make in GRAPHS.items():
        graph = DiGraph.from_edge_index(make(args.nodes, np.random.default_rng(100)), args.nodes)
        t = time.perf_counter()
        runs = [run(graph, s, args.epochs) for s in seeds]
        for name in runs[0]:
            cell = lambda k, name=name, runs=runs: _mean_std([r[name][k] for r in runs])  # noqa: E731
            sec = "" if runs[0][name]["s_per_epoch"] is None else \
                f"{statistics.median(r[name]['s_per_epoch'] for r in runs):.3f}"
            print(f"| {gname} | {graph.num_edges:,} | {name} | {cell('auc')} | {cell('ap')} | {cell('reverse_auc')} | "
                  f"{sec} |")
        print(f"<!-- {gname}: {time.perf_counter() - t:.0f} s -->")


def _mean_std(values) -> str:
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values) if len(values) > 1 else 0:.4f}"


if __name__ == "__main__":
    main()
