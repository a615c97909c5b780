"""A PyG encoder under gaescale's loss at 770k nodes, side by side with gaescale's own GCN and PyG's GAE recipe.

The seed user's ``GcnNet`` (torch_geometric GCNConv 8 -> 16 -> 16 -> 8, ReLU between) trained on
``mse(A, sigmoid(Z Z^T))`` (``reconstruction_loss(kind="mse")``, the inner-product decoder) two ways: its own
training loop calling ``gaescale.reconstruction_loss``, and ``gaescale.train(encoder=PyGEncoder(net))``; next to
gaescale's own GCN 8-16-16-8 with the same loss and decoder, and PyG's GAE recipe (bench/pyg_gae.py: GCNConv,
``GAE.recon_loss``). Each case in its own fresh subprocess, one after the other, on the same graph:

    .venv-bench/bin/python bench/bench_pyg_encoder.py --epochs 3 [--nodes N --edges E --threads T]

Prints a Markdown table (median s/epoch, first epoch, peak RSS, test AUC) and the ratios to gaescale's GCN.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent
GiB = 2 ** 30
CASES = {"gaescale GCN, train(loss=mse)": "gcn", "GcnNet via train(encoder=PyGEncoder(net))": "adapter",
         "GcnNet, own loop + reconstruction_loss": "loop", "PyG GAE recipe (pyg_gae.py, BCE)": "recipe"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--nodes", type=int, default=770_000)
    p.add_argument("--edges", type=int, default=4_600_000, help="undirected edges")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--case", choices=sorted(CASES.values()), help="run one case in this process, print JSON")
    return p.parse_args(argv)


def gcn_net():
    from torch_geometric.nn import GCNConv

    class GcnNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList(GCNConv(a, b) for a, b in ((8, 16), (16, 16), (16, 8)))

        def forward(self, x, edge_index):
            for i, conv in enumerate(self.convs):
                x = conv(x, edge_index)
                if i < len(self.convs) - 1:
                    x = x.relu()
            return x
    return GcnNet()


def via_train(args, g, adapter: bool) -> dict:
    """gaescale.train on the graph: its own GCN, or GcnNet through PyGEncoder."""
    import gaescale
    opts = dict(loss="mse", decoder="inner", epochs=args.epochs, eval_every=args.epochs, patience=0, warmup=0,
                seed=0, quiet=True, report=False, threads=args.threads)
    if adapter:
        from torch_geometric.data import Data

        from gaescale.pyg import PyGEncoder
        torch.manual_seed(0)
        data = Data(x=torch.from_numpy(g.x), edge_index=torch.from_numpy(g.edge_index), num_nodes=g.num_nodes)
        r = gaescale.train(data=data, encoder=PyGEncoder(gcn_net()), **opts)
    else:
        r = gaescale.train(data=g, hidden="16,16", dim=8, **opts)
    m = r.metrics
    return {"seconds_per_epoch": m["seconds_per_epoch"], "first_epoch_seconds": m["history"][0]["seconds"],
            "test_auc": m["test_auc"], "peak_rss_bytes": m["peak_rss_bytes"]}


def own_loop(args, g) -> dict:
    """The worked example of docs/pyg.md: GcnNet's own loop, the loss through gaescale.reconstruction_loss."""
    import gaescale
    from gaescale.pyg import csr_edge_index
    from gaescale.training.evaluate import link_scores
    graph = gaescale.Graph.from_edge_index(g.edge_index, g.num_nodes)
    split = gaescale.split_edges(graph, 0.05, 0.10, seed=0)
    train_graph = split.train_graph()
    edge_index = csr_edge_index(train_graph.indptr, train_graph.indices)  # (2, 2E): both directions
    edges = torch.from_numpy(split.train)  # (2, E): each undirected training edge once
    x = torch.from_numpy(g.x)
    torch.manual_seed(0)
    net = gcn_net()
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    seconds = []
    for _ in range(args.epochs):
        t = time.perf_counter()
        opt.zero_grad()
        z = net(x, edge_index)
        loss = gaescale.reconstruction_loss(z, edges, g.num_nodes, kind="mse")
        loss.backward()
        opt.step()
        seconds.append(time.perf_counter() - t)
        print(f"[loop] loss {loss.item():.4f} {seconds[-1]:.2f}s", file=sys.stderr, flush=True)
    with torch.no_grad():
        z = net.eval()(x, edge_index)
    auc, _ = link_scores(z, split.test_pos, split.test_neg)
    return {"seconds_per_epoch": statistics.median(seconds), "first_epoch_seconds": seconds[0], "test_auc": auc,
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def one_case(args) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.case == "recipe":
        cmd = [sys.executable, str(BENCH / "pyg_gae.py"), "--nodes", str(args.nodes), "--edges", str(args.edges),
               "--hidden", "16,16", "--dim", "8", "--epochs", str(args.epochs), "--seed", "0",
               "--threads", str(args.threads)]
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])
    import gaescale
    g = gaescale.community_graph(args.nodes, args.edges, seed=0)
    return own_loop(args, g) if args.case == "loop" else via_train(args, g, adapter=args.case == "adapter")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.case:
        print(json.dumps(one_case(args)), flush=True)
        return 0
    results = {}
    for name, case in CASES.items():
        cmd = [sys.executable, __file__, "--case", case, "--epochs", str(args.epochs), "--nodes", str(args.nodes),
               "--edges", str(args.edges), "--threads", str(args.threads)]
        print(f"== {name}", file=sys.stderr, flush=True)
        t = time.perf_counter()
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
        results[name] = {**json.loads(out.strip().splitlines()[-1]), "wall_seconds": time.perf_counter() - t}
    base = results["gaescale GCN, train(loss=mse)"]["seconds_per_epoch"]
    print(f"{args.nodes:,} nodes, {args.edges:,} undirected edges, {args.epochs} epochs, GCN 8 -> 16 -> 16 -> 8, "
          f"threads: {args.threads or 'default'}; torch {torch.__version__}\n")
    print("| case | s/epoch (median) | first epoch (s) | x gaescale GCN | peak RSS (GiB) | test AUC | wall (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        print(f"| {name} | {r['seconds_per_epoch']:.3f} | {r['first_epoch_seconds']:.3f} | "
              f"{r['seconds_per_epoch'] / base:.1f}x | {r['peak_rss_bytes'] / GiB:.2f} | {r['test_auc']:.4f} | "
              f"{r['wall_seconds']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
