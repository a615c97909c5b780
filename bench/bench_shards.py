"""What sharding the training graph costs neighbour sampling: W processes (gloo on 127.0.0.1) draw the same
link batches (positive edges, as many uniform pairs, fan-outs per hop, the features of the computation
graph's nodes) from the whole graph held by each, and from their shards (:mod:`gaescale.parallel.shards`: the
entries and feature rows of other processes' nodes fetched with ``all_to_all``). Sampling only: no
encoder, no loss. Prints ms per batch on each side, their ratio, and the bytes a batch fetches.

Then evaluation: the embeddings of every node (GCN 8 -> 16 -> 16 -> 8, layer by layer, 65,536 rows at a
time) computed by one process over the whole graph (what rank 0 did before
:func:`gaescale.parallel.shards.embed_sharded`) and by every process for its own nodes, fetching its halo,
with rank 0 gathering them. Prints the seconds of each and the extra memory (peak resident memory during
the call less before it, polled every 5 ms) of the process computing everything and of the largest sharded
one.

    .venv/bin/python bench/bench_shards.py --nodes 300000 --num-edges 10000000 --processes 2 4
"""
from __future__ import annotations

import argparse
import os
import threading
import time
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bench_distributed import _port  # bench/ is on the path when run as a script


def _batch(graph, x, fanouts, batch, gen):
    from gaescale.graph import sorted_unique
    from gaescale.training.samplers import neighbor_subgraph, sample_edges
    pos, _ = sample_edges(graph, batch, gen)
    neg = torch.randint(0, graph.num_nodes, (2, batch), generator=gen).numpy()
    sub, _ = neighbor_subgraph(graph, sorted_unique(np.concatenate([pos, neg], axis=None)), fanouts, gen)
    return sub, x[torch.from_numpy(sub.node_ids)]


def _extra_memory(fn):
    """``(result, seconds, bytes)``: ``fn()``, its time, and the peak resident memory during it less before."""
    import psutil
    me, peak, done = psutil.Process(), [0], threading.Event()
    base = me.memory_info().rss

    def poll():
        while not done.is_set():
            peak[0] = max(peak[0], me.memory_info().rss)
            time.sleep(0.005)
    th = threading.Thread(target=poll, daemon=True)
    th.start()
    t = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - t
    done.set()
    th.join()
    return out, seconds, max(peak[0], me.memory_info().rss) - base


def _embedding(rank, graph, x, shards):
    """``{'whole': (s, bytes), 'sharded': (s, bytes)}`` of this rank (the whole graph's only on rank 0)."""
    from gaescale.encoders import GCN
    from gaescale.models import GAE
    from gaescale.parallel.shards import embed_sharded
    torch.manual_seed(0)
    model = GAE(GCN(x.shape[1], [16, 16, 8]))
    out = {}
    for name in ("whole", "sharded", "whole", "sharded"):  # alternating; the second counts
        dist.barrier()
        if name == "whole":
            z, sec, mem = _extra_memory(lambda: model.embed(x, graph, block=1 << 16) if rank == 0 else None)
            whole = z
        else:
            z, sec, mem = _extra_memory(lambda: embed_sharded(model, shards))
            if rank == 0:
                assert torch.allclose(z, whole, rtol=1e-4, atol=1e-5)
        dist.barrier()
        out[name] = (sec, mem)
    return out


def _worker(rank, world, port, args, queue):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=300))
    from gaescale.data.synthetic import community_graph
    from gaescale.graph import Graph
    from gaescale.parallel.runtime import Dist
    from gaescale.parallel.shards import partition
    data = community_graph(args.nodes, args.num_edges, seed=0)
    graph = Graph.from_edge_index(data.edge_index, data.num_nodes)
    x = torch.from_numpy(data.x.astype(np.float32))
    shards = partition(Dist(rank, world, "gloo"), graph, graph, x)
    sharded, features = shards.graph, shards.features
    fanouts = [int(f) for f in args.fanouts.split(",")]
    times = {}
    for name, g, feats in (("whole", graph, x), ("sharded", sharded, features), ("whole", graph, x),
                           ("sharded", sharded, features)):  # twice each, alternating; the second counts
        gen = torch.Generator().manual_seed(rank + 1)
        dist.barrier()
        t = time.perf_counter()
        nodes = 0
        for _ in range(args.batches):
            sub, rows = _batch(g, feats, fanouts, args.batch_size, gen)
            nodes += sub.num_nodes
        times[name] = ((time.perf_counter() - t) / args.batches, nodes / args.batches)
    dist.barrier()
    embedding = _embedding(rank, graph, x, shards) if args.embed else None
    every = [None] * world
    dist.all_gather_object(every, embedding)
    if rank == 0:
        queue.put({**times, "dim": x.shape[1], "embedding": every})
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=300_000)
    ap.add_argument("--num-edges", type=int, default=10_000_000)
    ap.add_argument("--processes", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--batch-size", type=int, default=65_536)
    ap.add_argument("--fanouts", default="5,5,5")
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--no-embed", dest="embed", action="store_false", help="sampling only")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    print(f"{args.nodes:,} nodes, {args.num_edges:,} edges, batches of {args.batch_size:,} edges and as many "
          f"uniform pairs, fan-outs {args.fanouts}, {os.cpu_count()} cores, 1 thread per process\n")
    print("| processes | nodes per batch | whole graph (ms/batch) | sharded (ms/batch) | sharded / whole | "
          "bytes fetched per batch, at most (MB) |")
    print("|---:|---:|---:|---:|---:|---:|")
    embeddings = []
    for w in args.processes:
        queue = ctx.Queue()
        mp.start_processes(_worker, args=(w, _port(), args, queue), nprocs=w, start_method="spawn")
        t = queue.get()
        embeddings.append((w, t["embedding"]))
        (whole, nodes), (sharded, _) = t["whole"], t["sharded"]
        # a request is an int64 key and its answer an int32 entry or a float32 feature row
        fanout_total = sum(int(f) for f in args.fanouts.split(","))
        bound = (2 * args.batch_size * 12 + nodes * fanout_total * 12 + nodes * (8 + 4 * t["dim"])) / 1e6
        print(f"| {w} | {nodes:,.0f} | {whole * 1e3:.0f} | {sharded * 1e3:.0f} | {sharded / whole:.2f}x "
              f"| {bound:.0f} |", flush=True)
    if not args.embed:
        return
    print("\n| processes | one process, whole graph (s) | extra memory (MB) | every process its own nodes (s) | "
          "whole / sharded | extra memory of the largest (MB) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for w, ranks in embeddings:
        (whole, whole_mem), sharded = ranks[0]["whole"], max(r["sharded"][0] for r in ranks)
        largest = max(r["sharded"][1] for r in ranks)
        print(f"| {w} | {whole:.2f} | {whole_mem / 1e6:.0f} | {sharded:.2f} | {whole / sharded:.2f}x "
              f"| {largest / 1e6:.0f} |")


if __name__ == "__main__":
    main()
