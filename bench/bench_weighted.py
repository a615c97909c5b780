"""Does ``--weighted`` change held-out AUC? Cora with noise edges whose weights say they are noise.

    .venv/bin/python bench/bench_weighted.py [--data ../shared/data] [--seeds 3] [--noise 1.0] [--noise-weight 0.1]

Cora has no weights, so this gives it meaningful ones: per seed, 10% of its real edges are hidden (the
evaluation's positives, with as many non-edges of the real graph as negatives), and the training graph is
the other 90% (weight 1) plus ``--noise`` times as many random non-edges (weight ``--noise-weight``):
unreliable links that the weights mark. Each configuration trains gaescale's GCN 32 -> 16 (features, 200
epochs, lr 0.01, its own 5% / 5% validation / test split of the graph it is given) on that graph;

- ``hidden AUC``: the hidden real edges against the non-edges (the question: are real links recovered better?);
- ``run's test AUC``: gaescale's own held-out edges of the noisy graph, noise edges included (what
  ``metrics.json`` reports).

``clean`` trains on the 90% real edges alone (the ceiling). Means and standard deviations over seeds; every
configuration sees the same graphs per seed.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path

import numpy as np

import gaescale
from gaescale.data.readers import read_edges

CONFIGS = {
    "clean (real edges only), unweighted": dict(graph="clean", weighted=False, loss="bce"),
    "noisy, unweighted, bce": dict(graph="noisy", weighted=False, loss="bce"),
    "noisy, --weighted, bce": dict(graph="noisy", weighted=True, loss="bce"),
    "noisy, unweighted, mse": dict(graph="noisy", weighted=False, loss="mse"),
    "noisy, --weighted, mse": dict(graph="noisy", weighted=True, loss="mse"),
}


def graphs(real, num_nodes: int, x, seed: int, noise: float, noise_weight: float):
    """``(clean, noisy, hidden_pos, hidden_neg)`` for one seed: EdgeLists and ``(2, k)`` pairs."""
    rng = np.random.default_rng(seed)
    e = real.shape[1]
    perm = rng.permutation(e)
    hidden, kept = real[:, perm[:e // 10]], real[:, perm[e // 10:]]
    known = set((real[0] * num_nodes + real[1]).tolist())

    def non_edges(count: int, avoid: set) -> np.ndarray:
        out = []
        while len(out) < count:
            u, v = sorted(rng.integers(0, num_nodes, 2).tolist())
            if u != v and u * num_nodes + v not in avoid:
                avoid.add(u * num_nodes + v)
                out.append((u, v))
        return np.array(out, np.int64).T

    taken = set(known)
    noisy_pairs = non_edges(int(noise * kept.shape[1]), taken)
    hidden_neg = non_edges(hidden.shape[1], taken)
    clean = gaescale.EdgeList(kept, num_nodes, None, x=x, source="cora (90% of the real edges)")
    w = np.concatenate([np.ones(kept.shape[1]), np.full(noisy_pairs.shape[1], noise_weight)]).astype(np.float32)
    noisy = dataclasses.replace(clean, edge_index=np.concatenate([kept, noisy_pairs], axis=1), edge_weight=w,
                                source="cora + noise")
    return clean, noisy, hidden, hidden_neg


def score(result, pairs: np.ndarray) -> np.ndarray:
    """The run's logits of ``pairs: (2, k)``: ``z_u . z_v`` (+ ``b_u + b_v`` with the bias decoder)."""
    z = result.embeddings
    s = (z[pairs[0]] * z[pairs[1]]).sum(1)
    return s if result.node_bias is None else s + result.node_bias[pairs[0]] + result.node_bias[pairs[1]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--noise", type=float, default=1.0, help="noise edges per kept real edge")
    ap.add_argument("--noise-weight", type=float, default=0.1)
    ap.add_argument("--epochs", type=int, default=200)
    args = ap.parse_args()
    from sklearn.metrics import roc_auc_score
    cora = read_edges(Path(args.data) / "cora.npz")
    rows: dict[str, list[tuple[float, float, float]]] = {k: [] for k in CONFIGS}
    for seed in range(args.seeds):
        clean, noisy, pos, neg = graphs(cora.edge_index, cora.num_nodes, cora.x, seed, args.noise, args.noise_weight)
        for name, c in CONFIGS.items():
            t = time.perf_counter()
            r = gaescale.train(data=clean if c["graph"] == "clean" else noisy, weighted=c["weighted"], loss=c["loss"],
                               encoder="gcn", hidden="32", dim=16, lr=0.01, epochs=args.epochs, seed=seed,
                               val_fraction=0.05, test_fraction=0.05, quiet=True, report=False)
            y = np.concatenate([np.ones(pos.shape[1]), np.zeros(neg.shape[1])])
            hidden_auc = roc_auc_score(y, np.concatenate([score(r, pos), score(r, neg)]))
            rows[name].append((hidden_auc, r.metrics["test_auc"], time.perf_counter() - t))
            print(f"seed {seed} {name}: hidden AUC {hidden_auc:.4f}, run's test AUC {r.metrics['test_auc']:.4f}",
                  flush=True)

    def ms(v):
        return f"{statistics.mean(v):.4f} ± {statistics.stdev(v) if len(v) > 1 else 0:.4f}"
    print(f"\nCora + {args.noise:g}x noise edges of weight {args.noise_weight:g}, {args.seeds} seeds, "
          f"{args.epochs} epochs\n")
    print("| configuration | hidden real edges: AUC | run's test AUC (noise included) | s per run |")
    print("|---|---:|---:|---:|")
    for name, v in rows.items():
        print(f"| {name} | {ms([a for a, _, _ in v])} | {ms([b for _, b, _ in v])} | "
              f"{statistics.mean([s for _, _, s in v]):.1f} |")


if __name__ == "__main__":
    main()
