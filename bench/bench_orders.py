"""Where the superlinear epoch cost goes: the demo's graph and model trained in several node orders, per size.

    .venv/bin/python bench/bench_orders.py [--nodes 770000,3080000,10000000] [--epochs 5]
        [--orders none,degree,bfs,rcm,community,metis] [--threads T] [--metis-all]

The demo numbers its nodes by a random permutation, so the rows that a sparse product gathers for one row lie
anywhere in the (N, 16) matrix: cheap while it fits the CPU caches, a cache miss each once it does not. Each size
runs in a fresh subprocess: the community graph of bench_growth.py (``round(N * 4.6M / 770k)`` edges); then for each
order (:func:`gaescale.data.order.locality_order`; ``none``: as generated; ``metis`` skipped above 3.1M nodes unless
``--metis-all``) it times the order, renumbers the graph (edges through the inverse permutation, feature rows by the
permutation), times one forward 16-wide product ``gcn_operator @ randn(N, 16)`` (median of 5 after one warm-up), and
trains it exactly as bench_growth.py does (GCN 8-16-16-8, full batch, structure off, no evaluation), after one
unrecorded 1-epoch training on a 2,000-node graph that takes the process's one-off costs off the first order.

Prints a Markdown table: the order's seconds, the product's, seconds per epoch (median) and the fastest epoch, the
speed-up against ``none`` at the same size (by median), the training phase's peak RSS, and growth against linear
relative to the smallest size in the same order, ``(t_N / t_first) / (N / N_first)`` (1.00: linear). Raw results go
to bench/results/orders-<timestamp>.json.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
GiB = 2 ** 30
METIS_LIMIT = 3_100_000


def _product_seconds(graph, n: int, repeats: int = 5) -> float:
    """Median seconds of one ``graph.gcn_operator @ x`` with ``x: (n, 16)`` float32, after one warm-up product."""
    import torch
    op, x = graph.gcn_operator, torch.randn(n, 16)
    op @ x
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        op @ x
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _one_order(data, graph, order: str, epochs: int, threads: int) -> dict:
    """Order, renumber, time the product and train, for one order of the graph ``data`` (its CSR ``graph``)."""
    import gaescale
    from gaescale.data.order import locality_order, renumber
    from gaescale.data.readers import EdgeList
    from gaescale.graph import Graph
    n, order_seconds, renumber_seconds = data.num_nodes, 0.0, 0.0
    if order != "none":
        t = time.perf_counter()
        perm = locality_order(graph.indptr, graph.indices, n, order, seed=0)
        order_seconds = time.perf_counter() - t
        t = time.perf_counter()
        data = EdgeList(renumber(data.edge_index, perm), n, None, data.x[perm], source=f"{data.source}, {order} order")
        renumber_seconds = time.perf_counter() - t
        graph = Graph.from_edge_index(data.edge_index, n)
    product = _product_seconds(graph, n)
    del graph
    gc.collect()
    result = gaescale.train(data=data, hidden="16,16", dim=8, epochs=epochs, eval_every=epochs + 1, warmup=0,
                            strategy="full", structure="off", quiet=True, report=False, checkpoint_every=0,
                            threads=threads, test=False)
    m = result.metrics
    epoch_seconds = [h["seconds"] for h in m["history"]]
    return {"order": order, "order_seconds": order_seconds, "renumber_seconds": renumber_seconds,
            "product_seconds": product, "seconds_per_epoch": m["seconds_per_epoch"], "epoch_seconds": epoch_seconds,
            "fastest_epoch_seconds": min(epoch_seconds), "training_peak_rss_bytes": m["training_peak_rss_bytes"],
            "torch_threads": m["torch_threads"]}


def one(n: int, epochs: int, threads: int, orders: list[str]) -> list[dict]:
    """One size in this process: generate once, then every order in turn (a JSON list on stdout)."""
    import torch

    import gaescale
    from gaescale.cli import demo_edges
    from gaescale.data.synthetic import community_graph
    from gaescale.graph import Graph
    if threads:
        torch.set_num_threads(threads)
    e = demo_edges(n)
    t = time.perf_counter()
    data = community_graph(n, e, seed=0)
    generated = time.perf_counter() - t
    graph = Graph.from_edge_index(data.edge_index, n, canonical=True)
    # a first training pays the process's one-off costs (imports, thread pools, allocator): not the first order's
    gaescale.train(data=community_graph(2000, demo_edges(2000), seed=1), hidden="16,16", dim=8, epochs=1,
                   eval_every=2, warmup=0, strategy="full", structure="off", quiet=True, report=False,
                   checkpoint_every=0, threads=threads, test=False)
    rows = []
    for order in orders:
        row = _one_order(data, graph, order, epochs, threads)
        rows.append({"nodes": n, "edges": e, "generate_seconds": generated, **row})
        print(f"  {n:,} nodes, {order}: order {row['order_seconds']:.2f} s, product {row['product_seconds']:.4f} s, "
              f"{row['seconds_per_epoch']:.3f} s/epoch", file=sys.stderr, flush=True)
        gc.collect()
    return rows


def table(rows: list[dict]) -> str:
    """The Markdown table of every (size, order) row."""
    none = {r["nodes"]: r["seconds_per_epoch"] for r in rows if r["order"] == "none"}
    first: dict[str, dict] = {}
    lines = ["| nodes | order | order s | product s | s/epoch (median) | fastest epoch | speed-up vs none | "
             "training peak RSS | growth vs linear |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        f = first.setdefault(r["order"], r)
        growth = (r["seconds_per_epoch"] / f["seconds_per_epoch"]) / (r["nodes"] / f["nodes"])
        speed = f"{none[r['nodes']] / r['seconds_per_epoch']:.2f}x" if r["nodes"] in none else "-"
        rss = r["training_peak_rss_bytes"]
        lines.append(f"| {r['nodes']:,} | {r['order']} | {r['order_seconds']:.2f} | {r['product_seconds']:.4f} | "
                     f"{r['seconds_per_epoch']:.3f} | {r['fastest_epoch_seconds']:.3f} | {speed} | "
                     f"{'-' if rss is None else f'{rss / GiB:.2f} GiB'} | {growth:.2f}x |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", default="770000,3080000,10000000", help="comma-separated node counts")
    p.add_argument("--orders", default="none,degree,bfs,rcm,community,metis", help="comma-separated orders")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--metis-all", action="store_true", help=f"run metis above {METIS_LIMIT:,} nodes too")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the subprocess of one size
    args = p.parse_args(argv)
    orders = args.orders.split(",")
    if args.one:
        print(json.dumps(one(args.one, args.epochs, args.threads, orders)))
        return 0
    rows = []
    for n in (int(s) for s in args.nodes.split(",")):
        mine = [o for o in orders if o != "metis" or args.metis_all or n <= METIS_LIMIT]
        if len(mine) < len(orders):
            print(f"{n:,} nodes: metis skipped (above {METIS_LIMIT:,} nodes; --metis-all runs it)", file=sys.stderr)
        cmd = [sys.executable, __file__, "--one", str(n), "--epochs", str(args.epochs), "--threads", str(args.threads),
               "--orders", ",".join(mine)]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)  # progress goes to stderr as it comes
        if done.returncode:
            print(f"{n:,} nodes failed (exit {done.returncode})", file=sys.stderr)
            return 1
        rows += json.loads(done.stdout.strip().splitlines()[-1])
    print(table(rows))
    out = BENCH / "results" / f"orders-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    print(f"\nraw results: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
