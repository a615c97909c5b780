"""Directed link prediction: which decoder learns direction, measured side by side on the same directed splits.

    .venv/bin/python bench/bench_directed.py [--nodes 3000] [--epochs 150] [--seeds 0,1,2] [--threads 1]
                                             [--only graphs|dense]

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
(5 random out-edges per node, half of them also reversed). ``reverse_auc``: test edges (u, v) whose (v, u) is no
edge, scored against (v, u).
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np
import torch

from gaescale.config import TrainConfig
from gaescale.directed.graph import DiGraph, split_directed
from gaescale.directed.model import DirectedGAE, Gravity, SourceTargetEncoder, directed_dense_term
from gaescale.directed.pipeline import build_directed_model, reverse_auc
from gaescale.losses import KINDS, dense_term
from gaescale.run.pipeline import build_model
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


GRAPHS = {"dag": dag, "citation": citation, "reciprocal": reciprocal}


def models(n: int, seed: int):
    """``(name, model, trains on the symmetrised graph)``, each model's initial weights drawn from ``seed``."""
    makers = {"undirected": lambda: build_model(TrainConfig(encoder="linear", dim=DIM), None, n),
              "source/target": lambda: build_directed_model(TrainConfig(encoder="linear", dim=DIM, directed=True),
                                                            None, n),
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
    return out


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
    ap.add_argument("--only", choices=("graphs", "dense"), help="only the graphs' table, or only the dense-term timing")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"machine: {platform.machine()}, {torch.get_num_threads()} torch thread(s), torch {torch.__version__}; "
          f"{args.nodes:,} nodes, {args.epochs} epochs, seeds {seeds}")
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
            print(f"| {gname} | {graph.num_edges:,} | {name} | {cell('auc')} | {cell('ap')} | {cell('reverse_auc')} | "
                  f"{statistics.median(r[name]['s_per_epoch'] for r in runs):.3f} |")
        print(f"<!-- {gname}: {time.perf_counter() - t:.0f} s -->")


def _mean_std(values) -> str:
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values) if len(values) > 1 else 0:.4f}"


if __name__ == "__main__":
    main()
