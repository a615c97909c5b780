"""The default command against the link heuristics, on many graphs: what a user gets without tuning flags.

    .venv/bin/python bench/bench_defaults.py                       # the default recipe, 3 seeds, every graph
    .venv/bin/python bench/bench_defaults.py --graphs cora,hk-5k --seeds 1 \\
        --configs '{}' '{"encoder": "gcn"}' '{"encoder": "linear", "dim": 128}'

Each configuration (a JSON object of ``gaescale.train`` options; ``{}`` is the default command) trains once per seed
on each graph (the seed fixes the split, the initialisation and the sampling), and is scored on that run's own test
split next to Adamic-Adar, common neighbours and degree product, which every run computes on the same test pairs and
training graph (``metrics.json``'s ``baselines``). The table gives means and standard deviations over the seeds;
``val AUC / MRR`` (the last evaluation's filtered validation MRR, where the run selects by it) is what a default may
be chosen on, never ``test``. ``MRR`` is the filtered MRR of up to 1,000 test edges ranked against every node (known
edges removed). ``--jsonl FILE`` appends one line per run. ``--pyg`` adds PyTorch Geometric's GAE recipe on each
seed's same split (:mod:`pyg_recipe`; run with ``.venv-bench/bin/python`` after ``bash bench/setup_env.sh``), scored
next to the same heuristics.

Graphs: ``cora``, ``facebook`` (musae-facebook), ``enron`` (email-Enron) from ``--data`` (../shared/data),
and generated ones (networkx, fixed seeds): ``hk-5k``, ``hk-50k`` (Holme-Kim clustered power-law graphs),
``lfr-5k``, ``lfr-20k`` (LFR benchmark graphs, mixing 0.3, average degree 15), ``synth-20k``
(``gaescale.community_graph`` with its 8 features).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

import gaescale

SHARED = {"cora": "cora.npz", "facebook": "musae-facebook.npz", "enron": "email-enron.npz"}
ALL = ("cora", "facebook", "enron", "hk-5k", "lfr-5k", "lfr-20k", "synth-20k", "hk-50k")
STATS = ("auc", "ap", "filtered_mrr", "filtered_hits@10")
HEURISTICS = ("adamic_adar", "common_neighbours", "degree_product")


def _from_networkx(g) -> gaescale.EdgeList:
    import networkx as nx
    g = nx.convert_node_labels_to_integers(g)
    e = np.array([(min(u, v), max(u, v)) for u, v in g.edges() if u != v], dtype=np.int64).T
    return gaescale.EdgeList(edge_index=e, num_nodes=g.number_of_nodes(), x=None, node_ids=None, source="networkx")


def _lfr(n: int, seed: int):
    import networkx as nx
    for attempt in range(5):  # LFR's generator fails to converge for some seeds
        try:
            return nx.LFR_benchmark_graph(n, 2.5, 1.5, 0.3, average_degree=15, max_degree=int(n ** 0.5) * 2,
                                          min_community=20, max_community=n // 20, seed=seed + 10 * attempt)
        except nx.ExceededMaxIterations:
            continue
    raise SystemExit(f"networkx could not generate the LFR graph of {n} nodes")


def load(name: str, data_dir: Path) -> gaescale.EdgeList:
    import networkx as nx
    if name in SHARED:
        path = data_dir / SHARED[name]
        if not path.exists():
            raise SystemExit(f"{path} not found: pass --data DIR (the project's shared/data)")
        return gaescale.read_edges(path)
    makers = {"hk-5k": lambda: nx.powerlaw_cluster_graph(5000, 4, 0.5, seed=1),
              "hk-50k": lambda: nx.powerlaw_cluster_graph(50000, 5, 0.3, seed=2),
              "lfr-5k": lambda: _lfr(5000, 3), "lfr-20k": lambda: _lfr(20000, 4)}
    if name == "synth-20k":
        return gaescale.community_graph(20000, 120000)
    if name not in makers:
        raise SystemExit(f"unknown graph {name!r}; known: {', '.join(ALL)}")
    return _from_networkx(makers[name]())


def run(data, options: dict, seed: int) -> dict:
    t = time.perf_counter()
    r = gaescale.train(data=data, seed=seed, quiet=True, report=False, checkpoint_every=0, **options)
    m, b = r.metrics, r.metrics["baselines"]
    alone = m.get("embeddings_only", {})
    val_mrr = [h["val_mrr"] for h in m["history"] if h.get("val_mrr") is not None]  # the last evaluation's
    return dict(seed=seed, val_auc=m["val_auc"], val_mrr=val_mrr[-1] if val_mrr else None, test_auc=m["test_auc"],
                test_ap=m["test_ap"],
                mrr=m.get("filtered_mrr"), hits10=m.get("filtered_hits@10"), hits100=m.get("filtered_hits@100"),
                emb_mrr=alone.get("filtered_mrr"), emb_hits10=alone.get("filtered_hits@10"),
                best_epoch=m["best_epoch"], epochs=m["epochs"], seconds=time.perf_counter() - t,
                **{f"{k}_{s}": b[k].get(s) for k in b for s in STATS}, heuristic_seconds=b["adamic_adar"]["seconds"])


def run_pyg(data, seed: int) -> dict:
    """PyG's recipe on the split ``gaescale.train`` makes for ``seed``, with the heuristics on its test pairs."""
    from gaescale.training.heldout import baseline_metrics
    from pyg_recipe import pyg_recipe

    split = gaescale.split_edges(gaescale.Graph.from_edge_index(data.edge_index, data.num_nodes), seed=seed)
    r = pyg_recipe(data, split, seed)
    b = baseline_metrics(split.train_graph(), split, seed=seed)
    return dict(seed=seed, **r, **{f"{k}_{s}": b[k].get(s) for k in b for s in STATS})


