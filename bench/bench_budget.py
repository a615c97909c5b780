"""The default command's time budget on a 300,000-node / 3,000,000-edge graph, with and without features.

    .venv/bin/python bench/bench_budget.py [--nodes 300000 --edges 3000000]

Issue 18 asks that such a graph trains in under 5 minutes on 2 cores with no tuning flags. The graph is
``gaescale.community_graph`` (communities, heavy-tailed degrees): once with its 8 features (``--encoder auto``:
the GCN 32 -> 16), once without (the linear encoder, d = 64, with a learnt (N, 64) table). Each configuration runs
in its own process, so that its peak memory is its own. Prints one table row per run: the seconds of the whole
``train`` call (generation excluded), epochs, test AUC / AP, the best heuristic, the filtered ranking next to the
best-ranking heuristic's, peak RSS with training's and evaluation's own peaks (``metrics.json``).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time


def one(nodes: int, edges: int, features: bool) -> dict:
    import gaescale
    data = gaescale.community_graph(nodes, edges)
    if not features:
        data = dataclasses.replace(data, x=None)
    t = time.perf_counter()
    r = gaescale.train(data=data, quiet=True, report=False, checkpoint_every=0)
    m = r.metrics
    best = max(m["baselines"].items(), key=lambda kv: kv[1]["auc"])
    ranker = max(m["baselines"].items(), key=lambda kv: kv[1]["filtered_mrr"])
    gib = lambda key: (m.get(key) or 0) / 2**30  # noqa: E731
    return dict(features=features, seconds=time.perf_counter() - t, epochs=m["epochs"], best_epoch=m["best_epoch"],
                s_per_epoch=m["seconds_per_epoch"], test_auc=m["test_auc"], test_ap=m["test_ap"],
                heuristic=best[0], heuristic_auc=best[1]["auc"], peak_gib=m["peak_rss_bytes"] / 2**30,
                mrr=m["filtered_mrr"], hits10=m["filtered_hits@10"], ranker=ranker[0],
                ranker_mrr=ranker[1]["filtered_mrr"], ranker_hits10=ranker[1]["filtered_hits@10"],
                training_gib=gib("training_peak_rss_bytes"), evaluation_gib=gib("evaluation_peak_rss_bytes"),
                encoder=r.model.encoder.__class__.__name__)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=300_000)
    ap.add_argument("--edges", type=int, default=3_000_000)
    ap.add_argument("--one", choices=("features", "none"), help=argparse.SUPPRESS)  # the child process
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.nodes, args.edges, args.one == "features")))
        return
    print("| input | seconds | epochs (best) | s/epoch | test AUC | test AP | best heuristic AUC | filtered MRR / "
          "Hits@10 | best heuristic MRR / Hits@10 | peak RSS GiB (training / evaluation) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for which in ("features", "none"):
        out = subprocess.run([sys.executable, __file__, "--nodes", str(args.nodes), "--edges", str(args.edges),
                              "--one", which], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {'8 features' if r['features'] else 'no features'} | {r['seconds']:.0f} | {r['epochs']} "
              f"({r['best_epoch']}) | {r['s_per_epoch']:.2f} | {100 * r['test_auc']:.1f} | {100 * r['test_ap']:.1f} "
              f"| {r['heuristic']} {100 * r['heuristic_auc']:.1f} | {100 * r['mrr']:.1f} / {100 * r['hits10']:.1f} "
              f"| {r['ranker']} {100 * r['ranker_mrr']:.1f} / {100 * r['ranker_hits10']:.1f} "
              f"| {r['peak_gib']:.2f} ({r['training_gib']:.2f} / {r['evaluation_gib']:.2f}) |", flush=True)


if __name__ == "__main__":
    main()
