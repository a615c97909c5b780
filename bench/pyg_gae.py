"""PyTorch Geometric's GAE recipe (as in PyG's examples/autoencoder.py), on gaescale's synthetic graph.

Prints exactly one JSON line to stdout at the end; progress goes to stderr.

    .venv-bench/bin/python bench/pyg_gae.py --epochs 20 [--nodes 770000 --edges 4600000]
"""
from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import sys
import time

import numpy as np
import torch
import torch_geometric
from torch_geometric.data import Data
from torch_geometric.nn import GAE, GCNConv
from torch_geometric.transforms import RandomLinkSplit
from torch_geometric.utils import to_undirected

from gaescale import community_graph


def log(msg: str) -> None:
    print(f"[pyg] {msg}", file=sys.stderr, flush=True)


class Encoder(torch.nn.Module):
    """GCNConv layers with ReLU between them (none after the last): in -> hidden... -> dim."""

    def __init__(self, in_dim: int, hidden: list[int], dim: int, cached: bool = False):
        super().__init__()
        dims = [in_dim, *hidden, dim]
        self.convs = torch.nn.ModuleList(GCNConv(a, b, cached=cached) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu()
        return x


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=770_000)
    p.add_argument("--edges", type=int, default=4_600_000, help="undirected edges")
    p.add_argument("--graph-seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--seed", type=int, default=0,
                   help="seed for torch, random and numpy (split, init, negative sampling)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--hidden", default="16,16", help="hidden widths, comma separated")
    p.add_argument("--dim", type=int, default=8, help="embedding dimension")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--cached", action="store_true",
                   help="GCNConv(cached=True), as in PyG's autoencoder example (normalisation computed once)")
    args = p.parse_args(argv)
    if args.epochs < 1:
        p.error("--epochs must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    # PyG's negative_sampling draws with Python's `random` (and numpy in places), not only torch: seed all three.
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    hidden = [int(h) for h in args.hidden.split(",") if h]

    t = time.perf_counter()
    graph = community_graph(args.nodes, args.edges, seed=args.graph_seed)
    graph_seconds = time.perf_counter() - t
    log(f"graph: {graph.num_nodes:,} nodes, {graph.edge_index.shape[1]:,} edges [{graph_seconds:.1f}s]")

    t = time.perf_counter()
    edge_index = to_undirected(torch.from_numpy(graph.edge_index), num_nodes=graph.num_nodes)
    data = Data(x=torch.from_numpy(graph.x), edge_index=edge_index, num_nodes=graph.num_nodes)
    split = RandomLinkSplit(num_val=0.05, num_test=0.1, is_undirected=True, split_labels=True,
                            add_negative_train_samples=False)
    train_data, val_data, test_data = split(data)
    setup_seconds = time.perf_counter() - t
    log(f"split: {train_data.pos_edge_label_index.size(1):,} train / {val_data.pos_edge_label_index.size(1):,} val"
        f" / {test_data.pos_edge_label_index.size(1):,} test edges [{setup_seconds:.1f}s]")

    model = GAE(Encoder(data.num_features, hidden, args.dim, cached=args.cached))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    x, train_ei, train_pos = train_data.x, train_data.edge_index, train_data.pos_edge_label_index

    seconds: list[float] = []
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        model.train()
        opt.zero_grad()
        z = model.encode(x, train_ei)
        loss = model.recon_loss(z, train_pos)
        loss.backward()
        opt.step()
        seconds.append(time.perf_counter() - t0)
        log(f"epoch {epoch:3d}  loss {loss.item():.4f}  {seconds[-1]:.3f}s")

    t = time.perf_counter()
    model.eval()
    with torch.no_grad():
        z = model.encode(x, train_ei)
    auc, ap = model.test(z, test_data.pos_edge_label_index, test_data.neg_edge_label_index)
    log(f"test AUC {auc:.4f}  AP {ap:.4f} [{time.perf_counter() - t:.1f}s]")

    result = {
        "impl": "pyg", "epochs": args.epochs,
        "seconds_per_epoch": statistics.median(seconds), "first_epoch_seconds": seconds[0],
        "epoch_seconds": seconds, "test_auc": float(auc), "test_ap": float(ap),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "setup_seconds": setup_seconds, "graph_seconds": graph_seconds,
        "torch_version": torch.__version__, "pyg_version": torch_geometric.__version__,
        "torch_threads": torch.get_num_threads(), "cached": args.cached,
        "num_nodes": graph.num_nodes, "num_edges": int(graph.edge_index.shape[1]),
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