def _ms(rows: list[dict], key: str) -> str:
    vals = [100 * r[key] for r in rows if r.get(key) is not None]
    if not vals:
        return "n/a"
    return f"{statistics.mean(vals):.1f} ± {statistics.stdev(vals):.1f}" if len(vals) > 1 else f"{vals[0]:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--graphs", default=",".join(ALL))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--configs", nargs="*", default=["{}"])
    ap.add_argument("--jsonl", type=Path)
    ap.add_argument("--pyg", action="store_true", help="add PyG's GAE recipe (needs .venv-bench)")
    args = ap.parse_args()
    head = ("| graph | config | val AUC / MRR | test AUC / AP | MRR / Hits@10 | embeddings only MRR / Hits@10 "
            "| Adamic-Adar AUC / AP / MRR / Hits@10 | common neighbours | degree product | wins AUC+AP "
            "| wins MRR+Hits@10 "
            "| epochs (best) | seconds (heuristics) |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for name in args.graphs.split(","):
        data = load(name, args.data)
        for spec in args.configs + (["pyg"] if args.pyg else []):
            if spec == "pyg":
                rows = [run_pyg(data, seed) for seed in range(args.seeds)]
            else:
                rows = [run(data, json.loads(spec), seed) for seed in range(args.seeds)]
            if args.jsonl:
                with args.jsonl.open("a") as fh:
                    fh.writelines(json.dumps(dict(graph=name, config=spec, **r)) + "\n" for r in rows)
            print(_row(name, "PyG GAE recipe" if spec == "pyg" else f"`{spec}`", rows), flush=True)


def _wins(rows: list[dict], ours: tuple[str, str], theirs: tuple[str, str]) -> str:
    """Seeds whose two figures are both above every heuristic's."""
    n = sum(all(r.get(a) is not None and r[a] > (r.get(f"{k}_{b}") or 0.0) for a, b in zip(ours, theirs)
                for k in HEURISTICS) for r in rows)
    return f"{n}/{len(rows)}"


def _row(name: str, label: str, rows: list[dict]) -> str:
    heur = [" / ".join(_ms(rows, f"{k}_{s}") for s in STATS) for k in HEURISTICS]
    secs = statistics.mean(r["seconds"] for r in rows)
    hsecs = [r["heuristic_seconds"] for r in rows if r.get("heuristic_seconds") is not None]
    return (f"| {name} | {label} | {_ms(rows, 'val_auc')} / {_ms(rows, 'val_mrr')} "
            f"| {_ms(rows, 'test_auc')} / {_ms(rows, 'test_ap')} | {_ms(rows, 'mrr')} / "
            f"{_ms(rows, 'hits10')} | {_ms(rows, 'emb_mrr')} / {_ms(rows, 'emb_hits10')} | {' | '.join(heur)} "
            f"| {_wins(rows, ('test_auc', 'test_ap'), ('auc', 'ap'))} "
            f"| {_wins(rows, ('mrr', 'hits10'), ('filtered_mrr', 'filtered_hits@10'))} "
            f"| {statistics.mean(r.get('epochs', 0) for r in rows):.0f} "
            f"({statistics.mean(r.get('best_epoch', 0) for r in rows):.0f}) "
            f"| {secs:.1f} ({statistics.mean(hsecs) if hsecs else 0:.1f}) |")


if __name__ == "__main__":
    main()
