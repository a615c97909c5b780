"""Link-prediction quality on real graphs, mean and std over seeds (the GAE paper protocol).

    .venv/bin/python bench/bench_quality.py [--data ../shared/data] [--seeds 10] [--graphs cora,email-enron]
    .venv-bench/bin/python bench/bench_quality.py --graphs cora --configs "GAE bce/sampled,PyG GAE,..."

Protocol: 85/5/10 split of undirected edges (as many sampled non-edges for validation and test), 200
epochs, Adam lr 0.01, GCN 32 -> 16, no early stop. ``--keep last`` (the default) scores the weights after the
last epoch, as the GAE paper's code reports them; ``--keep best-val`` the weights of the best validation AUC.
Each configuration runs once per seed (the seed fixes the split, the initialisation and the sampling).

The "PyG" configurations (they need torch_geometric: bench/setup_env.sh) train PyTorch Geometric's own
GAE / VGAE recipe (examples/autoencoder.py: GCNConv 32 -> 16, recon_loss on the training edges and as
many negatives from torch_geometric.utils.negative_sampling each epoch, KL / N for VGAE) on the very
split gaescale trains on with that seed, and are scored by the same code: the rows differ only by recipe.
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
PYG = {"PyG GAE": dict(variational=False, normalize=False), "PyG VGAE": dict(variational=True, normalize=False),
       # as PyG's example loads Cora: Planetoid(..., transform=NormalizeFeatures()), features summing to 1 per row
       "PyG GAE (NormalizeFeatures)": dict(variational=False, normalize=True),
       "PyG VGAE (NormalizeFeatures)": dict(variational=True, normalize=True)}


def pyg_run(path: Path, seed: int, epochs: int, keep: str, variational: bool, normalize: bool) -> dict[str, float]:
    """PyG's GAE / VGAE recipe on gaescale's split of ``path`` for ``seed``; the test scores of the weights
    ``keep`` says (``last`` or ``best-val``)."""
    import random

    import numpy as np
    import torch
    from torch_geometric.nn import GAE, VGAE, GCNConv
    from torch_geometric.utils import to_undirected

    from gaescale.training.evaluate import link_scores

    data = gaescale.read_edges(path)
    if data.x is None:
        raise SystemExit(f"{path.name} has no features: the PyG configurations need them (PyG's recipe has no "
                         "embedding table for featureless graphs)")
    split = gaescale.split_edges(gaescale.Graph.from_edge_index(data.edge_index, data.num_nodes), seed=seed)
    random.seed(seed)  # negative_sampling draws with Python's random and numpy as well as torch
    np.random.seed(seed)
    torch.manual_seed(seed)
    x = torch.from_numpy(np.asarray(data.x, dtype=np.float32))
    if normalize:
        x = x / x.sum(1, keepdim=True).clamp(min=1)
    train_pos = torch.from_numpy(split.train)
    edge_index = to_undirected(train_pos, num_nodes=data.num_nodes)

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = GCNConv(x.shape[1], 32, cached=True)
            self.conv_mu = GCNConv(32, 16, cached=True)
            self.conv_logstd = GCNConv(32, 16, cached=True) if variational else None

        def forward(self, x, edge_index):
            h = self.conv1(x, edge_index).relu()
            mu = self.conv_mu(h, edge_index)
            return (mu, self.conv_logstd(h, edge_index)) if variational else mu

    model = (VGAE if variational else GAE)(Encoder())
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    best, best_z, seconds = -1.0, None, []
    for epoch in range(epochs):
        t = time.perf_counter()
        model.train()
        opt.zero_grad()
        z = model.encode(x, edge_index)
        loss = model.recon_loss(z, train_pos)
        if variational:
            loss = loss + model.kl_loss() / data.num_nodes
        loss.backward()
        opt.step()
        seconds.append(time.perf_counter() - t)
        if keep == "last" and epoch < epochs - 1:
            continue  # only the last epoch's embedding is scored
        model.eval()
        with torch.no_grad():
            z = model.encode(x, edge_index)
        auc = link_scores(z, split.val_pos, split.val_neg)[0]
        if keep == "last" or auc > best:
            best, best_z = auc, z
    test_auc, test_ap = link_scores(best_z, split.test_pos, split.test_neg)
    return dict(test_auc=test_auc, test_ap=test_ap, seconds_per_epoch=statistics.median(seconds))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--graphs", default="cora,email-enron")
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help=f"comma-separated names from the table, or {', '.join(map(repr, PYG))}")
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--keep", choices=("last", "best-val"), default="last",
                    help="score the weights after the last epoch (the GAE paper), or those of the best validation AUC")
    args = ap.parse_args()
    unknown = [name for name in args.configs.split(",") if name not in CONFIGS and name not in PYG]
    if unknown:
        ap.error(f"unknown configuration(s) {unknown}; choose from {[*CONFIGS, *PYG]}")
    print(f"{args.seeds} seeds, {args.epochs} epochs, GCN 32 -> 16, lr 0.01, weights kept: {args.keep}\n")
    print("| graph | model / loss | test AUC (%) | test AP (%) | s/epoch | runs |\n|---|---|---:|---:|---:|---:|")
    for graph in args.graphs.split(","):
        path = Path(args.data) / f"{graph}.npz"
        for name in args.configs.split(","):
            aucs, aps, spe = [], [], []
            for seed in range(args.seeds):
                if name in PYG:
                    m = pyg_run(path, seed, args.epochs, args.keep, **PYG[name])
                else:
                    # evaluating only after the last epoch keeps the last weights
                    every = args.epochs if args.keep == "last" else 1
                    m = gaescale.train(edges=str(path), hidden="32", dim=16, lr=0.01, epochs=args.epochs, patience=0,
                                       eval_every=every, seed=seed, quiet=True, **CONFIGS[name]).metrics
                aucs.append(100 * m["test_auc"])
                aps.append(100 * m["test_ap"])
                spe.append(m["seconds_per_epoch"])
            sd = (lambda v: statistics.stdev(v) if len(v) > 1 else 0.0)  # noqa: E731
            print(f"| {graph} | {name} | {statistics.mean(aucs):.1f} ± {sd(aucs):.1f} | "
                  f"{statistics.mean(aps):.1f} ± {sd(aps):.1f} | {statistics.median(spe):.3f} | {len(aucs)} |",
                  flush=True)


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"\n({time.perf_counter() - start:.0f} s)")
