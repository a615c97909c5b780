"""Link-prediction quality on real graphs, mean and std over seeds (the GAE paper protocol).

    .venv/bin/python bench/bench_quality.py [--data ../shared/data] [--seeds 10] [--graphs cora,email-enron]

Protocol: 85/5/10 split of undirected edges (as many sampled non-edges for validation and test), 200
epochs, Adam lr 0.01, GCN 32 -> 16, the weights of the best validation AUC kept (no early stop).
Each configuration runs once per seed (the seed fixes the split, the initialisation and the sampling).
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import gaescale

CONFIGS = {
    "GAE weighted-bce/exact": dict(loss="weighted-bce", dense="exact"),
    "GAE bce/sampled": dict(loss="bce", dense="sampled"),
    "VGAE weighted-bce/exact": dict(loss="weighted-bce", dense="exact", variational=True),
    "VGAE bce/sampled": dict(loss="bce", dense="sampled", variational=True),
}
# The GAE paper reconstructs A + I (adj_label = adj_train + I in its code): --self-loops.
CONFIGS.update({f"{k} +I": dict(v, self_loops=True) for k, v in list(CONFIGS.items())})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--graphs", default="cora,email-enron")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated names from the table")
    ap.add_argument("--epochs", type=int, default=200)
    args = ap.parse_args()
    print(f"{args.seeds} seeds, {args.epochs} epochs, GCN 32 -> 16, lr 0.01\n")
    print("| graph | model / loss | test AUC (%) | test AP (%) | s/epoch | runs |\n|---|---|---:|---:|---:|---:|")
    for graph in args.graphs.split(","):
        path = Path(args.data) / f"{graph}.npz"
        for name in args.configs.split(","):
            aucs, aps, spe = [], [], []
            for seed in range(args.seeds):
                r = gaescale.train(edges=str(path), hidden="32", dim=16, lr=0.01, epochs=args.epochs, patience=0,
                                   seed=seed, quiet=True, **CONFIGS[name])
                aucs.append(100 * r.metrics["test_auc"])
                aps.append(100 * r.metrics["test_ap"])
                spe.append(r.metrics["seconds_per_epoch"])
            sd = (lambda v: statistics.stdev(v) if len(v) > 1 else 0.0)  # noqa: E731
            print(f"| {graph} | {name} | {statistics.mean(aucs):.1f} ± {sd(aucs):.1f} | "
                  f"{statistics.mean(aps):.1f} ± {sd(aps):.1f} | {statistics.median(spe):.3f} | {len(aucs)} |",
                  flush=True)


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"\n({time.perf_counter() - start:.0f} s)")
